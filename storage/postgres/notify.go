package postgres

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"
)

// Notifier reports commits made by any process on the store's database.
// It owns one dedicated connection (outside the pool) running LISTEN, and
// one goroutine that waits for notifications and calls the callback.
//
// Lifecycle: Listen starts it; it runs until the context given to Listen is
// cancelled, Close is called, or the Store is closed, and Close (or Done)
// waits for the goroutine to exit. A lost connection is re-established with
// exponential backoff (50ms doubling to 5s); after each reconnect, once
// LISTEN is active again, the notifier reads every partition's
// max_commit_seq and reports it, so a commit made while disconnected is not
// missed. Reports are therefore at-least-once and may repeat a value.
//
// The notifier never uses the pool: that read runs on its own connection,
// and each reconnect attempt (connect, LISTEN, the read) is bounded by
// notifierAttemptTimeout, so it neither holds nor waits for a pool
// connection while the database is away or the pool is busy.
type Notifier struct {
	s      *Store
	fn     func(partition string, maxSeq int64)
	cancel context.CancelFunc
	done   chan struct{}

	mu          sync.Mutex
	conn        *pgx.Conn // current listener connection, nil while reconnecting
	reconnects  int
	onReconnect func() // test hook, called after a successful reconnect
}

// Listen starts a Notifier calling fn(partition, maxSeq) for each commit
// notification, from the notifier's goroutine, one call at a time (fn must
// not block for long). Listen returns once LISTEN is active, so every
// commit whose transaction commits after Listen returns is reported. It
// fails if the first connection cannot be made.
func (s *Store) Listen(ctx context.Context, fn func(partition string, maxSeq int64)) (*Notifier, error) {
	return s.listen(ctx, fn, false)
}

// listen is Listen; with resync the notifier first reports every
// partition's max_commit_seq once LISTEN is active (as after a reconnect).
func (s *Store) listen(ctx context.Context, fn func(partition string, maxSeq int64), resync bool) (*Notifier, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, errClosed
	}
	s.mu.Unlock()
	conn, err := s.listenConn(ctx)
	if err != nil {
		return nil, classify("Listen", err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	n := &Notifier{s: s, fn: fn, cancel: cancel, done: make(chan struct{}), conn: conn}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		cancel()
		closeConn(conn)
		return nil, errClosed
	}
	s.notifiers[n] = struct{}{}
	s.mu.Unlock()
	go n.run(runCtx, conn, resync)
	return n, nil
}

// Subscribe runs a Notifier calling fn until ctx is cancelled, then returns
// ctx's error. It returns earlier only if the first connection fails or the
// Store is closed (then nil). Once LISTEN is active it reports every
// partition's max_commit_seq, as after a reconnect, so a subscriber that
// calls Subscribe again after a failure (or starts late) misses no commit
// made while it was not listening.
func (s *Store) Subscribe(ctx context.Context, fn func(partition string, maxSeq int64)) error {
	n, err := s.listen(ctx, fn, true)
	if err != nil {
		return err
	}
	<-n.Done()
	return ctx.Err()
}

// Close stops the notifier and waits for its goroutine to exit. It is
// idempotent and always returns nil.
func (n *Notifier) Close() error {
	n.cancel()
	<-n.done
	return nil
}

// Done is closed when the notifier's goroutine has exited.
func (n *Notifier) Done() <-chan struct{} { return n.done }

// Reconnects reports how many times the notifier has re-established its
// connection.
func (n *Notifier) Reconnects() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.reconnects
}

// notifierAttemptTimeout bounds one attempt of the notifier to connect,
// LISTEN and read every partition's max_commit_seq.
const notifierAttemptTimeout = 10 * time.Second

// listenConn opens a dedicated connection with the pool's settings and
// runs LISTEN on it.
func (s *Store) listenConn(ctx context.Context) (*pgx.Conn, error) {
	cfg := s.pool.Config().ConnConfig.Copy()
	cfg.RuntimeParams["application_name"] = "synclane-notifier"
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{s.channel}.Sanitize()); err != nil {
		closeConn(conn)
		return nil, err
	}
	return conn, nil
}

