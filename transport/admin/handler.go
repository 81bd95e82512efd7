// Package admin serves synclane's admin API (JSON over HTTP) and the web
// console on their own listener, behind their own bearer token.
//
// Routes (every /api/ route needs "Authorization: Bearer <token>"; the
// console's static files need none and hold no data):
//
//	GET  /                                          the console (HTML, ES modules, CSS)
//	GET  /api/overview                              server-wide view and registered sections
//	GET  /api/partitions?after=&limit=              partitions page (name order)
//	GET  /api/partitions/{p}                        one partition: gate, checkpoints, sections
//	GET  /api/partitions/{p}/clients?after=&limit=  clients page (clientId order)
//	GET  /api/partitions/{p}/clients/{c}            one client
//	GET  /api/partitions/{p}/commits?before=&limit=&client=  commits page (newest first; one client's)
//	GET  /api/partitions/{p}/commits/{seq}          one commit with its changes
//	GET  /api/partitions/{p}/rows/{table}/{id}?limit=&scan=   one row and its history
//	GET  /api/partitions/{p}/scopes?window=         commits per scope value
//	GET  /api/events?after=&limit=                  retained events, oldest first
//	GET  /api/events/stream                         live events (Server-Sent Events)
//	GET  /api/timeseries?seconds=&step=             sync requests, errors, p50/p99 per step (last hour)
//	GET  /api/cluster?partition=                    cluster mode: members and counters (Options.Cluster, ClusterView)
//	GET  /api/cluster/partitions                    cluster mode: partitions per member by this member's view
//	GET  /api/cluster/events?limit=                 cluster mode: every member's recent events (Options.ClusterEvents)
//	GET  /api/reactions?partition=&state=&after=&limit=  stored reactions (id order; state pending|retrying|dead)
//	POST /api/partitions/{p}/rotate-epoch           rotate the log epoch
//	POST /api/partitions/{p}/clients/{c}/revoke-lease  revoke the client's auth lease
//	POST /api/reactions/{id}/redrive                a dead letter pending again (full attempts, due now)
//	POST /api/reactions/{id}/delete                 remove a dead letter for good
//	POST /api/maintenance?dryRun=true               run one maintenance pass
//	POST /api/partitions/{p}/move?to=NAME           move the partition to another PostgreSQL database (Options.MovePartition)
//	POST /api/partitions/rebalance?max=N&dryRun=true  even the databases out (Options.Rebalance)
//
// Pages: limit defaults to 50 and is capped at 500; the answer's "next" is
// the cursor of the following page ("" at the end). Errors are JSON
// {"error":{"code","message"}}: admin.unauthorized (401: missing or wrong
// token), sync.rate_limited (429 with Retry-After: too many wrong tokens
// from the address, see TokenAttempts), admin.not_found (404), admin.invalid_argument (400),
// admin.feature_off (409: an action on a feature the server runs
// without, e.g. revoke-lease with leases off),
// admin.unavailable (503: the store failed
// or the request timed out); protocol refusals keep their sync.* code.
// Reads run with ReadTimeout (default 10s), actions with ActionTimeout
// (default 5m).
//
// The event stream replays retained events after Last-Event-ID (or
// ?after=), then sends live ones, a comment every 15s to keep proxies
// open. A subscriber whose buffer (256 events) fills is dropped by the
// ring: the stream then sends "event: dropped" and ends, and the client
// reconnects with Last-Event-ID. Close ends every open stream.
package admin

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"go.uber.org/zap"

	adminsvc "github.com/synclane/synclane/engine/admin"
	"github.com/synclane/synclane/engine/timeseries"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/transport/auth"
)

// MinTokenBytes is the shortest admin token accepted.
const MinTokenBytes = 16

