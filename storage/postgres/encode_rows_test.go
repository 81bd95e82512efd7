package postgres_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage"
	"github.com/synclane/synclane/storage/postgres"
	"github.com/synclane/synclane/storage/postgres/pgtest"
	"github.com/synclane/synclane/storage/storagetest"
)

// TestEncodeRowsRefusesWhatVisitRowsRefuses: values written into a row
// table behind the store's back (by a host's own SQL) that the protocol
// cannot carry fail EncodeRows as they fail VisitRows + AddRow, naming the
// problem; the rows that fit still encode.
func TestEncodeRowsRefusesWhatVisitRowsRefuses(t *testing.T) {
	ctx := t.Context()
	s := pgtest.OpenSchema(t, pgtest.NewSchema(t), postgres.Options{MaxConns: 4})
	sch := storagetest.MustParse(storagetest.SchemaV1)
	if err := s.EnsureSchema(ctx, sch); err != nil {
		t.Fatal(err)
	}
	items := sch.Table("items")
	cases := []struct {
		name, column, value string // value is an SQL literal
		wantErr             string
	}{
		{"JSON that does not parse", "j", "'{'", "JSON"},
		{"integer beyond 2^53", "n", "9007199254740992", "outside"},
		{"non-canonical BlobRef", "ref", `'{"blobId":"x"}'`, "BlobRef"},
		{"fine: empty bytes", "bin", `'\x'::bytea`, ""},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			part := fmt.Sprintf("p%d", i)
			for _, q := range []string{
				fmt.Sprintf(`INSERT INTO items (partition_id, id, project, owner, %s, _sync_version) VALUES ($1, 'r', 'p1', 1, %s, 1)`, c.column, c.value),
				`INSERT INTO items (partition_id, id, project, owner, _sync_version) VALUES ($1, 'a-ok', 'p1', 1, 1)`,
			} {
				if _, err := s.Pool().Exec(ctx, q, part); err != nil {
					t.Fatal(err)
				}
			}
			q := storage.RowQuery{Table: items, Scopes: map[string][]string{"project": {"p1"}}, Limit: 10}
			ref := ssp2.NewSegmentBuilder("items", 1, items.Columns)
			visitErr := s.VisitRows(ctx, part, q, func(r storage.RowRecord) error { return ref.AddRow(r.Version, r.Values) })
			sb := ssp2.NewSegmentBuilder("items", 1, items.Columns)
			got, encErr := s.EncodeRows(ctx, part, q, sb)
			if c.wantErr == "" {
				if visitErr != nil || encErr != nil || got.Rows != 2 || string(sb.Finish()) != string(ref.Finish()) {
					t.Fatalf("VisitRows %v; EncodeRows = %+v, %v; want both to take the 2 rows alike", visitErr, got, encErr)
				}
				return
			}
			if visitErr == nil {
				t.Fatal("VisitRows + AddRow took the value; the case is wrong")
			}
			if encErr == nil || !strings.Contains(encErr.Error(), c.wantErr) {
				t.Fatalf("EncodeRows = %v, want an error containing %q (VisitRows: %v)", encErr, c.wantErr, visitErr)
			}
			q.Limit = 1
			sb = ssp2.NewSegmentBuilder("items", 1, items.Columns)
			if got, err := s.EncodeRows(ctx, part, q, sb); err != nil || got.Rows != 1 || got.LastRowID != "a-ok" || !got.More {
				t.Fatalf("EncodeRows of the good row = %+v, %v", got, err)
			}
		})
	}
}
