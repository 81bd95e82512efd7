package main

import (
	"bytes"
	"fmt"
	"reflect"
	"testing"

	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/transport/httpsync/httpsynctest"
)

// TestStripInlineStream: reading a response while dropping its inline
// pages gives the same rest, page count and byte count as stripping the
// whole message, and a truncated body is an error.
func TestStripInlineStream(t *testing.T) {
	cols := []ssp2.Column{{Name: "id", Type: ssp2.TypeString}}
	page := func(n int) []byte {
		sb := ssp2.NewSegmentBuilder("t", 1, cols)
		for i := range n {
			if err := sb.AddRow(int64(i+1), ssp2.Row{fmt.Sprintf("r%06d", i)}); err != nil {
				t.Fatal(err)
			}
		}
		return sb.Finish()
	}
	latest := int32(1)
	msg := &ssp2.Message{WireVersion: ssp2.WireV3, Kind: ssp2.KindResponse, Frames: []ssp2.Frame{
		&ssp2.RespHeader{LatestSchemaVersion: &latest, LogEpoch: "e"},
		&ssp2.SubStart{ID: "s", Status: ssp2.SubActive, Bootstrap: true},
		&ssp2.SegmentInline{Payload: page(10)}, &ssp2.SegmentInline{Payload: page(20000)},
		&ssp2.SubEnd{NextCursor: 7},
	}}
	data, err := ssp2.Encode(msg)
	if err != nil {
		t.Fatal(err)
	}
	wantRest, wantPages := stripInlineFrames(data)
	rest, pages, n, err := stripInlineStream(bytes.NewReader(data))
	if err != nil || !bytes.Equal(rest, wantRest) || pages != wantPages || pages != 2 || n != int64(len(data)) {
		t.Fatalf("stream strip: err %v, %d pages (want %d), %d bytes of %d, rest equal %v", err, pages, wantPages, n, len(data), bytes.Equal(rest, wantRest))
	}
	if m, err := ssp2.DecodeResponse(rest); err != nil || len(m.Frames) != 3 {
		t.Fatalf("the rest does not decode to the three other frames: %v", err)
	}
	if _, _, _, err := stripInlineStream(bytes.NewReader(data[:len(data)-100_000])); err == nil {
		t.Fatal("a truncated body was read without error")
	}
}

// TestStreamBootstrapsLikeDo: a streamed bootstrap (frames decoded and
// applied as they arrive, refs downloaded as they come) converges to the
// same replica as whole responses, in the inline and the by-ref lanes.
func TestStreamBootstrapsLikeDo(t *testing.T) {
	ctx := t.Context()
	cfg := &Config{Mode: ModeLoopback, DataDir: t.TempDir()}
	tg, err := openTarget(ctx, cfg, "sqlite", EngineOpts{ServeSegments: true})
	if err != nil {
		t.Fatal(err)
	}
	defer tg.Close()
	const n = 1200
	if err := seedRows(ctx, tg, "boot", n); err != nil {
		t.Fatal(err)
	}
	sch := schema.MustDemo()
	scopes := map[string][]string{"list_id": allLists}
	for _, lane := range []uint8{ssp2.AcceptInlineRows, ssp2.AcceptRefRows} {
		ph := &ssp2.PullHeader{Accept: lane, LimitSnapshotRows: 100, MaxSnapshotPages: 4}
		bootstrap := func(name string, stream bool) map[string]httpsynctest.ReplicaRow {
			c := tg.Client("reader", "boot", name)
			rep := httpsynctest.NewReplica(nil, sch)
			rep.Subscribe("s", "todos", scopes)
			for i := 0; ; i++ {
				if i > 100 {
					t.Fatalf("lane %d, %s: no convergence", lane, name)
				}
				s := rep.Subs[0]
				var st httpsynctest.PullStats
				if stream {
					a := rep.Applier()
					if err := c.Stream(ctx, scopes, sch, a.Frame, ph, allTodos(s.ID, s.Cursor, s.Token)); err != nil {
						t.Fatalf("lane %d, %s: %v", lane, name, err)
					}
					st = a.Stats()
				} else {
					msg, err := c.Do(ctx, ph, allTodos(s.ID, s.Cursor, s.Token))
					if err == nil {
						err = c.ResolveSegments(ctx, msg, scopes, sch)
					}
					if err == nil {
						st, err = rep.Apply(msg)
					}
					if err != nil {
						t.Fatalf("lane %d, %s: %v", lane, name, err)
					}
				}
				if !st.Incomplete {
					return rep.Rows["todos"]
				}
			}
		}
		whole, streamed := bootstrap(fmt.Sprintf("whole-%d", lane), false), bootstrap(fmt.Sprintf("streamed-%d", lane), true)
		if len(whole) != n || !reflect.DeepEqual(whole, streamed) {
			t.Fatalf("lane %d: streamed replica has %d rows, whole-response replica %d (want %d), or they differ", lane, len(streamed), len(whole), n)
		}
	}
}
