package peer

import (
	"context"
	"sync"
	"time"

	"go.uber.org/zap"
)

// seqReq asks for a partition's newest seq; done gets it (on a reader
// goroutine: it pushes a task).
type seqReq struct {
	p    string
	done func(seq int64, err error)
}

// seqQueue holds the reads of newest seqs not yet started; maxSeqWorkers
// goroutines take them (a follower re-dialing with thousands of follows
// costs that many reads, a few at a time).
type seqQueue struct {
	mu     sync.Mutex
	q      []seqReq
	signal chan struct{}
}

func newSeqQueue() *seqQueue { return &seqQueue{signal: make(chan struct{}, 1)} }

func (q *seqQueue) add(p string, done func(int64, error)) {
	q.mu.Lock()
	q.q = append(q.q, seqReq{p: p, done: done})
	q.mu.Unlock()
	select {
	case q.signal <- struct{}{}:
	default:
	}
}

// take returns the next request, waiting for one; false when ctx ended.
func (q *seqQueue) take(ctx context.Context) (seqReq, bool) {
	for {
		q.mu.Lock()
		if len(q.q) > 0 {
			req := q.q[0]
			q.q[0] = seqReq{}
			q.q = q.q[1:]
			more := len(q.q) > 0
			q.mu.Unlock()
			if more { // another worker may be waiting
				select {
				case q.signal <- struct{}{}:
				default:
				}
			}
			return req, true
		}
		q.mu.Unlock()
		select {
		case <-q.signal:
		case <-ctx.Done():
			return seqReq{}, false
		}
	}
}

// seqWorker reads newest seqs until Close: each read is tried three times
// (100 ms, then 200 ms apart), 10 s each. Without RelayConfig.MaxSeq
// nothing is read (and done is not called).
func (r *Relay) seqWorker() {
	for {
		req, ok := r.seqs.take(r.ctx)
		if !ok {
			return
		}
		if r.cfg.MaxSeq == nil {
			continue
		}
		var seq int64
		var err error
		for attempt, wait := 0, 100*time.Millisecond; attempt < 3; attempt, wait = attempt+1, 2*wait {
			ctx, cancel := context.WithTimeout(r.ctx, 10*time.Second)
			seq, err = r.cfg.MaxSeq(ctx, req.p)
			cancel()
			if err == nil || r.ctx.Err() != nil {
				break
			}
			r.log.Debug("cluster: newest seq not read; retrying", zap.String("partition", req.p), zap.Error(err))
			if attempt < 2 && !sleep(r.ctx, wait) {
				break
			}
		}
		if r.ctx.Err() != nil {
			return
		}
		req.done(seq, err)
	}
}
