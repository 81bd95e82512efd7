package engine_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage/memory"
)

// stores opens a fresh store of every in-process backend: memory (rows
// scanned, images built in chunks) and SQLite (pages encoded by the store,
// images copied inside SQLite).
func stores(t *testing.T) map[string]func() backend {
	return map[string]func() backend{
		"memory": func() backend { return memory.New() },
		"sqlite": func() backend { return openShared(t, filepath.Join(t.TempDir(), "db.sqlite")) },
	}
}

// bootstrapped is what one bootstrap request handed a client.
type bootstrapped struct {
	refs   []*ssp2.SegmentRef
	inline int // SEGMENT_INLINE frames
	rows   []ssp2.Row
	done   bool // no resume token
}

func (c *client) bootstrapOnce(ph ssp2.PullHeader, projects ...string) bootstrapped {
	c.f.t.Helper()
	rep, err := c.sync(&ph, sub("s", -1, projects...))
	if err != nil {
		c.f.t.Fatalf("bootstrap: %v", err)
	}
	var b bootstrapped
	for _, fr := range rep.Frames {
		switch x := fr.(type) {
		case *ssp2.SegmentRef:
			b.refs = append(b.refs, x)
		case *ssp2.SegmentInline:
			b.inline++
		case *ssp2.SubEnd:
			b.done = x.BootstrapState == nil
		}
	}
	b.rows = inlineRows(c.f.t, rep.Frames)
	return b
}

// TestBootstrapAnsweredFromWhatIsBuiltEncodesNothing: in every lane, a
// bootstrap of a scope at a pin whose pages (or image) an earlier
// bootstrap already built is answered from them, encoding no page: the
// image is looked up before any page is built, a first page by ref before
// it is encoded to pick the lane, and an inline page is reused from the
// segment store (over the inline limit) or from memory (under it: a
// table's first page at once, later pages once built twice). Every client
// gets the same segments and rows.
func TestBootstrapAnsweredFromWhatIsBuiltEncodesNothing(t *testing.T) {
	const rows, perPage = 30, 10
	inlineOnly, both := ssp2.AcceptInlineRows, ssp2.AcceptInlineRows|ssp2.AcceptRefRows
	cases := []struct {
		name      string
		accept    uint8
		inlineMax int // engine.Config.Segments.InlineMaxBytes (0: the default)
		// encoded is what each of three clients in turn encodes (pages
		// and images).
		encoded [3]uint64
		image   bool // the answer is one SQLite image
		refs    int  // SEGMENT_REFs otherwise
	}{
		{"SQLite image", ssp2.AcceptRefRows | ssp2.AcceptSQLite, 0, [3]uint64{2, 0, 0}, true, 0},
		{"SQLite image, client also taking inline rows", both | ssp2.AcceptSQLite, 0, [3]uint64{2, 0, 0}, true, 0},
		{"rows by ref, client taking both lanes", both, 1, [3]uint64{3, 0, 0}, false, rows / perPage},
		{"rows by ref only", ssp2.AcceptRefRows, 0, [3]uint64{3, 0, 0}, false, rows / perPage},
		{"inline pages over the inline limit", inlineOnly, 1, [3]uint64{3, 0, 0}, false, 0},
		{"inline pages under the inline limit", inlineOnly, 0, [3]uint64{3, 2, 0}, false, 0},
	}
	for sname, open := range stores(t) {
		for _, c := range cases {
			t.Run(sname+"/"+c.name, func(t *testing.T) {
				f := newFixture(t, open(), func(cfg *engine.Config) { cfg.Segments.InlineMaxBytes = c.inlineMax })
				f.client("writer", "cw").seedTitled(rows, strings.Repeat("x", 100))
				ph := ssp2.PullHeader{Accept: c.accept, LimitSnapshotRows: perPage, MaxSnapshotPages: rows / perPage}
				var first bootstrapped
				for i, want := range c.encoded {
					before := f.eng.Segments().Stats().Encoded
					got := f.client("reader", fmt.Sprintf("r%d", i)).bootstrapOnce(ph, "P")
					if n := f.eng.Segments().Stats().Encoded - before; n != want {
						t.Fatalf("client %d encoded %d pages or images, want %d", i, n, want)
					}
					if !got.done {
						t.Fatalf("client %d: the bootstrap did not complete in one request", i)
					}
					switch {
					case c.image:
						if len(got.refs) != 1 || got.refs[0].MediaType != ssp2.MediaSQLite || got.refs[0].RowCount != rows || got.inline != 0 {
							t.Fatalf("client %d got %d refs (%+v) and %d inline pages, want one image of %d rows", i, len(got.refs), got.refs, got.inline, rows)
						}
					case c.refs > 0:
						if len(got.refs) != c.refs || got.inline != 0 {
							t.Fatalf("client %d got %d refs and %d inline pages, want %d refs", i, len(got.refs), got.inline, c.refs)
						}
					default:
						if len(got.rows) != rows || len(got.refs) != 0 {
							t.Fatalf("client %d got %d inline rows and %d refs, want %d rows inline", i, len(got.rows), len(got.refs), rows)
						}
					}
					if i == 0 {
						first = got
						continue
					}
					for j := range got.refs {
						if got.refs[j].SegmentID != first.refs[j].SegmentID {
							t.Fatalf("client %d ref %d names %s, client 0 got %s", i, j, got.refs[j].SegmentID, first.refs[j].SegmentID)
						}
					}
					if fmt.Sprint(got.rows) != fmt.Sprint(first.rows) {
						t.Fatalf("client %d got other rows than client 0", i)
					}
				}
			})
		}
	}
}

