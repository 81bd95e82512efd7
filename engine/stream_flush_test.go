package engine_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage/memory"
	"github.com/synclane/synclane/storage/segstore"
)

// flushWriter records, at every Flush, how many SEGMENT_REF frames the
// bytes written so far hold.
type flushWriter struct {
	b       bytes.Buffer
	refsAt  []int
	flushes int
}

func (w *flushWriter) Write(p []byte) (int, error) { return w.b.Write(p) }

func (w *flushWriter) Flush() error {
	w.flushes++
	d := ssp2.NewDecoder(bytes.NewReader(w.b.Bytes()), ssp2.KindResponse, 0)
	refs := 0
	for {
		f, err := d.Next()
		if err != nil {
			break // the prefix ends mid-message
		}
		if _, ok := f.(*ssp2.SegmentRef); ok {
			refs++
		}
	}
	w.refsAt = append(w.refsAt, refs)
	return nil
}

// TestStreamedPagesAreFlushed: each page streamed after the first is
// flushed to a writer that can flush, with every reference so far, so a
// client downloads it while the next one is built (a reference is a few
// hundred bytes: buffered, the whole section would leave at its end).
func TestStreamedPagesAreFlushed(t *testing.T) {
	f := newFixture(t, memory.New(), func(c *engine.Config) { c.Segments.Store = segstore.NewMemory() })
	a := f.client("alice", "ca")
	const rows, perPage = 40, 10
	a.seedTitled(rows, "title ")
	rep := a.bootstrapReply(&ssp2.PullHeader{Accept: ssp2.AcceptRefRows, LimitSnapshotRows: perPage, MaxSnapshotPages: rows / perPage})
	var w flushWriter
	if _, err := rep.WriteTo(&w); err != nil {
		t.Fatal(err)
	}
	// The first page's reference is built with the reply; the other three
	// are streamed, each flushed with all the references before it.
	if want := []int{2, 3, 4}; fmt.Sprint(w.refsAt) != fmt.Sprint(want) {
		t.Fatalf("references in the bytes at each flush: %v, want %v", w.refsAt, want)
	}
	d := ssp2.NewDecoder(bytes.NewReader(w.b.Bytes()), ssp2.KindResponse, 0)
	for {
		if _, err := d.Next(); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("the whole response: %v", err)
		}
	}
}
