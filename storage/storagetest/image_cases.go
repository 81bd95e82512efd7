package storagetest

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"reflect"

	_ "modernc.org/sqlite" // reads the images back

	"github.com/synclane/synclane/storage"
	"github.com/synclane/synclane/storage/segstore/sqliteimage"
)

// imageCopyTests check storage.ImageCopier, which is optional: an image
// whose rows the store copied holds exactly what an image built from
// ScanRows holds, for every column type.
var imageCopyTests = []test{
	{name: "SameImageAsScanRows", fn: func(e *env) {
		cp := e.b.ImageCopier
		e.allTypesFixture()
		for _, c := range []struct {
			name string
			part string
			q    storage.RowQuery
		}{
			{"all of p1", "p", storage.RowQuery{Table: e.items, Scopes: p1}},
			{"other partition", "other", storage.RowQuery{Table: e.items, Scopes: p1}},
			{"no values", "p", storage.RowQuery{Table: e.items, Scopes: map[string][]string{"project": {}}}},
			{"other table", "p", storage.RowQuery{Table: e.notes, Scopes: p1}},
		} {
			scanned, n1, err := sqliteimage.Build(e.ctx, c.q.Table, 1, 9, "d", func(ctx context.Context, after *string, limit int) ([]storage.RowRecord, error) {
				q := c.q
				q.AfterRowID, q.Limit = after, limit
				return e.b.Rows.ScanRows(ctx, c.part, q)
			})
			if err != nil {
				e.t.Fatalf("%s: image from ScanRows: %v", c.name, err)
			}
			copied, n2, err := sqliteimage.BuildCopy(e.ctx, c.q.Table, 1, 9, "d", func(ctx context.Context, path string) (int64, error) {
				return cp.CopyRowsToImage(ctx, c.part, c.q, path)
			})
			if err != nil {
				e.t.Fatalf("%s: CopyRowsToImage: %v", c.name, err)
			}
			a, b := e.imageRows(scanned, c.q.Table.Name), e.imageRows(copied, c.q.Table.Name)
			if n1 != n2 || !reflect.DeepEqual(a, b) {
				e.t.Fatalf("%s: copied image (%d rows) differs from the scanned one (%d rows):\n%v\n%v", c.name, n2, n1, b, a)
			}
		}
		if got := e.imageRowsOf(cp, "p"); len(got) != allTypesRows+1 { // + the metadata row
			e.t.Fatalf("the copied image of p holds %d rows and metadata, want %d", len(got), allTypesRows+1)
		}
	}},
}

// imageRowsOf copies p1's items of partition into an image and reads it.
func (e *env) imageRowsOf(cp storage.ImageCopier, partition string) []string {
	data, _, err := sqliteimage.BuildCopy(e.ctx, e.items, 1, 9, "d", func(ctx context.Context, path string) (int64, error) {
		return cp.CopyRowsToImage(ctx, partition, storage.RowQuery{Table: e.items, Scopes: p1}, path)
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return e.imageRows(data, "items")
}

// imageRows renders every row of an image's data table and its metadata
// row, with each value's storage class.
func (e *env) imageRows(data []byte, table string) []string {
	e.t.Helper()
	path := filepath.Join(e.t.TempDir(), "image.db")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		e.t.Fatal(err)
	}
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		e.t.Fatal(err)
	}
	defer db.Close()
	var out []string
	for _, q := range []string{`SELECT * FROM "` + table + `" ORDER BY 1`, `SELECT * FROM _syncular_segment`} {
		rows, err := db.QueryContext(e.ctx, q)
		if err != nil {
			e.t.Fatal(err)
		}
		cols, _ := rows.Columns()
		for rows.Next() {
			vals := make([]any, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if err := rows.Scan(ptrs...); err != nil {
				e.t.Fatal(err)
			}
			out = append(out, fmt.Sprintf("%#v", vals))
		}
		if err := rows.Close(); err != nil {
			e.t.Fatal(err)
		}
	}
	return out
}
