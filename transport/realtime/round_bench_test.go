package realtime_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/synclane/synclane/protocol/ssp2"
)

// BenchmarkSocketRound: one socket round per iteration, an incremental pull
// of one subscription answered with no commits (a round's fixed cost:
// request, engine call, the answer's chunks, with the reader check before
// each), and a bootstrap of 200 rows (many chunks).
func BenchmarkSocketRound(b *testing.B) {
	for _, rows := range []int{0, 200} {
		b.Run(fmt.Sprintf("rows=%d", rows), func(b *testing.B) {
			f := newFixture(b, fixtureOpts{})
			ctx := context.Background()
			w := f.httpClient("ada", "w")
			for i := range rows {
				push(b, ctx, w, fmt.Sprintf("r%d", i), "groceries", "row")
			}
			c, err := f.dial(ctx, "ada", "b")
			if err != nil {
				b.Fatal(err)
			}
			defer c.CloseNow()
			cursor := int64(-1)
			if rows == 0 {
				cursor = 0
			}
			req := encodeReqB(b, "b", w.Epoch, &ssp2.PullHeader{Accept: ssp2.AcceptInlineRows, LimitSnapshotRows: 1, MaxSnapshotPages: 50},
				&ssp2.Subscription{ID: "s", Table: "todos", Scopes: map[string][]string{"list_id": {"groceries"}}, Cursor: cursor})
			b.ResetTimer()
			for range b.N {
				if _, err := c.Round(ctx, req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func encodeReqB(b *testing.B, clientID, epoch string, frames ...ssp2.Frame) []byte {
	h := &ssp2.ReqHeader{ClientID: clientID, SchemaVersion: 1}
	if epoch != "" {
		h.LogEpoch = &epoch
	}
	out, err := ssp2.Encode(&ssp2.Message{WireVersion: ssp2.WireV3, Kind: ssp2.KindRequest, Frames: append([]ssp2.Frame{h}, frames...)})
	if err != nil {
		b.Fatal(err)
	}
	return out
}
