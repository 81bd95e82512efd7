package engine_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/protocol/ssp2"
)

// seedTitled pushes rows t00, t01, … of project P, each titled title+id.
func (c *client) seedTitled(rows int, title string) {
	c.f.t.Helper()
	for i := range rows {
		id := fmt.Sprintf("t%02d", i)
		c.push("c"+id, upsert("tasks", id, c.f.row(id, "P", title+id), nil))
	}
}

// bootstrapReply asks for project P's bootstrap under ph and returns the
// engine's reply unwritten (streamed pages are built as it is written).
func (c *client) bootstrapReply(ph *ssp2.PullHeader) *engine.Reply {
	c.f.t.Helper()
	h := &ssp2.ReqHeader{ClientID: c.cid, SchemaVersion: c.sv, LogEpoch: c.epoch}
	msg := &ssp2.Message{WireVersion: c.wire, Kind: ssp2.KindRequest, Frames: []ssp2.Frame{h, ph, sub("s", -1, "P")}}
	rep, err := c.f.eng.Sync(context.Background(), c.id, msg)
	if err != nil {
		c.f.t.Fatal(err)
	}
	return rep
}

// inlineRows decodes the rows of every SEGMENT_INLINE among frames, in
// order.
func inlineRows(t *testing.T, frames []ssp2.Frame) []ssp2.Row {
	t.Helper()
	var out []ssp2.Row
	for _, fr := range frames {
		si, ok := fr.(*ssp2.SegmentInline)
		if !ok {
			continue
		}
		seg, err := ssp2.DecodeSegment(si.Payload)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range seg.Blocks {
			for _, r := range b {
				out = append(out, r.Values)
			}
		}
	}
	return out
}
