package storage_test

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/synclane/synclane/storage"
	"github.com/synclane/synclane/storage/memory"
)

func TestBackendRoles(t *testing.T) {
	names := storage.RoleNames()
	typ := reflect.TypeFor[storage.Backend]()
	if len(names) != typ.NumField() || names[0] != "Lifecycle" || names[len(names)-1] != "ImageCopier" {
		t.Fatalf("RoleNames = %v, want every field of storage.Backend in order", names)
	}
	for _, r := range storage.RequiredRoles() {
		if !slices.Contains(names, r) {
			t.Fatalf("required role %q is not a Backend field", r)
		}
	}
	var none storage.Backend
	if got := none.Roles(); len(got) != 0 {
		t.Fatalf("zero Backend has roles %v", got)
	}
	err := none.CheckRequired()
	if err == nil || !strings.Contains(err.Error(), strings.Join(storage.RequiredRoles(), ", ")) {
		t.Fatalf("zero Backend: CheckRequired = %v, want every required role named", err)
	}
	b := memory.New().Backend()
	if err := b.CheckRequired(); err != nil {
		t.Fatalf("memory: %v", err)
	}
	b.Log, b.Blobs = nil, nil
	if b.Has("Log") || b.Has("Blobs") || !b.Has("Rows") {
		t.Fatalf("Has after dropping Log and Blobs: Log %v Blobs %v Rows %v", b.Has("Log"), b.Has("Blobs"), b.Has("Rows"))
	}
	if got := b.Roles(); slices.Contains(got, "Log") || slices.Contains(got, "Blobs") || !slices.Contains(got, "Rows") {
		t.Fatalf("Roles after dropping Log and Blobs = %v", got)
	}
	if err := b.CheckRequired(); err == nil || !strings.Contains(err.Error(), "Log") || strings.Contains(err.Error(), "Blobs") {
		t.Fatalf("CheckRequired without Log = %v, want Log named (and not Blobs, which is optional)", err)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("Has of a name that is no role did not panic")
		}
	}()
	b.Has("Store")
}
