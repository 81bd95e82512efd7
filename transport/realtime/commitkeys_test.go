package realtime

import (
	"fmt"
	"testing"

	"github.com/synclane/synclane/engine"
)

func keySet(ks ...string) map[string]struct{} {
	m := map[string]struct{}{}
	for _, k := range ks {
		m[k] = struct{}{}
	}
	return m
}

// The key log decides which windows of commits touch a socket's keys:
// exactly by the keys of durable commits this process made, conservatively
// (touch) for seqs it holds nothing for or whose outcome was not durable,
// and not at all while a commit is pending.
func TestCommitKeyLogTouches(t *testing.T) {
	var l commitKeyLog
	l.announce([]engine.CommitKeys{{Seq: 5, Keys: []string{"list:a"}}, {Seq: 6, Keys: []string{"list:b", "list:c"}}})
	if !l.settle(true) {
		t.Fatal("settle: nothing was pending")
	}
	l.announce([]engine.CommitKeys{{Seq: 7, Keys: []string{"list:a"}}})
	l.settle(true)
	l.announce([]engine.CommitKeys{{Seq: 9, Any: true}})
	l.settle(true)
	l.announce([]engine.CommitKeys{{Seq: 10, Keys: []string{"list:z"}}})
	// 10 is pending; 8 has no entry (another process's commit).
	cases := []struct {
		after, upTo int64
		keys        map[string]struct{}
		touch       bool
		undecided   int64
	}{
		{4, 7, keySet("list:x"), false, -1},
		{4, 5, keySet("list:a"), true, -1},
		{5, 6, keySet("list:c"), true, -1},
		{5, 6, keySet("list:a"), false, -1},
		{6, 7, keySet("list:a", "list:q"), true, -1},
		{3, 5, keySet("list:x"), true, -1}, // 4: held nothing
		{7, 8, keySet("list:x"), true, -1}, // 8: another process's
		{8, 9, keySet("list:x"), true, -1}, // 9: may touch any key
		{9, 10, keySet("list:x"), false, 10},
		{9, 10, keySet("list:z"), false, 10}, // pending: undecided even on its key
		{9, 11, keySet("list:x"), true, -1},  // 11: held nothing
		{4, 7, keySet(), false, -1},          // no keys: touched by nothing
		{3, 11, keySet(), false, -1},
		{7, 7, keySet("list:a"), false, -1}, // empty window
	}
	for _, c := range cases {
		touch, undecided := l.touches(c.after, c.upTo, c.keys)
		if touch != c.touch || undecided != c.undecided {
			t.Errorf("touches(%d, %d, %v) = %v, %d; want %v, %d", c.after, c.upTo, c.keys, touch, undecided, c.touch, c.undecided)
		}
	}

	// A rolled-back transaction: its commits may touch anything (the seq
	// may become another process's commit); announcing the seq again
	// replaces it.
	l.settle(false)
	if touch, _ := l.touches(9, 10, keySet("list:x")); !touch {
		t.Error("a commit that was not durable does not touch every key")
	}
	l.announce([]engine.CommitKeys{{Seq: 10, Keys: []string{"list:y"}}, {Seq: 11, Keys: []string{"list:y"}}})
	l.settle(true)
	if touch, u := l.touches(9, 11, keySet("list:x")); touch || u != -1 {
		t.Errorf("seqs 10-11 announced again on list:y touch list:x: %v %d", touch, u)
	}
	// A pending commit never settled is settled as "any" by the next
	// announce.
	l.announce([]engine.CommitKeys{{Seq: 12, Keys: []string{"list:y"}}})
	l.announce([]engine.CommitKeys{{Seq: 13, Keys: []string{"list:y"}}})
	l.settle(true)
	if touch, _ := l.touches(11, 12, keySet("list:x")); !touch {
		t.Error("a commit whose outcome was never reported does not touch every key")
	}
}

// The log keeps at most maxKeyLogCommits commits and maxKeyLogBytes of
// keys; what it forgot touches every key, and a commit with keys over
// maxKeyLogCommitBytes is kept as touching every key.
func TestCommitKeyLogBounds(t *testing.T) {
	var l commitKeyLog
	for seq := int64(1); seq <= maxKeyLogCommits+10; seq++ {
		l.announce([]engine.CommitKeys{{Seq: seq, Keys: []string{"list:a"}}})
		l.settle(true)
	}
	if len(l.entries) != maxKeyLogCommits || l.entries[0].seq != 11 {
		t.Fatalf("%d entries from %d; want %d from 11", len(l.entries), l.entries[0].seq, maxKeyLogCommits)
	}
	if touch, _ := l.touches(9, 11, keySet("list:x")); !touch {
		t.Error("a forgotten commit does not touch every key")
	}
	if touch, _ := l.touches(10, maxKeyLogCommits+10, keySet("list:x")); touch {
		t.Error("commits held on list:a touch list:x")
	}
	var l2 commitKeyLog
	big := make([]string, 0, 400)
	for i := range cap(big) {
		big = append(big, fmt.Sprintf("list:%040d", i))
	}
	l2.announce([]engine.CommitKeys{{Seq: 1, Keys: big}})
	l2.settle(true)
	if !l2.entries[0].any || l2.entries[0].keys != nil {
		t.Fatalf("a commit with %d keys kept them", len(big))
	}
	per := 32 + 100*(len(big[0])+16)
	n := 2 * maxKeyLogBytes / per
	for seq := int64(2); seq < int64(2+n); seq++ {
		l2.announce([]engine.CommitKeys{{Seq: seq, Keys: big[:100]}})
		l2.settle(true)
		if l2.bytes > maxKeyLogBytes {
			t.Fatalf("the log holds %d bytes of keys; the bound is %d", l2.bytes, maxKeyLogBytes)
		}
	}
	if kept := len(l2.entries); kept != maxKeyLogBytes/per {
		t.Fatalf("%d commits of %d bytes kept; want %d", kept, per, maxKeyLogBytes/per)
	}
	sum := 0
	for _, e := range l2.entries {
		sum += e.bytes
	}
	if sum != l2.bytes {
		t.Fatalf("byte count %d, entries sum to %d", l2.bytes, sum)
	}
}
