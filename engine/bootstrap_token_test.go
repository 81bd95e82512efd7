package engine_test

import (
	"bytes"
	"testing"

	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage/memory"
)

// TestForgedTokenLaneCannotBreakAccept: a resume token whose lane was
// changed to one the server never resumes (the image lane, or an unknown
// one) restarts the bootstrap in a lane the client accepts: a client that
// accepts only references never gets inline rows.
func TestForgedTokenLaneCannotBreakAccept(t *testing.T) {
	f := newFixture(t, memory.New())
	a := f.client("ada", "c-ada")
	for _, id := range []string{"t1", "t2", "t3"} {
		a.push("c"+id, upsert("tasks", id, f.row(id, "p1", "x"), nil))
	}
	ph := &ssp2.PullHeader{Accept: ssp2.AcceptRefRows, LimitSnapshotRows: 1, MaxSnapshotPages: 1}
	rep, err := a.sync(ph, sub("s1", -1, "p1"))
	if err != nil {
		t.Fatal(err)
	}
	var tok []byte
	for _, fr := range rep.Frames {
		if e, ok := fr.(*ssp2.SubEnd); ok {
			tok = e.BootstrapState
		}
	}
	if !bytes.Contains(tok, []byte(`"lane":"ref"`)) {
		t.Fatalf("the first page's token %s is not in the ref lane", tok)
	}
	for _, lane := range []string{"sqlite", "carrier-pigeon"} {
		s2 := sub("s1", -1, "p1")
		s2.BootstrapState = bytes.Replace(tok, []byte(`"lane":"ref"`), []byte(`"lane":"`+lane+`"`), 1)
		rep, err := a.sync(ph, s2)
		if err != nil {
			t.Fatal(err)
		}
		refs := 0
		for _, fr := range rep.Frames {
			switch fr.(type) {
			case *ssp2.SegmentInline:
				t.Fatalf("lane %q: inline rows sent to a client accepting only references", lane)
			case *ssp2.SegmentRef:
				refs++
			}
		}
		if refs != 1 {
			t.Errorf("lane %q: %d SEGMENT_REFs, want the restarted bootstrap's first page by reference", lane, refs)
		}
	}
}
