package partition

import (
	"bytes"

	"github.com/synclane/synclane/storage"
)

// maxTailCommits and maxTailBytes bound the in-memory log tail a partition
// actor keeps: at most 1,024 commits and 256 KiB of them (tailBytes), so a
// partition whose clients push large rows holds at most that much beyond
// what storage holds. A commit larger than the byte budget on its own
// empties the tail; pulls then read storage until it refills.
const (
	maxTailCommits = 1024
	maxTailBytes   = 256 << 10
)

// tailBytes estimates the memory a commit held in the tail takes: its
// strings, row bytes and scope values plus a fixed overhead per record.
func tailBytes(c *storage.CommitRecord) int {
	n := 96 + len(c.ActorID) + len(c.ClientID) + len(c.ClientCommitID)
	for i := range c.Changes {
		ch := &c.Changes[i]
		n += 96 + len(ch.Table) + len(ch.RowID) + len(ch.Row)
		for k, v := range ch.Scopes {
			n += 32 + len(k) + len(v)
		}
	}
	return n
}

// logTail is the newest stretch of a partition's log that its actor made
// durable itself: commits start..start+len-1, contiguous. Incremental pulls
// whose whole window lies inside it are served from memory instead of a
// storage scan. Any doubt (a gap from another process's commit, an epoch
// change, a backfill) empties it, and pulls fall back to storage.
type logTail struct {
	start   int64
	commits []storage.CommitRecord
	sizes   []int // tailBytes of each commit
	bytes   int   // their sum
}

func (t *logTail) end() int64 { return t.start + int64(len(t.commits)) - 1 }

func (t *logTail) reset() { t.start, t.commits, t.sizes, t.bytes = 0, nil, nil, 0 }

// append records a just-committed commit; a non-contiguous seq restarts
// the tail at it. The oldest commits make room under maxTailCommits and
// maxTailBytes; a commit over the byte budget alone empties the tail.
func (t *logTail) append(c storage.CommitRecord) {
	size := tailBytes(&c)
	if size > maxTailBytes {
		t.reset()
		return
	}
	if len(t.commits) == 0 || c.Seq != t.end()+1 {
		clear(t.commits)
		t.start, t.commits, t.sizes, t.bytes = c.Seq, t.commits[:0], t.sizes[:0], 0
	}
	drop := 0
	for bytes := t.bytes; drop < len(t.commits) && (len(t.commits)-drop >= maxTailCommits || bytes+size > maxTailBytes); drop++ {
		bytes -= t.sizes[drop]
	}
	if drop > 0 {
		t.dropFirst(drop)
	}
	// A pushed change's row aliases its request's body: keep a copy, so a
	// 40 KB row does not hold a 20 MB body in memory.
	changes := make([]storage.ChangeRecord, len(c.Changes))
	for i, ch := range c.Changes {
		ch.Row = bytes.Clone(ch.Row)
		changes[i] = ch
	}
	c.Changes = changes
	t.commits = append(t.commits, c)
	t.sizes = append(t.sizes, size)
	t.bytes += size
}

// dropFirst forgets the n oldest commits of the tail.
func (t *logTail) dropFirst(n int) {
	for _, s := range t.sizes[:n] {
		t.bytes -= s
	}
	k := copy(t.commits, t.commits[n:])
	clear(t.commits[k:])
	t.commits = t.commits[:k]
	t.sizes = t.sizes[:copy(t.sizes, t.sizes[n:])]
	t.start += int64(n)
}

// dropThrough forgets the commits at or below a partition's horizon, so
// the tail never serves a pruned range.
func (t *logTail) dropThrough(horizon int64) {
	switch {
	case len(t.commits) == 0 || horizon < t.start:
	case horizon >= t.end():
		t.reset()
	default:
		t.dropFirst(int(horizon - t.start + 1))
	}
}

// covers reports whether the window (after, upTo] lies inside the tail.
func (t *logTail) covers(after, upTo int64) bool {
	return len(t.commits) > 0 && after >= t.start-1 && upTo == t.end()
}

// scan answers a ChangeQuery from the tail with the same contract as
// storage.Log.ScanChanges (whole commits, stop after reaching the limit).
// Truncated is reported whenever the limit stopped the scan before upTo,
// which is conservative: the client's next pull resumes right after the
// last returned commit.
func (t *logTail) scan(q storage.ChangeQuery) storage.ChangeScan {
	var out storage.ChangeScan
	n := 0
	for i := int(q.AfterSeq - t.start + 1); i < len(t.commits); i++ {
		c := &t.commits[i]
		if c.Seq > q.UpToSeq {
			break
		}
		var picked []storage.ChangeRecord
		for _, ch := range c.Changes {
			if ch.Table == q.Table && storage.MatchScopes(ch.Scopes, q.Scopes) {
				picked = append(picked, ch)
			}
		}
		if len(picked) == 0 {
			continue
		}
		out.Commits = append(out.Commits, storage.CommitChanges{Seq: c.Seq, CreatedAtMs: c.CreatedAtMs, ActorID: c.ActorID, Changes: picked})
		n += len(picked)
		if q.LimitChanges > 0 && n >= q.LimitChanges {
			out.Truncated = c.Seq < q.UpToSeq
			break
		}
	}
	return out
}
