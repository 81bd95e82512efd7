package testcontrol

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/storage"
	"github.com/synclane/synclane/storage/segstore"
	"github.com/synclane/synclane/transport/auth"
	"github.com/synclane/synclane/transport/httperr"
)

// Limits of the control surface's inputs.
const (
	// MaxBodyBytes bounds a control request body.
	MaxBodyBytes = 1 << 20
	// rowsPage is the page size /_test/rows reads storage with.
	rowsPage = 1000
)

// UnsupportedCode is the code of the 501 answer of endpoints whose feature
// synclane does not have yet.
const UnsupportedCode = "test.unsupported"

// Controls are the hooks the control surface drives.
type Controls struct {
	// Engine is the engine under test (schema and storage reads).
	Engine *engine.Engine
	// Faults holds the idempotency fault the engine was built with
	// (Config.IdempotencyFault = Faults.Take; fail-next-idempotency-lookup);
	// nil answers that endpoint 501 test.unsupported.
	Faults *IdempotencyFault
	// Resolver holds the per-actor grants.
	Resolver *Resolver
	// Clock is the virtual clock; nil when the server runs on wall time
	// (then /_test/clock reads wall time and advancing it is refused).
	Clock *Clock
	// Signer issues signed segment URLs; nil when the server was started
	// without --signed-url-ttl (then /_test/signed-url-ttl is refused).
	Signer *segstore.Signer
	// Rules are the declarative validator rules (rules.go); nil answers
	// their endpoints 501 test.unsupported.
	Rules *Rules
}

// Handler returns the control surface: every route under /_test/.
func Handler(c Controls) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /_test/clock", c.clock)
	mux.HandleFunc("POST /_test/clock/advance", c.advance)
	mux.HandleFunc("PUT /_test/allowed-scopes/{actorId}", c.allowedScopes)
	mux.HandleFunc("POST /_test/resolver", c.resolver)
	mux.HandleFunc("GET /_test/max-commit-seq", c.maxCommitSeq)
	mux.HandleFunc("GET /_test/horizon-seq", c.horizonSeq)
	mux.HandleFunc("GET /_test/rows/{table}", c.rows)
	mux.HandleFunc("POST /_test/signed-url-ttl", c.signedURLTTL)
	mux.HandleFunc("POST /_test/fail-next-idempotency-lookup", func(w http.ResponseWriter, _ *http.Request) {
		if c.Faults == nil {
			unsupported(w, "idempotency faults")
			return
		}
		c.Faults.Arm()
		writeJSON(w, struct{}{})
	})
	mux.HandleFunc("POST /_test/blob-presign", c.blobPresign) // blobs.go
	mux.HandleFunc("POST /_test/prune", c.prune)
	mux.HandleFunc("POST /_test/backup/capture", c.capture)
	mux.HandleFunc("POST /_test/backup/restore", c.restore)
	mux.HandleFunc("POST /_test/leases/{leaseId}/revoke", c.revokeLease) // lease.go
	if c.Rules != nil {
		mux.HandleFunc("PUT /_test/validators", c.putValidators)
		mux.HandleFunc("PUT /_test/commit-validator", c.putCommitValidator)
	} else {
		mux.HandleFunc("PUT /_test/validators", func(w http.ResponseWriter, _ *http.Request) { unsupported(w, "host validators") })
		mux.HandleFunc("PUT /_test/commit-validator", func(w http.ResponseWriter, _ *http.Request) { unsupported(w, "host commit validators") })
	}
	mux.HandleFunc("/_test/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, syncerr.New(syncerr.NotFound, "no test-control endpoint %s %s", r.Method, r.URL.Path))
	})
	return mux
}

func (c Controls) now() time.Time {
	if c.Clock == nil {
		return time.Now()
	}
	return c.Clock.Now()
}

// signedURLTTL sets the lifetime of signed segment URLs issued from now on
// (0: born expired).
func (c Controls) signedURLTTL(w http.ResponseWriter, r *http.Request) {
	if c.Signer == nil {
		writeError(w, http.StatusConflict, syncerr.New(syncerr.InvalidRequest, "signed segment URLs are off; start the server with --signed-url-ttl"))
		return
	}
	var body struct {
		TTLSeconds *int64 `json:"ttlSeconds"`
	}
	if !readJSON(w, r, &body) {
		return
	}
	if body.TTLSeconds == nil || *body.TTLSeconds < 0 || *body.TTLSeconds > int64(segstore.MaxSignedURLTTL/time.Second) {
		writeError(w, http.StatusBadRequest, syncerr.New(syncerr.InvalidRequest, `body must be {"ttlSeconds": n} with 0 <= n <= 900`))
		return
	}
	c.Signer.SetTTL(time.Duration(*body.TTLSeconds) * time.Second)
	writeJSON(w, struct{}{})
}

