package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
)

// todoCodec encodes rows of the demo schema's todos table.
var todoCodec = func() *ssp2.RowCodec {
	return ssp2.NewRowCodec(schema.MustDemo().Table("todos").Columns)
}()

// todoValues is the n-th version of todo id in list.
func todoValues(id, list string, n int64) ssp2.Row {
	return ssp2.Row{id, list, "todo " + id + " #" + strconv.FormatInt(n, 10), n%2 == 0, n, time.Now().UnixMilli()}
}

// todoUpsert returns a one-operation upsert of todo id in list: a whole
// row, as a wire-v3 sparse payload presenting every column.
func todoUpsert(id, list string, n int64) ssp2.Operation {
	row, err := todoCodec.AppendSparse(nil, todoValues(id, list, n), nil, 0)
	if err != nil {
		panic(err)
	}
	return ssp2.Operation{Table: "todos", RowID: id, Op: ssp2.OpUpsert, Payload: row}
}

// pushOne pushes one commit and reports its commit sequence.
func pushOne(ctx context.Context, c *Client, commitID string, ops ...ssp2.Operation) (int64, error) {
	resp, err := c.Do(ctx, &ssp2.PushCommit{ClientCommitID: commitID, Operations: ops})
	if err != nil {
		return 0, err
	}
	for _, f := range resp.Frames {
		if pr, ok := f.(*ssp2.PushResult); ok {
			if pr.Status == ssp2.CommitRejected || pr.CommitSeq == nil {
				msg := ""
				if len(pr.Results) > 0 {
					msg = pr.Results[0].Code + ": " + pr.Results[0].Message
				}
				return 0, fmt.Errorf("commit %s rejected: %s", commitID, msg)
			}
			return *pr.CommitSeq, nil
		}
	}
	return 0, fmt.Errorf("commit %s: no PUSH_RESULT", commitID)
}

// numLists is how many todo lists the workloads spread rows over; rows of
// list i belong to list "list-<i>".
const numLists = 8

// listID names list i mod numLists.
func listID(i int) string { return "list-" + strconv.Itoa(i%numLists) }

// allLists are the scope values of every list (requested scopes may not
// use the wildcard).
var allLists = func() []string {
	out := make([]string, numLists)
	for i := range out {
		out[i] = listID(i)
	}
	return out
}()

// allTodos is the subscription to every todos row of the workloads.
func allTodos(id string, cursor int64, state []byte) *ssp2.Subscription {
	return &ssp2.Subscription{ID: id, Table: "todos", Scopes: map[string][]string{"list_id": allLists}, Cursor: cursor, BootstrapState: state}
}

// pullCommits pulls incrementally after cursor and returns the new cursor
// and the commit sequences seen.
func pullCommits(ctx context.Context, c *Client, cursor int64, seqs []int64) (int64, []int64, error) {
	resp, err := c.Do(ctx, &ssp2.PullHeader{Accept: ssp2.AcceptInlineRows, LimitCommits: 1000}, allTodos("s", cursor, nil))
	if err != nil {
		return cursor, seqs, err
	}
	for _, f := range resp.Frames {
		switch x := f.(type) {
		case *ssp2.Commit:
			seqs = append(seqs, x.CommitSeq)
		case *ssp2.SubStart:
			if x.Bootstrap || x.Status != ssp2.SubActive {
				return cursor, seqs, fmt.Errorf("pull: unexpected section status=%d bootstrap=%v", x.Status, x.Bootstrap)
			}
		case *ssp2.SubEnd:
			cursor = x.NextCursor
		}
	}
	return cursor, seqs, nil
}

// Phase bounds a load loop by time and count. Samples are recorded only
// after the warm-up. A phase whose window saw no operation complete (every
// operation outlasted a short window, e.g. under the race detector on a
// loaded machine) runs on, for at most phaseGrace, until one has: a
// measurement of zero samples says nothing. A loop of several kinds of
// operation (pushes and pulls) can require each kind measured once
// (Require, measuringKind) the same way.
type Phase struct {
	start, measureFrom, end time.Time
	maxOps                  int64
	ops                     atomic.Int64
	measured                atomic.Bool
	need                    uint32
	seen                    atomic.Uint32
}

// Require makes the phase run on past its end (for at most phaseGrace)
// until every kind in kinds (a bit mask) was measured at least once.
func (p *Phase) Require(kinds uint32) *Phase {
	p.need = kinds
	return p
}

// phaseGrace bounds how long a phase runs past its end waiting for its
// first measured operation.
const phaseGrace = 10 * time.Second

func newPhase(warmup, dur time.Duration, maxOps int64) *Phase {
	now := time.Now()
	return &Phase{start: now, measureFrom: now.Add(warmup), end: now.Add(warmup + dur), maxOps: maxOps}
}

// next reserves one operation; false means the loop must stop.
func (p *Phase) next() bool {
	if now := time.Now(); now.After(p.end) && (p.measured.Load() && p.seen.Load()&p.need == p.need || now.After(p.end.Add(phaseGrace))) {
		return false
	}
	return p.maxOps <= 0 || p.ops.Add(1) <= p.maxOps
}

// measuring reports whether t (an operation's start, called once it
// completed) is inside the measurement window.
func (p *Phase) measuring(t time.Time) bool { return p.measuringKind(t, 0) }

