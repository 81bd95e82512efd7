package sqliteimage_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/storage"
	"github.com/synclane/synclane/storage/segstore/sqliteimage"
)

const imageBenchSchema = `{"version":1,"tables":[{"name":"todos","primaryKey":"id","columns":[
{"name":"id","type":"string"},{"name":"title","type":"string"},{"name":"done","type":"boolean"},
{"name":"list_id","type":"string"},{"name":"updated_at","type":"integer"}],
"scopes":["list:{list_id}"]}]}`

// BenchmarkBuildSQLiteImage builds the image of 100,000 rows held in
// memory (the scan costs nothing), so it times the image build alone:
//
//	go test -run '^$' -bench BuildSQLiteImage -benchtime 3x ./storage/segstore/sqliteimage/
func BenchmarkBuildSQLiteImage(b *testing.B) {
	s, err := schema.Parse([]byte(imageBenchSchema))
	if err != nil {
		b.Fatal(err)
	}
	t := s.Table("todos")
	const n = 100_000
	rows := make([]storage.RowRecord, n)
	for i := range rows {
		id := fmt.Sprintf("todo-%07d", i)
		rows[i] = storage.RowRecord{RowID: id, Version: int64(i + 1), Values: []any{id, fmt.Sprintf("title of todo %d", i), i%2 == 0, "list-1", int64(1700000000000 + i)}}
	}
	scan := func(_ context.Context, after *string, limit int) ([]storage.RowRecord, error) {
		start := 0
		if after != nil {
			for start < n && rows[start].RowID <= *after {
				start++
			}
		}
		return rows[start:min(n, start+limit)], nil
	}
	b.ReportAllocs()
	for b.Loop() {
		data, got, err := sqliteimage.Build(context.Background(), t, 1, 7, "d", scan)
		if err != nil || got != n {
			b.Fatalf("%d rows, %v", got, err)
		}
		b.SetBytes(int64(len(data)))
	}
}
