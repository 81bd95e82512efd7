// Package opwatch serves live query watches (REMOTE.md revision 1 §6) on
// a WebSocket, conventionally GET <mount>/operations/realtime: a client
// registers watches of registered queries and receives a full replacement
// snapshot (rows and maxCommitSeq) when it registers and again whenever a
// commit touches one of the query's tables.
//
// Messages are tagged values (package opwire) in text frames. Client:
// {revision 1, kind "watch", watchId, clientId, operationId, params} and
// {revision 1, kind "unwatch", watchId}. Server: {revision 1, kind
// "snapshot", watchId, operationId, rows, maxCommitSeq} and {revision 1,
// kind "error", [watchId,] code, message, retryable}.
//
// Behaviour:
//   - A watch runs the same query and authorization path as POST
//     /operations (operations.Service.Run), with the socket's identity.
//   - A commit of the watch's partition that touches one of the query's
//     tables reruns it; commits arriving during a run set one dirty flag, so
//     at most one rerun is pending. Commits to other tables do not rerun it
//     (the hub reads the log's changes of the query's tables since the
//     watch's last snapshot; after pruning past it, it reruns).
//   - A failed run (forbidden, too large, gate closed, ...) sends an error
//     naming the watch and removes it; the client registers again.
//   - watchId is unique per connection: reusing an active one is
//     operation.invalid_request. unwatch removes the watch and suppresses a
//     run still in flight; unwatch of an unknown id is ignored.
//   - Closing the socket removes every watch. There is no durable watch
//     cursor: a client reconnects and registers again.
//
// Limits: Options.MaxWatches per connection (default 32; more is
// operation.invalid_request), messages of at most
// bodybudget.MaxOperationBodyBytes (larger: the socket is closed with status
// 1009), Options.MaxConnections sockets (default 1000; more get HTTP 429
// sync.websocket_connection_limit), and a socket that cannot take a
// message within Options.WriteTimeout (default 10 s) is closed.
package opwatch

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"go.uber.org/zap"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/storage"
	"github.com/synclane/synclane/transport/auth"
	"github.com/synclane/synclane/transport/bodybudget"
	"github.com/synclane/synclane/transport/httperr"
)

// Options configure a Hub.
type Options struct {
	// Auth authenticates every upgrade (required; fail closed without).
	Auth auth.Authenticator
	// Logger receives connection-level logs (default: no-op).
	Logger *zap.Logger
	// MaxWatches bounds the active watches of one connection (default 32).
	MaxWatches int
	// MaxConnections bounds open sockets (default 1000).
	MaxConnections int
	// WriteTimeout bounds one message write (default 10s).
	WriteTimeout time.Duration
	// OriginPatterns are the accepted browser origins (see
	// websocket.AcceptOptions); by default any origin is accepted, since
	// the socket is authenticated like POST /operations.
	OriginPatterns []string
}

// Hub serves watch sockets. Wire it with Hooks before engine.New, Start it
// with the engine, and Close it before closing the engine.
type Hub struct {
	opts Options
	log  *zap.Logger
	eng  atomic.Pointer[engine.Engine]

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.Mutex
	closed bool
	conns  map[*conn]struct{}

	pendMu  sync.Mutex
	pending map[string]int64 // partition → highest commit seq not yet dispatched
	notify  chan struct{}
	started bool
}

// New returns a hub.
func New(opts Options) *Hub {
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	if opts.MaxWatches <= 0 {
		opts.MaxWatches = 32
	}
	if opts.MaxConnections <= 0 {
		opts.MaxConnections = 1000
	}
	if opts.WriteTimeout <= 0 {
		opts.WriteTimeout = 10 * time.Second
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Hub{opts: opts, log: opts.Logger, ctx: ctx, cancel: cancel, conns: map[*conn]struct{}{},
		pending: map[string]int64{}, notify: make(chan struct{}, 1)}
}

// Hooks chains the hub's commit notification onto cfg.OnCommit.
func (h *Hub) Hooks(cfg *engine.Config) {
	cfg.AddCommitHooks(engine.CommitHooks{OnCommit: h.onCommit})
}

// onCommit records the commit for the dispatcher; it never blocks.
func (h *Hub) onCommit(p string, seq int64) {
	h.pendMu.Lock()
	if seq > h.pending[p] {
		h.pending[p] = seq
	}
	h.pendMu.Unlock()
	select {
	case h.notify <- struct{}{}:
	default:
	}
}

// Start serves with eng and starts the dispatcher (owned by the hub,
// stopped by Close).
func (h *Hub) Start(eng *engine.Engine) {
	h.eng.Store(eng)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.started || h.closed {
		return
	}
	h.started = true
	h.wg.Add(1)
	go h.dispatch()
}

// Close closes every socket and waits for every goroutine the hub
// started; later upgrades are refused.
func (h *Hub) Close() {
	h.mu.Lock()
	h.closed = true
	h.mu.Unlock()
	h.cancel()
	h.wg.Wait()
}

// Connections returns the number of open sockets.
func (h *Hub) Connections() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.conns)
}

