package engine_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"

	"github.com/synclane/synclane/protocol/ssp2"
)

// payloadWriter records the first byte's address of every large write
// (a streamed page's payload is written as is, not copied).
type payloadWriter struct {
	b     []byte
	pages []uintptr
}

func (w *payloadWriter) Write(p []byte) (int, error) {
	if len(p) > 32<<10 {
		w.pages = append(w.pages, uintptr(unsafe.Pointer(&p[0])))
	}
	w.b = append(w.b, p...)
	return len(p), nil
}

// TestStreamedInlinePagesReuseOneBuffer: a streamed inline section builds
// each page into the buffer of the page written before it (one page buffer
// per response, not one per page), and every page still arrives intact.
func TestStreamedInlinePagesReuseOneBuffer(t *testing.T) {
	f := newFixture(t, openShared(t, filepath.Join(t.TempDir(), "db.sqlite")))
	a := f.client("alice", "ca")
	const rows, perPage = 60, 10
	long := strings.Repeat("x", 5000) // 10 rows: a 50 KB page, written as is
	a.seedTitled(rows, long)
	rep := a.bootstrapReply(&ssp2.PullHeader{Accept: ssp2.AcceptInlineRows, LimitSnapshotRows: perPage, MaxSnapshotPages: rows / perPage})
	var w payloadWriter
	if _, err := rep.WriteTo(&w); err != nil {
		t.Fatal(err)
	}
	dec, err := ssp2.DecodeResponse(w.b)
	if err != nil {
		t.Fatal(err)
	}
	got := inlineRows(t, dec.Frames)
	for i, r := range got {
		if want := fmt.Sprintf("t%02d", i); r[0] != want || r[2] != long+want {
			t.Fatalf("row %d is %v, want %s with its title", i, r[0], want)
		}
	}
	if len(got) != rows {
		t.Fatalf("%d rows arrived, want %d", len(got), rows)
	}
	if len(w.pages) != rows/perPage {
		t.Fatalf("%d page payloads written, want %d", len(w.pages), rows/perPage)
	}
	// The first page is built with the reply, the second presized from it
	// (a larger buffer); from the third on, each reuses the one before.
	for i := 2; i < len(w.pages); i++ {
		if w.pages[i] != w.pages[1] {
			t.Fatalf("page %d was built into a new buffer, not the written page's (%#x vs %#x)", i, w.pages[i], w.pages[1])
		}
	}
}
