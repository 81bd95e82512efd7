package sqlite

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage"
	"github.com/synclane/synclane/storage/segstore/sqliteimage"
	"github.com/synclane/synclane/storage/storagetest"
)

// itemsStore opens a store on a temporary file with storagetest's schema
// v1, closed when t ends, and returns it with its items table.
func itemsStore(t *testing.T) (*Store, *schema.Table) {
	t.Helper()
	s, err := Open(t.Context(), filepath.Join(t.TempDir(), "sync.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	sch := storagetest.MustParse(storagetest.SchemaV1)
	if err := s.EnsureSchema(t.Context(), sch); err != nil {
		t.Fatal(err)
	}
	return s, sch.Table("items")
}

// TestEncodeRowsRefusesWhatVisitRowsRefuses: values written into a row
// table behind the store's back (by a host's own SQL) that do not fit
// their column fail EncodeRows as they fail VisitRows, naming the column;
// the store keeps serving the rows that do fit.
// storeRawValue writes row r of partition part with SQL expression value
// in column, past every check of the write path (a hostile stored value).
func storeRawValue(t *testing.T, s *Store, part, column, value string) {
	t.Helper()
	stmt := fmt.Sprintf(`INSERT INTO items (partition_id, id, project, owner, %s, _sync_version) VALUES (?, 'r', 'p1', 1, %s, 1)`, quote(column), value)
	if _, err := s.conn.ExecContext(context.Background(), stmt, part); err != nil {
		t.Fatal(err)
	}
}

func TestEncodeRowsRefusesWhatVisitRowsRefuses(t *testing.T) {
	ctx := t.Context()
	s, items := itemsStore(t)
	cases := []struct {
		name, column, value string // value is an SQL literal
		wantErr             string
	}{
		{"text in an integer column", "n", "'seven'", "column n"},
		{"real in a boolean column", "b", "0.5", "column b"},
		{"text in a bytes column", "bin", "'abc'", "column bin"},
		{"fine: integer into a TEXT column (stored as text)", "title", "7", ""},
		{"invalid UTF-8 in a string column", "title", "CAST(x'ff' AS TEXT)", "UTF-8"},
		{"JSON that does not parse", "j", "'{'", "JSON"},
		{"integer beyond 2^53", "n", "9007199254740992", "outside"},
		{"non-canonical BlobRef", "ref", `'{"blobId":"x"}'`, "BlobRef"},
		{"fine: integer in a float column", "f", "3", ""},
		{"fine: blob in a string column", "title", "x'6869'", ""},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			part := fmt.Sprintf("p%d", i)
			storeRawValue(t, s, part, c.column, c.value)
			if _, err := s.conn.ExecContext(ctx, `INSERT INTO items (partition_id, id, project, owner, _sync_version) VALUES (?, 'a-ok', 'p1', 1, 1)`, part); err != nil {
				t.Fatal(err)
			}
			q := storage.RowQuery{Table: items, Scopes: map[string][]string{"project": {"p1"}}, Limit: 10}
			visitErr := s.VisitRows(ctx, part, q, func(storage.RowRecord) error { return nil })
			if visitErr == nil {
				// VisitRows hands values on; the encoder refuses them.
				sb := ssp2.NewSegmentBuilder("items", 1, items.Columns)
				visitErr = s.VisitRows(ctx, part, q, func(r storage.RowRecord) error { return sb.AddRow(r.Version, r.Values) })
			}
			sb := ssp2.NewSegmentBuilder("items", 1, items.Columns)
			got, encErr := s.EncodeRows(ctx, part, q, sb)
			if c.wantErr == "" {
				if visitErr != nil || encErr != nil || got.Rows != 2 {
					t.Fatalf("VisitRows %v; EncodeRows = %+v, %v; want both to take the 2 rows", visitErr, got, encErr)
				}
				return
			}
			if visitErr == nil {
				t.Fatalf("VisitRows took the value; the case is wrong")
			}
			if encErr == nil || !strings.Contains(encErr.Error(), c.wantErr) {
				t.Fatalf("EncodeRows = %v, want an error containing %q (VisitRows: %v)", encErr, c.wantErr, visitErr)
			}
			// The row that fits still reads alone.
			sb = ssp2.NewSegmentBuilder("items", 1, items.Columns)
			q.Limit = 1
			if got, err := s.EncodeRows(ctx, part, q, sb); err != nil || got.Rows != 1 || got.LastRowID != "a-ok" || !got.More {
				t.Fatalf("EncodeRows of the good row = %+v, %v", got, err)
			}
		})
	}
}

// TestEncodeRowsPoolIsBounded: concurrent EncodeRows calls share at most
// ReadConns connections, and Close closes them.
func TestEncodeRowsPoolIsBounded(t *testing.T) {
	ctx := t.Context()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "sync.db"), Options{ReadConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	sch := storagetest.MustParse(storagetest.SchemaV1)
	if err := s.EnsureSchema(ctx, sch); err != nil {
		t.Fatal(err)
	}
	a, err := s.raw.get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.raw.get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	full, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.raw.get(full); err == nil {
		t.Fatal("a third connection was handed out with ReadConns 2")
	}
	s.raw.put(a, true)
	s.raw.put(b, false) // closed, not pooled
	if n := len(s.raw.idle); n != 1 {
		t.Fatalf("%d idle connections, want 1", n)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if len(s.raw.idle) != 0 || !s.raw.closed {
		t.Fatal("Close left idle connections open")
	}
	if _, err := s.raw.get(ctx); err == nil {
		t.Fatal("get after Close succeeded")
	}
}

// TestCopyRowsToImageRefusesWhatVisitRowsRefuses: a value of the wrong
// storage class fails the image copy, naming the column; a value that
// fits (an integer in a float column, a blob in a string column) is copied
// as VisitRows hands it out.
func TestCopyRowsToImageRefusesWhatVisitRowsRefuses(t *testing.T) {
	ctx := t.Context()
	s, items := itemsStore(t)
	cases := []struct {
		name, column, value string
		wantErr             string
	}{
		{"text in an integer column", "n", "'seven'", "column n"},
		{"real in a boolean column", "b", "0.5", "column b"},
		{"text in a bytes column", "bin", "'abc'", "column bin"},
		{"fine: integer in a float column", "f", "3", ""},
		{"fine: blob in a string column", "title", "x'6869'", ""},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			part := fmt.Sprintf("p%d", i)
			storeRawValue(t, s, part, c.column, c.value)
			_, _, err := sqliteimage.BuildCopy(ctx, items, 1, 1, "d", func(ctx context.Context, path string) (int64, error) {
				return s.CopyRowsToImage(ctx, part, storage.RowQuery{Table: items, Scopes: map[string][]string{"project": {"p1"}}}, path)
			})
			visitErr := s.VisitRows(ctx, part, storage.RowQuery{Table: items, Scopes: map[string][]string{"project": {"p1"}}, Limit: 10}, func(storage.RowRecord) error { return nil })
			if c.wantErr == "" {
				if err != nil || visitErr != nil {
					t.Fatalf("copy: %v; VisitRows: %v; want both to take the row", err, visitErr)
				}
				return
			}
			if visitErr == nil {
				t.Fatal("VisitRows took the value; the case is wrong")
			}
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Fatalf("copy = %v, want an error containing %q", err, c.wantErr)
			}
		})
	}
}
