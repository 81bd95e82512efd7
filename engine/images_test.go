package engine_test

import (
	"testing"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/protocol/ssp2"
)

// TestNoImageBuilderServesRows: an engine without an image builder
// (Config.Segments.Images nil: an embedder linking no SQLite driver) answers a
// client accepting SQLite images as one not accepting them, on a store
// that could copy rows into an image (sqlite) and one that could not
// (memory): the whole table goes as rows segments, by ref or inline,
// never as an image.
func TestNoImageBuilderServesRows(t *testing.T) {
	const rows, perPage = 30, 10
	cases := []struct {
		name   string
		accept uint8
		refs   int // rows SEGMENT_REFs, else the rows come inline
	}{
		{"refs and images", ssp2.AcceptRefRows | ssp2.AcceptSQLite, rows / perPage},
		{"both lanes and images", ssp2.AcceptInlineRows | ssp2.AcceptRefRows | ssp2.AcceptSQLite, 0},
	}
	for sname, open := range stores(t) {
		t.Run(sname, func(t *testing.T) {
			f := newFixture(t, open(), func(c *engine.Config) { c.Segments.Images = nil })
			f.client("writer", "cw").seedTitled(rows, "title ")
			for _, c := range cases {
				ph := ssp2.PullHeader{Accept: c.accept, LimitSnapshotRows: perPage, MaxSnapshotPages: rows / perPage}
				got := f.client("reader", "r "+c.name).bootstrapOnce(ph, "P")
				if !got.done {
					t.Fatalf("%s: the bootstrap did not complete in one request", c.name)
				}
				n := int64(0)
				for _, r := range got.refs {
					if r.MediaType != ssp2.MediaRows {
						t.Fatalf("%s: a ref of media %d, want rows (%d)", c.name, r.MediaType, ssp2.MediaRows)
					}
					n += r.RowCount
				}
				if c.refs > 0 && (len(got.refs) != c.refs || n != rows || got.inline != 0) {
					t.Fatalf("%s: %d refs of %d rows and %d inline pages, want %d refs of %d rows", c.name, len(got.refs), n, got.inline, c.refs, rows)
				}
				if c.refs == 0 && (len(got.refs) != 0 || len(got.rows) != rows) {
					t.Fatalf("%s: %d refs and %d inline rows, want %d rows inline", c.name, len(got.refs), len(got.rows), rows)
				}
			}
		})
	}
}