func (c Controls) clock(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, map[string]int64{"nowMs": c.now().UnixMilli()})
}

func (c Controls) advance(w http.ResponseWriter, r *http.Request) {
	if c.Clock == nil {
		writeError(w, http.StatusConflict, syncerr.New(syncerr.InvalidRequest, "the server runs on wall time; start it with --clock-ms to use a virtual clock"))
		return
	}
	var body struct {
		Ms *int64 `json:"ms"`
	}
	if !readJSON(w, r, &body) {
		return
	}
	if body.Ms == nil || *body.Ms < 0 {
		writeError(w, http.StatusBadRequest, syncerr.New(syncerr.InvalidRequest, `body must be {"ms": n} with n >= 0`))
		return
	}
	writeJSON(w, map[string]int64{"nowMs": c.Clock.Advance(time.Duration(*body.Ms) * time.Millisecond).UnixMilli()})
}

func (c Controls) allowedScopes(w http.ResponseWriter, r *http.Request) {
	actor := r.PathValue("actorId")
	var grants map[string][]string
	if !readJSON(w, r, &grants) {
		return
	}
	if grants == nil {
		writeError(w, http.StatusBadRequest, syncerr.New(syncerr.InvalidRequest, `body must be an object {"variable": ["value", ...]}`))
		return
	}
	s := c.Engine.Schema()
	for k, vals := range grants {
		if !s.DeclaresVar(k) {
			writeError(w, http.StatusBadRequest, syncerr.New(syncerr.InvalidRequest, "scope variable %q is not declared by the schema", k))
			return
		}
		for _, v := range vals {
			if v == "" {
				writeError(w, http.StatusBadRequest, syncerr.New(syncerr.InvalidRequest, "scope variable %q: values must be non-empty strings", k))
				return
			}
		}
	}
	c.Resolver.Set(actor, grants)
	writeJSON(w, struct{}{})
}

func (c Controls) resolver(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Failing *bool `json:"failing"`
		Outage  *bool `json:"outage"`
	}
	if !readJSON(w, r, &body) {
		return
	}
	if body.Failing == nil && body.Outage == nil {
		writeError(w, http.StatusBadRequest, syncerr.New(syncerr.InvalidRequest, `body must set "failing" (bool) and/or "outage" (bool)`))
		return
	}
	if body.Failing != nil {
		c.Resolver.SetFailing(*body.Failing)
	}
	if body.Outage != nil {
		c.Resolver.SetOutage(*body.Outage)
	}
	writeJSON(w, struct{}{})
}

func (c Controls) partitionInfo(w http.ResponseWriter, r *http.Request) (storage.PartitionInfo, bool) {
	info, err := c.Engine.Backend().Log.ReadPartition(r.Context(), partitionOf(r))
	if err != nil {
		writeError(w, 0, syncerr.Wrap(syncerr.InternalError, err, "read the partition: %v", err))
		return info, false
	}
	return info, true
}

func (c Controls) maxCommitSeq(w http.ResponseWriter, r *http.Request) {
	if info, ok := c.partitionInfo(w, r); ok {
		writeJSON(w, map[string]int64{"maxCommitSeq": info.MaxCommitSeq})
	}
}

func (c Controls) horizonSeq(w http.ResponseWriter, r *http.Request) {
	if info, ok := c.partitionInfo(w, r); ok {
		writeJSON(w, map[string]int64{"horizonSeq": info.HorizonSeq})
	}
}

// prune runs one pruning of the request's partition with the server's
// retention policy, each limit the body gives overriding it (no floors:
// this is a test control), ages read from the engine's clock.
func (c Controls) prune(w http.ResponseWriter, r *http.Request) {
	var body struct {
		ActiveWindowMs     *int64 `json:"activeWindowMs"`
		AgeForceMs         *int64 `json:"ageForceMs"`
		MinRetainedCommits *int64 `json:"minRetainedCommits"`
	}
	if !readJSON(w, r, &body) {
		return
	}
	p := c.Engine.Retention().Policy()
	for _, o := range []struct {
		v   *int64
		dst *int64
	}{{body.ActiveWindowMs, &p.ActiveWindowMs}, {body.AgeForceMs, &p.AgeForceMs}, {body.MinRetainedCommits, &p.MinRetainedCommits}} {
		if o.v != nil {
			*o.dst = *o.v
		}
	}
	if err := p.Validate(); err != nil {
		writeError(w, http.StatusBadRequest, syncerr.New(syncerr.InvalidRequest, "%v", err))
		return
	}
	rep, err := c.Engine.Retention().Prune(r.Context(), partitionOf(r), p, false)
	if err != nil {
		writeError(w, 0, syncerr.Wrap(syncerr.InternalError, err, "prune: %v", err))
		return
	}
	writeJSON(w, map[string]int64{"horizonSeq": rep.HorizonAfter})
}

