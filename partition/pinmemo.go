package partition

import (
	"slices"
	"strings"

	"github.com/synclane/synclane/storage"
)

// maxPinMemo bounds the scope pins a partition remembers (one per table,
// scope variable and value list its reconnecting clients bootstrap).
const maxPinMemo = 64

// pinMemo remembers the answers of Log.LatestScopeCommit a partition
// asked for, each with the max seq and log epoch it was asked at, so the
// scope pin of the next bootstrap of the same scope (a reconnect) is
// brought forward from the log tail instead of read from storage: the
// newest commit in (at, max] with a change of the table carrying one of
// the values, or the remembered answer when there is none. It is used
// only when the tail holds every commit of (at, max] (or nothing was
// committed since) under the same log epoch; otherwise storage answers.
// Owned by the partition actor; not safe for concurrent use.
type pinMemo struct {
	m map[string]pinEntry
}

type pinEntry struct {
	seq, at int64
	epoch   string
}

func pinKey(q storage.ScopeCommitQuery) string {
	return q.Table + "\x00" + q.Var + "\x00" + strings.Join(q.Values, "\x00")
}

// get answers q (UpToSeq is the partition's max seq) from memory and the
// tail, or reports false.
func (m *pinMemo) get(q storage.ScopeCommitQuery, epoch string, tail *logTail) (int64, bool) {
	e, ok := m.m[pinKey(q)]
	if !ok || e.epoch != epoch || e.at > q.UpToSeq {
		return 0, false
	}
	if e.at == q.UpToSeq {
		return e.seq, true
	}
	if !tail.covers(e.at, q.UpToSeq) {
		return 0, false
	}
	if seq, ok := tail.latestScope(q, e.at); ok {
		return seq, true
	}
	return e.seq, true
}

// put remembers seq as the answer to q at q.UpToSeq.
func (m *pinMemo) put(q storage.ScopeCommitQuery, epoch string, seq int64) {
	if m.m == nil {
		m.m = map[string]pinEntry{}
	}
	k := pinKey(q)
	if _, ok := m.m[k]; !ok && len(m.m) >= maxPinMemo {
		clear(m.m)
	}
	m.m[k] = pinEntry{seq: seq, at: q.UpToSeq, epoch: epoch}
}

// latestScope returns the newest commit of the tail in (after, q.UpToSeq]
// with a change of q.Table whose value of q.Var is one of q.Values (the
// Log.LatestScopeCommit rule), false when there is none.
func (t *logTail) latestScope(q storage.ScopeCommitQuery, after int64) (int64, bool) {
	for i := len(t.commits) - 1; i >= 0; i-- {
		c := &t.commits[i]
		if c.Seq <= after {
			break
		}
		if c.Seq > q.UpToSeq {
			continue
		}
		for _, ch := range c.Changes {
			if v, ok := ch.Scopes[q.Var]; ok && ch.Table == q.Table && slices.Contains(q.Values, v) {
				return c.Seq, true
			}
		}
	}
	return 0, false
}
