package storage

import (
	"fmt"
	"reflect"
	"strings"
)

// Backend is one storage backend as the engine sees it: the roles it has,
// built by the backend package (memory.Store.Backend, sqlite.Store.Backend,
// postgres.Store.Backend). A role the backend lacks is nil. The roles of
// one Backend are views of one store: closing it (Lifecycle.Close) ends
// them all.
//
// Lifecycle, Log, Rows, Clients and Checkpoints are required: the engine
// refuses a Backend without any of them. The feature roles are needed
// only by the feature that uses them, which engine.New checks when it
// starts: Retention by the maintenance loop, Leases by auth leases,
// Reactions by reaction handlers, Blobs by a blob store, Queries by
// registered remote queries, Ownership by cluster mode (several processes
// sharing the store, each partition owned by one of them; only a backend
// several processes can share has it: PostgreSQL). Admin is needed by the
// admin service (engine/admin.New checks it); Snapshots serves
// CapturePartition and RestorePartition (which answer an error without
// it). HandOver takes the client records a deposed cluster member could
// not write back under its fence (without it they are dropped, with an
// error logged: a backend with Ownership should have it). Homes names
// the database holding each partition, for a backend that spreads
// partitions over several (storage/postgres/homes); the admin service
// lists partitions with it, and without it lists no home.
//
// RowEncoder and ImageCopier are optional fast paths of Rows: when nil,
// the engine encodes bootstrap pages with VisitEncoder and fills SQLite
// images from ScanRows, a choice made once when it starts.
//
// A new backend's checklist is this struct: a compile-time assertion
// (var _ storage.Log = (*Store)(nil), ...) for every role it fills, and
// the storagetest cases of each role, which run for every role the
// Backend has.
type Backend struct {
	Lifecycle   Lifecycle
	Log         Log
	Rows        Rows
	Clients     Clients
	Checkpoints Checkpoints

	Retention Retention
	Snapshots Snapshots
	Leases    Leases
	Reactions Reactions
	Blobs     BlobIndex
	Queries   Querier
	Admin     AdminReader
	Ownership Ownership
	HandOver  ClientHandOver
	Homes     HomeNamer

	RowEncoder  RowEncoder
	ImageCopier ImageCopier
}

// RequiredRoles returns the roles every Backend must have (Backend field
// names), in declaration order: a fresh slice each call.
func RequiredRoles() []string {
	return []string{"Lifecycle", "Log", "Rows", "Clients", "Checkpoints"}
}

// Roles returns the names of the roles b has (its non-nil fields), in the
// order Backend declares them.
func (b Backend) Roles() []string {
	v := reflect.ValueOf(b)
	out := make([]string, 0, v.NumField())
	for i := range v.NumField() {
		if !v.Field(i).IsNil() {
			out = append(out, v.Type().Field(i).Name)
		}
	}
	return out
}

// Has reports whether b has the role named role (a Backend field name);
// it panics on a name that is not one, so a misspelt role can never read
// as absent.
func (b Backend) Has(role string) bool {
	f := reflect.ValueOf(b).FieldByName(role)
	if !f.IsValid() {
		panic(fmt.Sprintf("storage: %q is not a role of storage.Backend", role))
	}
	return !f.IsNil()
}

// RoleNames returns the names of every role a Backend can have, in
// declaration order.
func RoleNames() []string {
	t := reflect.TypeFor[Backend]()
	out := make([]string, t.NumField())
	for i := range t.NumField() {
		out[i] = t.Field(i).Name
	}
	return out
}

// CheckRequired returns an error naming the required roles b lacks, or
// nil.
func (b Backend) CheckRequired() error {
	var missing []string
	for _, r := range RequiredRoles() {
		if !b.Has(r) {
			missing = append(missing, r)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("storage: the backend lacks the required role(s) %s", strings.Join(missing, ", "))
	}
	return nil
}