// Options configure a Handler.
type Options struct {
	// Token is the bearer token every API request must carry (required,
	// at least MinTokenBytes).
	Token string
	// Logger receives request logs (default: no-op).
	Logger *zap.Logger
	// ReadTimeout bounds one read request (default 10s).
	ReadTimeout time.Duration
	// ActionTimeout bounds one mutating request (default 5m).
	ActionTimeout time.Duration
	// Heartbeat is the event stream's keep-alive period (default 15s).
	Heartbeat time.Duration
	// Cluster, when set (cluster mode), answers GET /api/cluster: the
	// members and their counters, and with ?partition=P the partition's
	// owner (an "owner" field holding its advertise URL), as a
	// *ClusterView (BuildClusterView makes one; the console's cluster
	// page reads that shape). Without it the route answers 404
	// (single-process mode). GET /api/cluster/partitions needs no option:
	// it is served whenever the engine runs in cluster mode.
	Cluster func(ctx context.Context, partition string) (any, error)
	// ClusterEvents, when set (cluster mode), answers GET
	// /api/cluster/events?limit=N: the most recent server events of every
	// member, merged newest first, each with the member it came from.
	ClusterEvents func(ctx context.Context, limit int) (any, error)
	// TokenAttempts limits admin token guesses per source address
	// (default: 2 per second, burst 10, 1024 sources; see TokenAttempts).
	TokenAttempts TokenAttempts
	// Now is the limiter's clock (default time.Now).
	Now func() time.Time
	// Series, when set, answers GET /api/timeseries: the sync requests of
	// the last hour per second (timeseries.go). Without it the route
	// answers 404.
	Series *timeseries.Series
	// MovePartition, when set (partitions spread over several PostgreSQL
	// databases), answers POST /api/partitions/{p}/move?to=NAME: it moves
	// the partition to the named database online and returns what it did.
	// Without it the route answers 404.
	MovePartition func(ctx context.Context, partition, to string) (any, error)
	// Rebalance, when set, answers POST
	// /api/partitions/rebalance?max=N&dryRun=true: it moves partitions
	// (at most max, 0: no bound) to even the databases out, or with
	// dryRun only lists the moves.
	Rebalance func(ctx context.Context, limit int, dryRun bool) (any, error)
}

// Handler serves the admin API and console. Create it with New; call
// Close before shutting its server down so open event streams end.
type Handler struct {
	svc   *adminsvc.Service
	opts  Options
	token [32]byte
	mux   *http.ServeMux
	limit *limiter // nil: token attempts not limited
	done  chan struct{}
	once  sync.Once
}

// ErrWeakToken is returned by New for a missing or short token.
var ErrWeakToken = errors.New("admin: an admin token of at least 16 bytes is required")

