package storagetest

import (
	"fmt"
	"strings"
	"testing"

	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage"
)

// The workload of the stored-bytes benchmarks (BenchmarkStoredRowBytes of
// storage/sqlite and storage/postgres), which measure what column
// versions cost per stored row.

// RowBytesBatch is how many rows one PushTx of WriteTodos writes.
const RowBytesBatch = 1000

// WriteTodos writes rows 0..n-1 of the demo schema's todos (t, of
// schema.MustDemo, ensured on b) to partition, RowBytesBatch per push
// transaction. round 0 inserts them at version 1; round r > 0 rewrites
// each with its title changed, at version r+1. With withCV each row
// carries the column versions the engine writes (SPEC §2.2): every column
// at 1 after the insert (storage.InsertedColumnVersions), and the title
// at the row's new version after an update; without, nil (NULL), as a row
// written before column versions reads.
func WriteTodos(tb testing.TB, b storage.Backend, t *schema.Table, partition string, n, round int, withCV bool) {
	tb.Helper()
	ctx := tb.Context()
	version := int64(round + 1)
	var cv storage.ColumnVersions
	if withCV {
		cv = storage.InsertedColumnVersions()
		if round > 0 {
			versions := make([]int64, len(t.Columns))
			for i := range versions {
				versions[i] = 1
			}
			versions[t.Column("title")] = version
			cv = storage.EncodeColumnVersions(versions, version)
		}
	}
	for start := 0; start < n; start += RowBytesBatch {
		tx, err := b.Log.BeginPush(ctx, partition)
		if err != nil {
			tb.Fatal(err)
		}
		for i := start; i < min(start+RowBytesBatch, n); i++ {
			id := fmt.Sprintf("todo-%07d", i)
			// Titles of 8 lengths, so the figures average over the
			// padding a database aligns its rows to.
			title := fmt.Sprintf("title %d of round %d %s", i, round, strings.Repeat("x", i%8))
			row := ssp2.Row{id, "list-1", title, false, int64(i), int64(1_700_000_000_000 + i)}
			if err := tx.PutRow(ctx, t, storage.RowRecord{RowID: id, Version: version, Values: row, ColumnVersions: cv}); err != nil {
				tb.Fatal(err)
			}
		}
		if err := tx.Commit(ctx); err != nil {
			tb.Fatal(err)
		}
	}
}