// capture snapshots the request's partition.
func (c Controls) capture(w http.ResponseWriter, r *http.Request) {
	if err := c.Engine.Retention().Capture(r.Context(), partitionOf(r)); err != nil {
		writeError(w, 0, syncerr.Wrap(syncerr.InternalError, err, "capture: %v", err))
		return
	}
	writeJSON(w, struct{}{})
}

// restore brings the request's partition back to its capture and rotates
// its log epoch; 409 without a capture.
func (c Controls) restore(w http.ResponseWriter, r *http.Request) {
	if _, err := c.Engine.Retention().Restore(r.Context(), partitionOf(r)); err != nil {
		if errors.Is(err, storage.ErrNoSnapshot) {
			writeError(w, http.StatusConflict, syncerr.New(syncerr.InvalidRequest, "no captured backup of this partition: POST /_test/backup/capture first"))
			return
		}
		writeError(w, 0, syncerr.Wrap(syncerr.InternalError, err, "restore: %v", err))
		return
	}
	writeJSON(w, struct{}{})
}

// Row is one row as /_test/rows renders it.
type Row struct {
	RowID   string            `json:"rowId"`
	Version int64             `json:"version"`
	Values  map[string]any    `json:"values"`
	Scopes  map[string]string `json:"scopes"`
}

func (c Controls) rows(w http.ResponseWriter, r *http.Request) {
	t := c.Engine.Schema().Table(r.PathValue("table"))
	if t == nil {
		writeError(w, 0, syncerr.New(syncerr.UnknownTable, "unknown table %s", syncerr.Quote(r.PathValue("table"))))
		return
	}
	out := []Row{}
	var after *string
	for {
		page, err := c.Engine.Backend().Rows.ScanRows(r.Context(), partitionOf(r), storage.RowQuery{Table: t, Scopes: map[string][]string{}, AfterRowID: after, Limit: rowsPage})
		if err != nil {
			writeError(w, 0, syncerr.Wrap(syncerr.InternalError, err, "scan rows: %v", err))
			return
		}
		for _, rec := range page {
			out = append(out, renderRow(t, rec))
		}
		if len(page) < rowsPage {
			break
		}
		last := page[len(page)-1].RowID
		after = &last
	}
	writeJSON(w, out)
}

// renderRow renders a stored row: bytes and crdt values as
// {"$bytes":"<lowercase hex>"}, json values as their raw text (a string),
// every other value as its JSON form; scopes as variable → stored value.
func renderRow(t *schema.Table, rec storage.RowRecord) Row {
	row := Row{RowID: rec.RowID, Version: rec.Version, Values: make(map[string]any, len(t.Columns)), Scopes: map[string]string{}}
	for i, col := range t.Columns {
		var v any
		if i < len(rec.Values) {
			v = rec.Values[i]
		}
		switch x := v.(type) {
		case []byte:
			v = map[string]string{"$bytes": hex.EncodeToString(x)}
		case json.RawMessage:
			v = string(x)
		}
		row.Values[col.Name] = v
	}
	if scopes, err := engine.ExtractScopes(t, ssp2.Row(rec.Values)); err == nil {
		row.Scopes = scopes
	}
	return row
}

func partitionOf(r *http.Request) string {
	if p := strings.TrimSpace(r.Header.Get("x-partition")); p != "" {
		return p
	}
	return auth.DefaultPartition
}

// readJSON decodes a bounded JSON body into v, answering 400 on bad input.
func readJSON(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(io.LimitReader(r.Body, MaxBodyBytes+1))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil && dec.More() {
		err = errors.New("trailing data after the JSON value")
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, syncerr.New(syncerr.InvalidRequest, "bad JSON body: %v", err))
		return false
	}
	return true
}

func writeJSON(w http.ResponseWriter, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		writeError(w, 0, syncerr.Wrap(syncerr.InternalError, err, "encode the answer"))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(append(b, '\n'))
}

func writeError(w http.ResponseWriter, status int, e *syncerr.Error) {
	if status == 0 {
		httperr.Write(w, e)
		return
	}
	httperr.WriteStatus(w, status, e)
}

func unsupported(w http.ResponseWriter, feature string) {
	b, _ := json.Marshal(map[string]string{"code": UnsupportedCode, "message": fmt.Sprintf("synclane does not implement %s yet", feature)})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusNotImplemented)
	_, _ = w.Write(append(b, '\n'))
}
