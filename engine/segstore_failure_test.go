package engine_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage/memory"
	"github.com/synclane/synclane/storage/segstore"
)

// brokenSegments is a segment store whose lookups or writes fail.
type brokenSegments struct {
	*segstore.Memory
	lookup, put error
}

func (b *brokenSegments) Lookup(ctx context.Context, partition, key string, nowMs int64) (segstore.Meta, error) {
	if b.lookup != nil {
		return segstore.Meta{}, b.lookup
	}
	return b.Memory.Lookup(ctx, partition, key, nowMs)
}

func (b *brokenSegments) Put(ctx context.Context, m segstore.Meta, data []byte) error {
	if b.put != nil {
		return b.put
	}
	return b.Memory.Put(ctx, m, data)
}

// TestInlinePagesOutliveAFailingSegmentStore: pages above the inline limit
// are stored for reuse, but the store is a cache: when it cannot be read
// or written, an inline-only bootstrap still gets every row inline.
func TestInlinePagesOutliveAFailingSegmentStore(t *testing.T) {
	down := errors.New("segment store down")
	for name, segs := range map[string]*brokenSegments{
		"lookup fails": {Memory: segstore.NewMemory(), lookup: down},
		"put fails":    {Memory: segstore.NewMemory(), put: down},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, memory.New(), func(c *engine.Config) { c.Segments.Store = segs; c.Segments.InlineMaxBytes = 1 })
			a := f.client("alice", "ca")
			const rows, perPage = 30, 10
			a.seedTitled(rows, "title ")
			rep, err := a.sync(&ssp2.PullHeader{Accept: ssp2.AcceptInlineRows, LimitSnapshotRows: perPage, MaxSnapshotPages: rows / perPage}, sub("s", -1, "P"))
			if err != nil {
				t.Fatalf("bootstrap with the segment store failing: %v", err)
			}
			for _, fr := range rep.Frames {
				if _, ok := fr.(*ssp2.SegmentRef); ok {
					t.Fatal("a SEGMENT_REF to an inline-only client")
				}
			}
			got := inlineRows(t, rep.Frames)
			for i, r := range got {
				if want := fmt.Sprintf("t%02d", i); r[0] != want {
					t.Fatalf("row %d is %v, want %s", i, r[0], want)
				}
			}
			seen := len(got)
			if seen != rows {
				t.Fatalf("%d rows arrived inline, want %d", seen, rows)
			}
			if st := f.eng.Segments().Stats(); st.Bypassed < rows/perPage {
				t.Fatalf("%d pages counted as served without the store, want at least %d", st.Bypassed, rows/perPage)
			}
		})
	}
}