func closeConn(c *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = c.Close(ctx)
}

func (n *Notifier) run(ctx context.Context, conn *pgx.Conn, resync bool) {
	defer func() {
		n.s.mu.Lock()
		delete(n.s.notifiers, n)
		n.s.mu.Unlock()
		close(n.done)
	}()
	if resync {
		rctx, cancel := context.WithTimeout(ctx, notifierAttemptTimeout)
		err := n.resync(rctx, conn)
		cancel()
		if err != nil {
			if conn = n.replace(ctx, conn, "first resync failed", err); conn == nil {
				return
			}
		}
	}
	for {
		note, err := conn.WaitForNotification(ctx)
		if err == nil {
			if p, seq, ok := parsePayload(note.Payload); ok && note.Channel == n.s.channel {
				n.fn(p, seq)
			} else {
				n.s.log.Warn("postgres notifier: malformed notification", zap.String("channel", note.Channel), zap.String("payload", note.Payload))
			}
			continue
		}
		if conn = n.replace(ctx, conn, "connection lost", err); conn == nil {
			return
		}
	}
}

// replace closes conn after what went wrong and reconnects (reporting
// every partition once LISTEN is active again); nil when ctx is done.
func (n *Notifier) replace(ctx context.Context, conn *pgx.Conn, what string, err error) *pgx.Conn {
	n.setConn(nil)
	closeConn(conn)
	if ctx.Err() != nil {
		return nil
	}
	n.s.log.Warn("postgres notifier: "+what+"; reconnecting", zap.Error(err))
	return n.reconnect(ctx)
}

// reconnect re-establishes LISTEN with backoff and then reports every
// partition's max_commit_seq. It returns nil when ctx is done.
func (n *Notifier) reconnect(ctx context.Context) *pgx.Conn {
	backoff := 50 * time.Millisecond
	for {
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		backoff = min(backoff*2, 5*time.Second)
		actx, cancel := context.WithTimeout(ctx, notifierAttemptTimeout)
		conn, err := n.s.listenConn(actx)
		if err == nil {
			if err = n.resync(actx, conn); err == nil {
				cancel()
				n.mu.Lock()
				n.reconnects++
				n.conn = conn
				hook := n.onReconnect
				n.mu.Unlock()
				n.s.log.Info("postgres notifier: reconnected")
				if hook != nil {
					hook()
				}
				return conn
			}
			closeConn(conn)
		}
		cancel()
		if ctx.Err() != nil {
			return nil
		}
		n.s.log.Warn("postgres notifier: reconnect failed", zap.Error(err), zap.Duration("retry_in", backoff))
	}
}

// resync reports the current max_commit_seq of every partition that has
// commits, read on the notifier's own connection conn (LISTEN is active on
// it already: a commit after the read is notified).
func (n *Notifier) resync(ctx context.Context, conn *pgx.Conn) error {
	rows, err := conn.Query(ctx, n.s.q.listPartitions)
	if err != nil {
		return err
	}
	type entry struct {
		p   string
		seq int64
	}
	all, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (entry, error) {
		var e entry
		err := r.Scan(&e.p, &e.seq)
		return e, err
	})
	if err != nil {
		return fmt.Errorf("resync: %w", err)
	}
	for _, e := range all {
		if e.seq > 0 { // a partition without commits has nothing to report
			n.fn(e.p, e.seq)
		}
	}
	return nil
}

func (n *Notifier) setConn(c *pgx.Conn) {
	n.mu.Lock()
	n.conn = c
	n.mu.Unlock()
}

// parsePayload splits "<partition>\t<maxSeq>".
func parsePayload(s string) (string, int64, bool) {
	i := strings.LastIndexByte(s, '\t')
	if i < 0 {
		return "", 0, false
	}
	seq, err := strconv.ParseInt(s[i+1:], 10, 64)
	if err != nil {
		return "", 0, false
	}
	return s[:i], seq, true
}