// TestStoredImageIsServedOnlyForItsPinAndWhenTheTableExceedsAPage: the
// image found before any page is built is the one of the request's pin
// (a commit moves the pin: the next client gets a new image with the new
// row, never the stored one), and a client whose page holds the whole
// table still gets rows, as when the image is not there.
func TestStoredImageIsServedOnlyForItsPinAndWhenTheTableExceedsAPage(t *testing.T) {
	for sname, open := range stores(t) {
		t.Run(sname, func(t *testing.T) {
			f := newFixture(t, open())
			w := f.client("writer", "cw")
			w.seedTitled(30, "title ")
			small := ssp2.PullHeader{Accept: ssp2.AcceptInlineRows | ssp2.AcceptRefRows | ssp2.AcceptSQLite, LimitSnapshotRows: 10, MaxSnapshotPages: 1}
			large := small
			large.LimitSnapshotRows = 50
			img := f.client("reader", "r0").bootstrapOnce(small, "P")
			if len(img.refs) != 1 || img.refs[0].MediaType != ssp2.MediaSQLite {
				t.Fatalf("a 30-row table in pages of 10 must go as an image: %+v", img.refs)
			}
			fits := f.client("reader", "r1").bootstrapOnce(large, "P")
			if len(fits.refs) != 0 || len(fits.rows) != 30 {
				t.Fatalf("a table that fits one page went as %d refs and %d inline rows, want 30 rows", len(fits.refs), len(fits.rows))
			}
			w.push("c-new", upsert("tasks", "t99", f.row("t99", "P", "after the image"), nil))
			before := f.eng.Segments().Stats().Encoded
			again := f.client("reader", "r2").bootstrapOnce(small, "P")
			if len(again.refs) != 1 || again.refs[0].SegmentID == img.refs[0].SegmentID || again.refs[0].RowCount != 31 ||
				again.refs[0].AsOfCommitSeq != img.refs[0].AsOfCommitSeq+1 {
				t.Fatalf("after a commit got %+v, want a new image of 31 rows at pin %d", again.refs, img.refs[0].AsOfCommitSeq+1)
			}
			if n := f.eng.Segments().Stats().Encoded - before; n != 2 {
				t.Fatalf("the new pin encoded %d pages or images, want its first page and its image", n)
			}
		})
	}
}

// TestInlinePagesKeptWithinTheirBudget: the inline pages kept in memory
// are bounded by bytes: with room for both scopes' pages each is encoded
// once; with room for one, the other's evicts it (least recently used)
// and it is encoded again; negative keeps none.
func TestInlinePagesKeptWithinTheirBudget(t *testing.T) {
	const perScope = 5
	ph := ssp2.PullHeader{Accept: ssp2.AcceptInlineRows, LimitSnapshotRows: 10, MaxSnapshotPages: 1}
	seedScopes := func(f *fixture) {
		w := f.client("writer", "cw")
		for _, p := range []string{"P", "Q"} {
			for i := range perScope {
				id := fmt.Sprintf("%s%d", p, i)
				w.push("c"+id, upsert("tasks", id, f.row(id, p, strings.Repeat("y", 200)), nil))
			}
		}
	}
	// One page's size, as a fixture with room for everything sends it.
	probe := newFixture(t, memory.New())
	seedScopes(probe)
	pageSize := 0
	for _, p := range []string{"P", "Q"} {
		rep, err := probe.client("reader", "probe"+p).sync(&ph, sub("s", -1, p))
		if err != nil {
			t.Fatal(err)
		}
		for _, fr := range rep.Frames {
			if si, ok := fr.(*ssp2.SegmentInline); ok {
				pageSize = max(pageSize, len(si.Payload))
			}
		}
	}
	if pageSize == 0 {
		t.Fatal("no inline page")
	}
	const overhead = 256 // a kept page's fixed cost (segstore)
	order := []string{"P", "P", "Q", "P", "Q", "Q"}
	cases := []struct {
		name    string
		budget  int
		encoded []uint64 // per request of order
	}{
		{"room for both", 2*(pageSize+overhead) + 16, []uint64{1, 0, 1, 0, 0, 0}},
		{"room for one", pageSize + overhead + 16, []uint64{1, 0, 1, 1, 1, 0}},
		{"none kept", -1, []uint64{1, 1, 1, 1, 1, 1}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t, memory.New(), func(cfg *engine.Config) { cfg.Segments.InlinePageBytes = c.budget })
			seedScopes(f)
			for i, p := range order {
				before := f.eng.Segments().Stats()
				got := f.client("reader", fmt.Sprintf("r%d", i)).bootstrapOnce(ph, p)
				after := f.eng.Segments().Stats()
				if len(got.rows) != perScope || got.rows[0][1] != p {
					t.Fatalf("request %d (%s) got %d rows %v", i, p, len(got.rows), got.rows)
				}
				if n := after.Encoded - before.Encoded; n != c.encoded[i] {
					t.Fatalf("request %d (%s) encoded %d pages, want %d", i, p, n, c.encoded[i])
				}
				if reused := after.InlineReused - before.InlineReused; reused != 1-c.encoded[i] {
					t.Fatalf("request %d (%s): %d inline pages reused, want %d", i, p, reused, 1-c.encoded[i])
				}
			}
		})
	}
}