// New returns the admin handler over svc. It refuses to exist without a
// token (fail closed).
func New(svc *adminsvc.Service, opts Options) (*Handler, error) {
	if len(opts.Token) < MinTokenBytes {
		return nil, ErrWeakToken
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	if opts.ReadTimeout <= 0 {
		opts.ReadTimeout = 10 * time.Second
	}
	if opts.ActionTimeout <= 0 {
		opts.ActionTimeout = 5 * time.Minute
	}
	if opts.Heartbeat <= 0 {
		opts.Heartbeat = 15 * time.Second
	}
	h := &Handler{svc: svc, opts: opts, token: sha256.Sum256([]byte(opts.Token)), mux: http.NewServeMux(),
		limit: newLimiter(opts.TokenAttempts, opts.Now), done: make(chan struct{})}
	h.routes()
	return h, nil
}

// Close ends every open event stream; later streams end at once.
// Calling it again does nothing.
func (h *Handler) Close() { h.once.Do(func() { close(h.done) }) }

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

func (h *Handler) routes() {
	h.mux.Handle("/", consoleHandler())
	read := func(pattern string, fn func(ctx context.Context, r *http.Request) (any, error)) {
		h.mux.Handle(pattern, h.auth(h.serveJSON(h.opts.ReadTimeout, fn)))
	}
	act := func(pattern string, fn func(ctx context.Context, r *http.Request) (any, error)) {
		h.mux.Handle(pattern, h.auth(h.serveJSON(h.opts.ActionTimeout, fn)))
	}
	read("GET /api/overview", func(ctx context.Context, r *http.Request) (any, error) { return h.svc.Overview(ctx) })
	read("GET /api/partitions", func(ctx context.Context, r *http.Request) (any, error) {
		return h.svc.Partitions(ctx, r.URL.Query().Get("after"), intArg(r, "limit"))
	})
	read("GET /api/partitions/{p}", func(ctx context.Context, r *http.Request) (any, error) {
		return h.svc.Partition(ctx, r.PathValue("p"))
	})
	read("GET /api/partitions/{p}/clients", func(ctx context.Context, r *http.Request) (any, error) {
		return h.svc.Clients(ctx, r.PathValue("p"), r.URL.Query().Get("after"), intArg(r, "limit"))
	})
	read("GET /api/partitions/{p}/clients/{c}", func(ctx context.Context, r *http.Request) (any, error) {
		return h.svc.Client(ctx, r.PathValue("p"), r.PathValue("c"))
	})
	read("GET /api/partitions/{p}/commits", func(ctx context.Context, r *http.Request) (any, error) {
		q := r.URL.Query()
		return h.svc.Commits(ctx, r.PathValue("p"), q.Get("before"), intArg(r, "limit"), q.Get("client"))
	})
	read("GET /api/partitions/{p}/commits/{seq}", func(ctx context.Context, r *http.Request) (any, error) {
		seq, err := strconv.ParseInt(r.PathValue("seq"), 10, 64)
		if err != nil || seq < 1 {
			return nil, invalid("commit seq %q is not a positive integer", r.PathValue("seq"))
		}
		return h.svc.Commit(ctx, r.PathValue("p"), seq)
	})
	read("GET /api/partitions/{p}/rows/{table}/{id}", func(ctx context.Context, r *http.Request) (any, error) {
		return h.svc.Row(ctx, r.PathValue("p"), r.PathValue("table"), r.PathValue("id"), intArg(r, "limit"), intArg(r, "scan"))
	})
	read("GET /api/partitions/{p}/scopes", func(ctx context.Context, r *http.Request) (any, error) {
		return h.svc.Scopes(ctx, r.PathValue("p"), intArg(r, "window"))
	})
	read("GET /api/events", func(ctx context.Context, r *http.Request) (any, error) {
		after, _ := strconv.ParseUint(r.URL.Query().Get("after"), 10, 64)
		evs, st := h.svc.Events(after, intArg(r, "limit"))
		return map[string]any{"items": evs, "stats": st}, nil
	})
	h.mux.Handle("GET /api/events/stream", h.auth(http.HandlerFunc(h.stream)))
	h.seriesRoute(read)
	if h.opts.Cluster != nil {
		read("GET /api/cluster", func(ctx context.Context, r *http.Request) (any, error) {
			return h.opts.Cluster(ctx, r.URL.Query().Get("partition"))
		})
	}
	if h.svc.Engine().Clustered() {
		read("GET /api/cluster/partitions", func(ctx context.Context, r *http.Request) (any, error) { return h.svc.Ownership(ctx) })
	}
	if h.opts.ClusterEvents != nil {
		read("GET /api/cluster/events", func(ctx context.Context, r *http.Request) (any, error) {
			return h.opts.ClusterEvents(ctx, intArg(r, "limit"))
		})
	}
	read("GET /api/reactions", func(ctx context.Context, r *http.Request) (any, error) {
		q := r.URL.Query()
		return h.svc.Reactions(ctx, q.Get("partition"), q.Get("state"), q.Get("after"), intArg(r, "limit"))
	})
	act("POST /api/reactions/{id}/{action}", func(ctx context.Context, r *http.Request) (any, error) {
		if err := h.svc.ReactionAction(ctx, r.PathValue("id"), r.PathValue("action")); err != nil {
			return nil, err
		}
		return map[string]string{"reaction": r.PathValue("id"), "action": r.PathValue("action")}, nil
	})
	act("POST /api/partitions/{p}/clients/{c}/revoke-lease", func(ctx context.Context, r *http.Request) (any, error) {
		id, err := h.svc.RevokeLease(ctx, r.PathValue("p"), r.PathValue("c"))
		if err != nil {
			return nil, err
		}
		return map[string]string{"partition": r.PathValue("p"), "clientId": r.PathValue("c"), "leaseId": id}, nil
	})
	act("POST /api/partitions/{p}/rotate-epoch", func(ctx context.Context, r *http.Request) (any, error) {
		ep, err := h.svc.RotateEpoch(ctx, r.PathValue("p"))
		if err != nil {
			return nil, err
		}
		return map[string]string{"partition": r.PathValue("p"), "logEpoch": ep}, nil
	})
	if h.opts.MovePartition != nil {
		act("POST /api/partitions/{p}/move", func(ctx context.Context, r *http.Request) (any, error) {
			return h.opts.MovePartition(ctx, r.PathValue("p"), r.URL.Query().Get("to"))
		})
	}
	if h.opts.Rebalance != nil {
		act("POST /api/partitions/rebalance", func(ctx context.Context, r *http.Request) (any, error) {
			dry, _ := strconv.ParseBool(r.URL.Query().Get("dryRun"))
			return h.opts.Rebalance(ctx, intArg(r, "max"), dry)
		})
	}
	act("POST /api/maintenance", func(ctx context.Context, r *http.Request) (any, error) {
		dry, _ := strconv.ParseBool(r.URL.Query().Get("dryRun"))
		return h.svc.Maintenance(ctx, dry)
	})
	h.mux.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) {
		if !h.check(w, r) {
			return
		}
		writeJSONError(w, http.StatusNotFound, "admin.not_found", "no admin API route "+r.Method+" "+r.URL.Path)
	})
}

