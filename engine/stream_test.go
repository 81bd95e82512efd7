package engine_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/storage/memory"
)

// TestStreamedBootstrapGateChangeBetweenPages: a bootstrap's later pages
// are built while the reply is written, each verified against the gate
// token the reply was released under. An epoch rotation or a schema
// migration landing between pages ends the response with an ERROR frame
// (sync.schema_not_ready) and END, and the page built under the new
// token never leaves, in either lane.
func TestStreamedBootstrapGateChangeBetweenPages(t *testing.T) {
	for _, accept := range []uint8{ssp2.AcceptInlineRows, ssp2.AcceptRefRows} {
		for _, change := range []string{"epoch rotation", "schema migration"} {
			t.Run(fmt.Sprintf("accept=%d/%s", accept, change), func(t *testing.T) {
				path := filepath.Join(t.TempDir(), "db.sqlite")
				hs := &hookStore{Store: openShared(t, path)}
				f := newFixture(t, hs)
				a := f.client("alice", "ca")
				for i := range 5 {
					id := fmt.Sprintf("t%d", i)
					a.push("c"+id, upsert("tasks", id, f.row(id, "P", "x"), nil))
				}
				scans := 0
				hs.mid = func() {
					scans++
					if scans != 2 { // the second page's read
						return
					}
					switch change {
					case "epoch rotation":
						if _, err := hs.Store.RotateLogEpoch(context.Background(), "p1", 0); err != nil {
							t.Error(err)
						}
					default:
						// Another process raised the stored schema version.
						s2 := *f.schema
						s2.Version = f.schema.Version + 1
						if err := openShared(t, path).EnsureSchema(context.Background(), &s2); err != nil {
							t.Error(err)
						}
					}
				}
				rep, err := a.sync(&ssp2.PullHeader{Accept: accept, LimitSnapshotRows: 2, MaxSnapshotPages: 3}, sub("s", -1, "P"))
				wantCode(t, err, syncerr.SchemaNotReady)
				var kinds []ssp2.FrameType
				for _, fr := range rep.Frames[1:] {
					kinds = append(kinds, fr.FrameType())
				}
				page := ssp2.FrameSegmentInline
				if accept == ssp2.AcceptRefRows {
					page = ssp2.FrameSegmentRef
				}
				want := []ssp2.FrameType{ssp2.FrameSubStart, page, ssp2.FrameError}
				if fmt.Sprint(kinds) != fmt.Sprint(want) {
					t.Fatalf("frames %v, want %v (first page, then ERROR; no page built under the new token)", kinds, want)
				}
				if scans != 2 {
					t.Fatalf("%d page reads, want 2 (the stream stops at the refusal)", scans)
				}
			})
		}
	}
}

// TestStreamedBootstrapPages: without a gate change the streamed pages
// arrive in order with cursors that chain, and the token is returned only
// while rows remain.
func TestStreamedBootstrapPages(t *testing.T) {
	f := newFixture(t, openShared(t, filepath.Join(t.TempDir(), "db.sqlite")))
	a := f.client("alice", "ca")
	for i := range 7 {
		id := fmt.Sprintf("t%d", i)
		a.push("c"+id, upsert("tasks", id, f.row(id, "P", "x"), nil))
	}
	rep, err := a.sync(&ssp2.PullHeader{Accept: ssp2.AcceptRefRows, LimitSnapshotRows: 2, MaxSnapshotPages: 3}, sub("s", -1, "P"))
	if err != nil {
		t.Fatal(err)
	}
	var refs []*ssp2.SegmentRef
	var end *ssp2.SubEnd
	for _, fr := range rep.Frames {
		switch x := fr.(type) {
		case *ssp2.SegmentRef:
			refs = append(refs, x)
		case *ssp2.SubEnd:
			end = x
		}
	}
	if len(refs) != 3 || end == nil || end.BootstrapState == nil || end.NextCursor != 7 {
		t.Fatalf("%d refs, end %+v", len(refs), end)
	}
	for i := 1; i < 3; i++ {
		if refs[i].RowCursor == nil || *refs[i].RowCursor != *refs[i-1].NextRowCursor {
			t.Fatalf("page %d does not continue page %d", i, i-1)
		}
	}
	s := sub("s", -1, "P")
	s.BootstrapState = end.BootstrapState
	rep, err = a.sync(&ssp2.PullHeader{Accept: ssp2.AcceptRefRows, LimitSnapshotRows: 2, MaxSnapshotPages: 3}, s)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, fr := range rep.Frames {
		switch x := fr.(type) {
		case *ssp2.SegmentRef:
			n++
			if x.NextRowCursor != nil {
				t.Fatalf("last page has a next cursor")
			}
		case *ssp2.SubEnd:
			if x.BootstrapState != nil {
				t.Fatalf("completed bootstrap returned a token")
			}
		}
	}
	if n != 1 {
		t.Fatalf("%d refs in the last round, want 1", n)
	}
}

// TestSQLiteImageNeverForEncryptedTables: with accept bit 2 and a table
// larger than one page, a plain table is sent as one SQLite image, and the
// same table with an encrypted column is sent as rows segments.
func TestSQLiteImageNeverForEncryptedTables(t *testing.T) {
	encrypted := strings.Replace(testSchemaJSON, `{"name":"title","type":"string"}`, `{"name":"title","type":"string","encrypted":true}`, 1)
	if encrypted == testSchemaJSON {
		t.Fatal("test schema changed: no title column to encrypt")
	}
	for _, tc := range []struct {
		name      string
		schema    string
		wantMedia ssp2.MediaType
	}{{"plain", testSchemaJSON, ssp2.MediaSQLite}, {"encrypted", encrypted, ssp2.MediaRows}} {
		t.Run(tc.name, func(t *testing.T) {
			sch, err := schema.Parse([]byte(tc.schema))
			if err != nil {
				t.Fatal(err)
			}
			f := newFixture(t, memory.New(), func(c *engine.Config) { c.Schema = sch })
			a := f.client("alice", "ca")
			for i := range 5 {
				id := fmt.Sprintf("t%d", i)
				a.push("c"+id, upsert("tasks", id, f.row(id, "P", "x"), nil))
			}
			rep, err := a.sync(&ssp2.PullHeader{Accept: ssp2.AcceptRefRows | ssp2.AcceptSQLite, LimitSnapshotRows: 2, MaxSnapshotPages: 3}, sub("s", -1, "P"))
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for _, fr := range rep.Frames {
				if r, ok := fr.(*ssp2.SegmentRef); ok {
					n++
					if r.MediaType != tc.wantMedia {
						t.Fatalf("media %d, want %d", r.MediaType, tc.wantMedia)
					}
				}
			}
			if n == 0 {
				t.Fatal("no SEGMENT_REF")
			}
		})
	}
}
