package ssp2

import (
	"bytes"
	"testing"
)

// The reflection-free rendering of hello, sync, heartbeat and ack is the
// bytes encoding/json renders (checked by the parsers), and every value it
// leaves alone (escapes, numbers beyond ±(2^53-1), unknown reasons) gets
// the generic path's bytes or error.
func TestMarshalControlFastPathMatchesJSON(t *testing.T) {
	strs := []string{"", "s1", "actor-7", "a b", `quo"te`, `back\slash`, "<tag>", "a&b", "tab\t", "é", "\u2028", "\xff", "~"}
	ints := []int64{0, 1, -1, 42, 1_700_000_000_000, MaxSafeInt, -MaxSafeInt, MaxSafeInt + 1, -MaxSafeInt - 1}
	var msgs []any
	for i, s := range strs {
		n := ints[i%len(ints)]
		msgs = append(msgs,
			&Hello{ProtocolVersion: 1, SessionID: s, ActorID: "a", ClientID: "c", Cursor: n, LatestCursor: 3, RequiresSync: i%2 == 0, Timestamp: 5},
			&Hello{ProtocolVersion: 1, SessionID: "s", ActorID: s, ClientID: s, Cursor: -1, LatestCursor: n, Timestamp: n})
	}
	for _, n := range ints {
		msgs = append(msgs, &Heartbeat{Timestamp: n}, &Ack{Cursor: n}, &Hello{ProtocolVersion: n, SessionID: "s", Timestamp: 1})
		for _, r := range []string{WakeDeltaTooLarge, WakeCatchupRequired, WakeResetRequired, "other", ""} {
			msgs = append(msgs, &Wake{Cursor: n, Reason: r, Timestamp: 9}, &Wake{Cursor: 1, Reason: r, Timestamp: n})
		}
	}
	fast := 0
	for _, m := range msgs {
		got, gerr := MarshalControl(m)
		want, werr := marshalControlJSON(m)
		if !bytes.Equal(got, want) || (gerr == nil) != (werr == nil) || (gerr != nil && gerr.Error() != werr.Error()) {
			t.Fatalf("%#v: MarshalControl %q, %v; encoding/json %q, %v", m, got, gerr, want, werr)
		}
		if _, ok := appendControl(m); ok {
			fast++
			if werr != nil {
				t.Fatalf("%#v: rendered without reflection but refused by the generic path: %v", m, werr)
			}
		}
	}
	if fast == 0 || fast == len(msgs) {
		t.Fatalf("%d of %d messages took the fast path; want some and not all (the table covers both)", fast, len(msgs))
	}
}

func BenchmarkMarshalHello(b *testing.B) {
	h := &Hello{ProtocolVersion: 1, SessionID: "0123456789abcdef", ActorID: "actor-1", ClientID: "client-1", Cursor: 1234, LatestCursor: 5678, Timestamp: 1_700_000_000_000}
	b.Run("fast", func(b *testing.B) {
		for b.Loop() {
			_, _ = MarshalControl(h)
		}
	})
	b.Run("json", func(b *testing.B) {
		for b.Loop() {
			_, _ = marshalControlJSON(h)
		}
	})
}
