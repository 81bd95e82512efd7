package partition

import (
	"github.com/synclane/synclane/storage"
)

// maxTailCommits bounds the in-memory log tail a partition actor keeps.
const maxTailCommits = 1024

// logTail is the newest stretch of a partition's log that its actor made
// durable itself: commits start..start+len-1, contiguous. Incremental pulls
// whose whole window lies inside it are served from memory instead of a
// storage scan. Any doubt (a gap from another process's commit, an epoch
// change, a backfill) empties it, and pulls fall back to storage.
type logTail struct {
	start   int64
	commits []storage.CommitRecord
}

func (t *logTail) end() int64 { return t.start + int64(len(t.commits)) - 1 }

func (t *logTail) reset() { t.start, t.commits = 0, nil }

// append records a just-committed commit; a non-contiguous seq restarts
// the tail at it.
func (t *logTail) append(c storage.CommitRecord) {
	if len(t.commits) == 0 || c.Seq != t.end()+1 {
		t.start, t.commits = c.Seq, t.commits[:0]
	}
	if len(t.commits) == maxTailCommits {
		copy(t.commits, t.commits[1:])
		t.commits = t.commits[:len(t.commits)-1]
		t.start++
	}
	t.commits = append(t.commits, c)
}

// dropThrough forgets the commits at or below a partition's horizon, so
// the tail never serves a pruned range.
func (t *logTail) dropThrough(horizon int64) {
	switch {
	case len(t.commits) == 0 || horizon < t.start:
	case horizon >= t.end():
		t.reset()
	default:
		n := copy(t.commits, t.commits[horizon-t.start+1:])
		clear(t.commits[n:])
		t.commits = t.commits[:n]
		t.start = horizon + 1
	}
}

// covers reports whether the window (after, upTo] lies inside the tail.
func (t *logTail) covers(after, upTo int64) bool {
	return len(t.commits) > 0 && after >= t.start-1 && upTo == t.end()
}

// scan answers a ChangeQuery from the tail with the same contract as
// storage.Store.ScanChanges (whole commits, stop after reaching the limit).
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
