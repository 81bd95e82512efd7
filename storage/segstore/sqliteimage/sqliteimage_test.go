package sqliteimage_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	_ "modernc.org/sqlite"

	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage"
	"github.com/synclane/synclane/storage/segstore/sqliteimage"
)

// TestSQLiteImageHoldsEveryRow: the image holds exactly the scanned rows,
// whatever their count against the rows written per INSERT (none, one, a
// full batch, a batch and one, several with a remainder) and for a table
// wide enough that a batch must shrink to stay under SQLite's parameter
// limit.
func TestSQLiteImageHoldsEveryRow(t *testing.T) {
	wide := make([]string, 0, 400)
	for i := range 399 {
		wide = append(wide, fmt.Sprintf(`{"name":"c%03d","type":"integer"}`, i))
	}
	schemas := map[string]string{
		"narrow": imageBenchSchema,
		"wide": `{"version":1,"tables":[{"name":"todos","primaryKey":"id","columns":[{"name":"id","type":"string"},` +
			strings.Join(wide, ",") + `],"scopes":["all:{id}"]}]}`,
	}
	for name, js := range schemas {
		s, err := schema.Parse([]byte(js))
		if err != nil {
			t.Fatal(err)
		}
		tb := s.Table("todos")
		for _, n := range []int{0, 1, 100, 101, 250, 5001} {
			t.Run(fmt.Sprintf("%s/%d", name, n), func(t *testing.T) {
				rows := make([]storage.RowRecord, n)
				for i := range rows {
					vals := make([]any, len(tb.Columns))
					for j, c := range tb.Columns {
						switch c.Type {
						case ssp2.TypeString:
							vals[j] = fmt.Sprintf("v%07d", i)
						case ssp2.TypeBoolean:
							vals[j] = i%2 == 0
						default:
							vals[j] = int64(i * (j + 1))
						}
					}
					rows[i] = storage.RowRecord{RowID: vals[0].(string), Version: int64(i + 1), Values: vals}
				}
				scan := func(_ context.Context, after *string, limit int) ([]storage.RowRecord, error) {
					start := 0
					for after != nil && start < n && rows[start].RowID <= *after {
						start++
					}
					return rows[start:min(n, start+limit)], nil
				}
				data, got, err := sqliteimage.Build(context.Background(), tb, 1, 7, "d", scan)
				if err != nil || got != int64(n) {
					t.Fatalf("%d rows, %v", got, err)
				}
				path := filepath.Join(t.TempDir(), "image.db")
				if err := os.WriteFile(path, data, 0o600); err != nil {
					t.Fatal(err)
				}
				db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
				if err != nil {
					t.Fatal(err)
				}
				defer db.Close()
				var count, versions int64
				var last sql.NullString
				if err := db.QueryRow(`SELECT COUNT(*), COALESCE(SUM(_syncular_version), 0), MAX(id) FROM todos`).Scan(&count, &versions, &last); err != nil {
					t.Fatal(err)
				}
				wantLast := sql.NullString{}
				if n > 0 {
					wantLast = sql.NullString{String: fmt.Sprintf("v%07d", n-1), Valid: true}
				}
				if count != int64(n) || versions != int64(n)*int64(n+1)/2 || last != wantLast {
					t.Fatalf("image holds %d rows, version sum %d, last id %v; want %d, %d, %v", count, versions, last, n, int64(n)*int64(n+1)/2, wantLast)
				}
				var meta int64
				if err := db.QueryRow(`SELECT rowCount FROM _syncular_segment`).Scan(&meta); err != nil || meta != int64(n) {
					t.Fatalf("_syncular_segment rowCount %d, %v", meta, err)
				}
			})
		}
	}
}
