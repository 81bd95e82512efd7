package pgseg_test

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"testing"

	"github.com/synclane/synclane/storage/postgres/pgtest"
	"github.com/synclane/synclane/storage/segstore"
	"github.com/synclane/synclane/storage/segstore/pgseg"
)

// TestPostgresGetReadsOneCopy: a page of unchanged rows is stored again
// under every pin's build key with the same id; Get returns every live
// entry but reads the bytes once, not once per entry.
func TestPostgresGetReadsOneCopy(t *testing.T) {
	ctx := context.Background()
	s, err := pgseg.Open(ctx, pgtest.Open(t).Pool())
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, 1<<20)
	for i := range data {
		data[i] = byte(i * 7)
	}
	id := segstore.ID(data)
	const pins = 64
	for pin := 1; pin <= pins; pin++ {
		m := segstore.Meta{Partition: "p", Key: fmt.Sprintf("key-at-pin-%d", pin), ID: id, Table: "todos",
			ScopeDigest: "d", AsOfCommitSeq: int64(pin), ByteLength: int64(len(data)), CreatedAtMs: 1000, ExpiresAtMs: 1 << 60}
		if err := s.Put(ctx, m, data); err != nil {
			t.Fatal(err)
		}
	}
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	metas, got, err := s.Get(ctx, "p", id, 2000)
	runtime.ReadMemStats(&after)
	if err != nil || !bytes.Equal(got, data) || len(metas) != pins {
		t.Fatalf("Get: %v, %d bytes (equal %v), %d entries; want %d entries", err, len(got), bytes.Equal(got, data), len(metas), pins)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 8*uint64(len(data)) {
		t.Fatalf("Get of one 1 MiB segment stored under %d build keys allocated %d MiB", pins, alloc>>20)
	}
}