// measuringKind is measuring for an operation of the given kind (a bit of
// Require's mask).
func (p *Phase) measuringKind(t time.Time, kind uint32) bool {
	if t.Before(p.measureFrom) {
		return false
	}
	if kind != 0 && p.seen.Load()&kind == 0 {
		p.seen.Or(kind)
	}
	p.measured.Store(true)
	return true
}

// worker is the per-goroutine tally of a load loop.
type tally struct {
	lat    Hist
	ok     int64
	errs   int64
	first  error
	lastOK time.Time
	// kinds counts the errors by errKind; retries the retry-later
	// answers retryOp sent again, by errKind (not errors).
	kinds, retries map[string]int64
}

func (t *tally) fail(err error) {
	t.errs++
	if t.first == nil {
		t.first = err
	}
	if t.kinds == nil {
		t.kinds = map[string]int64{}
	}
	t.kinds[errKind(err)]++
}

// errKind names what went wrong in a request, for the count of errors
// by kind: the protocol code an answer carried (sync.rate_limited, …),
// the HTTP status of an answer that was not 200, a deadline, or the
// error's text (up to its first colon after "bench: ").
func errKind(err error) string {
	var se *syncerr.Error
	var he *statusError
	switch {
	case errors.As(err, &he) && he.Code != "":
		return "HTTP " + strconv.Itoa(he.Status) + " " + he.Code
	case errors.As(err, &he):
		return "HTTP " + strconv.Itoa(he.Status)
	case errors.As(err, &se):
		return string(se.Code)
	case errors.Is(err, context.DeadlineExceeded):
		return "deadline exceeded"
	case errors.Is(err, context.Canceled):
		return "canceled"
	}
	msg := err.Error()
	if len(msg) > 60 {
		msg = msg[:60]
	}
	return msg
}

// retryLater says whether a client would send err's request again after
// a while, and after how long: an answer of HTTP 503 or 429 (the body
// budget, the connection cap, a partition moving between members) after
// its Retry-After (1 s when it gives none), or an in-band
// sync.rate_limited after 1 s. Other codes the catalog calls retryable
// (sync.internal_error among them) stay errors: a load benchmark must
// show them.
func retryLater(err error) (time.Duration, bool) {
	var he *statusError
	if errors.As(err, &he) {
		if he.Status != http.StatusServiceUnavailable && he.Status != http.StatusTooManyRequests {
			return 0, false
		}
		if he.RetryAfter >= 0 {
			return he.RetryAfter, true
		}
		return time.Second, true
	}
	var se *syncerr.Error
	if errors.As(err, &se) && se.Code == syncerr.RateLimited {
		return time.Second, true
	}
	return 0, false
}

// retryOp runs op, and again after the wait retryLater gives while it
// answers a retry-later error, at most maxRetries times; each retry is
// counted in t.retries by kind (not as an error). The error returned is
// op's last. Retrying is safe for SSP2 requests: a push is idempotent by
// its clientCommitId and a pull reads.
func retryOp(ctx context.Context, t *tally, op func() error) error {
	const maxRetries = 5
	for attempt := 0; ; attempt++ {
		err := op()
		wait, ok := retryLater(err)
		if err == nil || !ok || attempt == maxRetries {
			return err
		}
		if t.retries == nil {
			t.retries = map[string]int64{}
		}
		t.retries[errKind(err)]++
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return err
		}
	}
}

// kindsNote renders counts by kind after label, most frequent first (""
// if none).
func kindsNote(label string, kinds map[string]int64) string {
	if len(kinds) == 0 {
		return ""
	}
	names := make([]string, 0, len(kinds))
	for k := range kinds {
		names = append(names, k)
	}
	sort.Slice(names, func(i, j int) bool {
		if kinds[names[i]] != kinds[names[j]] {
			return kinds[names[i]] > kinds[names[j]]
		}
		return names[i] < names[j]
	})
	parts := make([]string, len(names))
	for i, k := range names {
		parts[i] = k + " ×" + strconv.FormatInt(kinds[k], 10)
	}
	return label + ": " + strings.Join(parts, ", ")
}

// runWorkers runs n goroutines of fn and waits for them.
func runWorkers(n int, fn func(i int)) {
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn(i)
		}()
	}
	wg.Wait()
}

// mergeTallies sums the tallies and returns the first error seen.
func mergeTallies(ts []tally) (tally, error) {
	var out tally
	for i := range ts {
		out.lat.Merge(&ts[i].lat)
		out.ok += ts[i].ok
		out.errs += ts[i].errs
		for k, n := range ts[i].kinds {
			if out.kinds == nil {
				out.kinds = map[string]int64{}
			}
			out.kinds[k] += n
		}
		for k, n := range ts[i].retries {
			if out.retries == nil {
				out.retries = map[string]int64{}
			}
			out.retries[k] += n
		}
		if out.first == nil {
			out.first = ts[i].first
		}
		if ts[i].lastOK.After(out.lastOK) {
			out.lastOK = ts[i].lastOK
		}
	}
	return out, out.first
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

// pullAll is the PULL_HEADER of bootstrap pulls in setup.
var pullAll = ssp2.PullHeader{Accept: ssp2.AcceptInlineRows, LimitSnapshotRows: 10000, MaxSnapshotPages: 10}

// subEnd returns the last SUB_END of a response.
func subEnd(m *ssp2.Message) *ssp2.SubEnd {
	var e *ssp2.SubEnd
	for _, f := range m.Frames {
		if x, ok := f.(*ssp2.SubEnd); ok {
			e = x
		}
	}
	return e
}
