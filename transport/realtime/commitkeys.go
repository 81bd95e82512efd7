package realtime

import (
	"sort"

	"github.com/synclane/synclane/engine"
)

// Bounds of a partition's commitKeyLog: its newest 4,096 commits, at most
// 256 KiB of keys (a key costs its bytes plus 16). A commit whose keys
// alone take more than 16 KiB is kept as "may touch any key". What falls
// out only costs precision: a window reaching past the log wakes.
const (
	maxKeyLogCommits     = 4096
	maxKeyLogBytes       = 256 << 10
	maxKeyLogCommitBytes = 16 << 10
)

// commitKeyLog remembers which scope keys this process's newest commits of
// one partition touch (engine.CommitKeys), so the fan-out wakes a
// socket that is not live only for commits that touch its keys. Keys are
// announced before their transaction commits (pending) and settled after:
// a pending commit is undecided (the commit feed may report it first; a
// rolled-back one's seq may be another process's commit). A seq it holds
// no entry for (another process's commit, reported by the engine's commit
// feed without keys, or one it forgot) and a commit whose outcome was not
// durable count as touching every key. Guarded by part.mu.
type commitKeyLog struct {
	entries []keyEntry // ascending, distinct seqs
	bytes   int
}

type keyEntry struct {
	seq     int64
	keys    []string
	any     bool
	pending bool
	bytes   int
}

// announce records the keys of commits whose transaction is about to
// commit (in seq order). Entries at or past their first seq are replaced
// (a rolled-back transaction's seqs are used again); one still pending
// is settled as touching every key (its outcome was never reported).
func (l *commitKeyLog) announce(commits []engine.CommitKeys) {
	if len(commits) == 0 {
		return
	}
	l.settle(false)
	first := commits[0].Seq
	if n := sort.Search(len(l.entries), func(i int) bool { return l.entries[i].seq >= first }); n < len(l.entries) {
		for _, x := range l.entries[n:] {
			l.bytes -= x.bytes
		}
		clear(l.entries[n:])
		l.entries = l.entries[:n]
	}
	for _, c := range commits {
		if n := len(l.entries); n > 0 && c.Seq <= l.entries[n-1].seq {
			continue // out of order (never expected): no entry, so it wakes
		}
		e := keyEntry{seq: c.Seq, keys: c.Keys, any: c.Any, pending: true, bytes: 32}
		for _, k := range c.Keys {
			e.bytes += len(k) + 16
		}
		if e.bytes > maxKeyLogCommitBytes {
			e.keys, e.any, e.bytes = nil, true, 32
		}
		drop := 0
		for b := l.bytes; drop < len(l.entries) && (len(l.entries)-drop >= maxKeyLogCommits || b+e.bytes > maxKeyLogBytes); drop++ {
			b -= l.entries[drop].bytes
		}
		if drop > 0 {
			for _, x := range l.entries[:drop] {
				l.bytes -= x.bytes
			}
			k := copy(l.entries, l.entries[drop:])
			clear(l.entries[k:])
			l.entries = l.entries[:k]
		}
		l.entries = append(l.entries, e)
		l.bytes += e.bytes
	}
}

// settle ends the pending entries: durable keeps their keys; otherwise
// they touch every key. It reports whether any was pending.
func (l *commitKeyLog) settle(durable bool) bool {
	settled := false
	for i := len(l.entries) - 1; i >= 0 && l.entries[i].pending; i-- {
		e := &l.entries[i]
		e.pending, settled = false, true
		if !durable {
			l.bytes -= e.bytes - 32
			e.keys, e.any, e.bytes = nil, true, 32
		}
	}
	return settled
}

// touches reports whether a commit in (after, upTo] may touch one of keys:
// one of its keys is among them, the log holds no keys for one of those
// seqs, or one was not durable. Otherwise, when a pending commit is in the
// window, undecided is the lowest such seq (the decision waits for its
// outcome); else it is -1. A socket with no keys is touched by nothing.
func (l *commitKeyLog) touches(after, upTo int64, keys map[string]struct{}) (touch bool, undecided int64) {
	undecided = -1
	if len(keys) == 0 || upTo <= after {
		return false, -1
	}
	i := sort.Search(len(l.entries), func(i int) bool { return l.entries[i].seq > after })
	want := after + 1
	for ; i < len(l.entries) && l.entries[i].seq <= upTo; i++ {
		e := &l.entries[i]
		if e.seq != want {
			return true, -1
		}
		want++
		if e.pending {
			if undecided < 0 {
				undecided = e.seq
			}
			continue
		}
		if e.any {
			return true, -1
		}
		for _, k := range e.keys {
			if _, ok := keys[k]; ok {
				return true, -1
			}
		}
	}
	if want <= upTo {
		return true, -1
	}
	return false, undecided
}