// intArg reads a non-negative integer query argument (0 when absent or
// malformed: the service applies its default).
func intArg(r *http.Request, name string) int {
	n, err := strconv.Atoi(r.URL.Query().Get(name))
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// authorized compares the bearer token in constant time (on digests, so
// the comparison does not depend on the length either).
func (h *Handler) authorized(r *http.Request) bool {
	a := r.Header.Get("Authorization")
	if len(a) < 7 || !equalFoldASCII(a[:7], "bearer ") {
		return false
	}
	got := sha256.Sum256([]byte(a[7:]))
	return subtle.ConstantTimeCompare(got[:], h.token[:]) == 1
}

func equalFoldASCII(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range len(a) {
		x, y := a[i], b[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

func (h *Handler) unauthorized(w http.ResponseWriter, r *http.Request) {
	msg := "missing admin token: send Authorization: Bearer <admin token>"
	if r.Header.Get("Authorization") != "" {
		msg = "wrong admin token"
	}
	auth.ReportAuthFailure(h.svc.Engine(), "admin", r, "admin.unauthorized", msg)
	w.Header().Set("WWW-Authenticate", `Bearer realm="synclane-admin"`)
	writeJSONError(w, http.StatusUnauthorized, "admin.unauthorized", msg)
}

func (h *Handler) auth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h.check(w, r) {
			next.ServeHTTP(w, r)
		}
	})
}

// check admits r (true) or answers it (false): 429 when its source has
// used up its token attempts (whatever the token: no oracle), 401 for a
// missing or wrong token. A request carrying a token takes an attempt,
// given back when the token is right.
func (h *Handler) check(w http.ResponseWriter, r *http.Request) bool {
	var b *bucket
	if h.limit != nil && r.Header.Get("Authorization") != "" {
		var wait time.Duration
		if b, wait = h.limit.take(auth.SourceOf(r)); b == nil {
			h.rateLimited(w, r, wait)
			return false
		}
	}
	if !h.authorized(r) {
		h.unauthorized(w, r)
		return false
	}
	if b != nil {
		h.limit.giveBack(b)
	}
	return true
}

// rateLimited answers a source out of token attempts: 429
// sync.rate_limited with Retry-After (whole seconds, at least 1).
func (h *Handler) rateLimited(w http.ResponseWriter, r *http.Request, wait time.Duration) {
	secs := max(1, int((wait+time.Second-1)/time.Second))
	msg := fmt.Sprintf("too many admin token attempts from this address: retry in %d s", secs)
	auth.ReportAuthFailure(h.svc.Engine(), "admin", r, string(syncerr.RateLimited), msg)
	w.Header().Set("Retry-After", strconv.Itoa(secs))
	writeJSONError(w, http.StatusTooManyRequests, string(syncerr.RateLimited), msg)
}

// serveJSON runs fn under timeout and writes its answer or error as JSON.
func (h *Handler) serveJSON(timeout time.Duration, fn func(ctx context.Context, r *http.Request) (any, error)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), timeout)
		defer cancel()
		v, err := fn(ctx, r)
		if err != nil {
			h.writeErr(w, r, err)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		if err := json.NewEncoder(w).Encode(v); err != nil {
			h.opts.Logger.Debug("admin: writing an answer failed", zap.String("path", r.URL.Path), zap.Error(err))
		}
	})
}

// argError is a malformed argument.
type argError struct{ msg string }

func (e *argError) Error() string { return e.msg }

func invalid(format string, args ...any) error {
	return &argError{msg: fmt.Sprintf(format, args...)}
}

// writeErr maps err to its status and code, in words.
func (h *Handler) writeErr(w http.ResponseWriter, r *http.Request, err error) {
	var ae *argError
	var se *syncerr.Error
	switch {
	case errors.As(err, &ae), errors.Is(err, adminsvc.ErrInvalid):
		writeJSONError(w, http.StatusBadRequest, "admin.invalid_argument", err.Error())
	case errors.Is(err, adminsvc.ErrFeatureOff):
		writeJSONError(w, http.StatusConflict, "admin.feature_off", err.Error())
	case errors.Is(err, adminsvc.ErrNotFound):
		writeJSONError(w, http.StatusNotFound, "admin.not_found", err.Error())
	case errors.As(err, &se) && se.Code != syncerr.InternalError:
		writeJSONError(w, se.Spec().HTTPStatus, string(se.Code), se.Message)
	case errors.Is(err, context.DeadlineExceeded):
		writeJSONError(w, http.StatusServiceUnavailable, "admin.unavailable", "the request took longer than its timeout: "+err.Error())
	default:
		h.opts.Logger.Warn("admin request failed", zap.String("path", r.URL.Path), zap.Error(err))
		writeJSONError(w, http.StatusServiceUnavailable, "admin.unavailable", err.Error())
	}
}

// ErrorBody is the JSON error answer.
type ErrorBody struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

func writeJSONError(w http.ResponseWriter, status int, code, msg string) {
	var b ErrorBody
	b.Error.Code, b.Error.Message = code, msg
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(b)
}