// dispatch turns commit notifications into reruns of the watches whose
// tables the commits touched.
func (h *Hub) dispatch() {
	defer h.wg.Done()
	for {
		select {
		case <-h.ctx.Done():
			return
		case <-h.notify:
		}
		h.pendMu.Lock()
		batch := h.pending
		h.pending = map[string]int64{}
		h.pendMu.Unlock()
		for p, seq := range batch {
			h.mu.Lock()
			var cs []*conn
			for c := range h.conns {
				if c.id.Partition == p {
					cs = append(cs, c)
				}
			}
			h.mu.Unlock()
			touched := map[touchKey]bool{}
			for _, c := range cs {
				for _, w := range c.watchList() {
					if h.touches(p, c.lastSeq(w), w.tables, seq, touched) {
						c.trigger(w)
					}
				}
			}
		}
	}
}

type touchKey struct {
	table string
	after int64
}

// touches reports whether a commit in (w's last snapshot, seq] changed
// one of w's tables. Read failures and pruned ranges answer true (a rerun
// is always safe).
func (h *Hub) touches(p string, after int64, tables []string, seq int64, memo map[touchKey]bool) bool {
	if after >= seq {
		return false
	}
	eng := h.eng.Load()
	st := eng.Backend().Log
	for _, t := range tables {
		k := touchKey{t, after}
		hit, ok := memo[k]
		if !ok {
			cs, err := st.ScanChanges(h.ctx, p, storage.ChangeQuery{Table: t, AfterSeq: after, UpToSeq: seq, LimitChanges: 1})
			hit = err != nil || len(cs.Commits) > 0
			memo[k] = hit
		}
		if hit {
			return true
		}
	}
	info, err := st.ReadPartition(h.ctx, p)
	return err != nil || info.HorizonSeq > after
}

// ServeHTTP upgrades an authenticated GET to a watch socket.
func (h *Hub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	eng := h.eng.Load()
	id, ok := auth.AuthenticateUpgrade(w, r, eng, h.opts.Auth, "opwatch", "operation watches")
	if !ok {
		return
	}
	if id.ActorID == "" || id.Partition == "" {
		httperr.Write(w, syncerr.New(syncerr.AuthRequired, "no authenticated actor or partition"))
		return
	}
	c := &conn{hub: h, eng: eng, id: id, watches: map[string]*watch{}}
	c.ctx, c.cancel = context.WithCancel(h.ctx)
	defer c.cancel()
	h.mu.Lock()
	switch {
	case h.closed:
		h.mu.Unlock()
		httperr.WriteStatus(w, http.StatusServiceUnavailable, syncerr.New(syncerr.InternalError, "the server is shutting down"))
		return
	case len(h.conns) >= h.opts.MaxConnections:
		h.mu.Unlock()
		httperr.Write(w, syncerr.New(syncerr.WebsocketConnLimit, "too many watch sockets; retry later"))
		return
	}
	h.conns[c] = struct{}{}
	h.wg.Add(1)
	h.mu.Unlock()
	defer h.wg.Done()
	defer func() {
		h.mu.Lock()
		delete(h.conns, c)
		h.mu.Unlock()
	}()
	ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{InsecureSkipVerify: len(h.opts.OriginPatterns) == 0,
		OriginPatterns: h.opts.OriginPatterns})
	if err != nil {
		h.log.Debug("watch upgrade failed", zap.Error(err))
		return
	}
	ws.SetReadLimit(bodybudget.MaxOperationBodyBytes)
	c.ws = ws
	c.serve()
}
