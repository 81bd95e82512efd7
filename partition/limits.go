package partition

import (
	"strconv"
	"strings"

	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/storage"
)

// Limits bound what one request may carry and what one reply may hold.
// Input beyond them can never succeed, so it gets a deterministic,
// non-retryable answer before anything is read or written, identical on
// every storage backend. The zero value of a field takes its default.
type Limits struct {
	// MaxSubscriptions caps subscriptions per request (default 256);
	// beyond it the request fails with sync.invalid_request.
	MaxSubscriptions int
	// MaxScopeValues caps the scope values of one subscription, summed
	// over its variables (default 10,000); beyond it the request fails with
	// sync.invalid_subscription.
	MaxScopeValues int
	// MaxResponseBytes is how many bytes of commits and bootstrap pages one
	// reply builds before it stops adding (default 8 MiB): the rest is left
	// for the client's next pull, as the pull limits allow (a section is
	// never split, and every reply makes progress on its first section).
	MaxResponseBytes int
}

// Defaults for Limits, and the fixed identifier limit.
const (
	DefaultMaxSubscriptions = 256
	DefaultMaxScopeValues   = 10_000
	DefaultMaxResponseBytes = 8 << 20
	// MaxIdentifierBytes bounds every identifier a request carries:
	// clientId, clientCommitId, rowId, subscription id, table names, scope
	// variable names and scope values (UTF-8 bytes). None may contain
	// U+0000, and none of clientId, clientCommitId, rowId, subscription id
	// may be empty.
	MaxIdentifierBytes = 512
	// MaxActorBytes bounds the authenticated actor id and partition name.
	MaxActorBytes = 512
)

// WithDefaults returns l with every unset field at its default.
func (l Limits) WithDefaults() Limits {
	if l.MaxSubscriptions <= 0 {
		l.MaxSubscriptions = DefaultMaxSubscriptions
	}
	if l.MaxScopeValues <= 0 {
		l.MaxScopeValues = DefaultMaxScopeValues
	}
	if l.MaxResponseBytes <= 0 {
		l.MaxResponseBytes = DefaultMaxResponseBytes
	}
	return l
}

// checkIdent validates one identifier; what names it in the error.
func checkIdent(what, v string, allowEmpty bool) *syncerr.Error {
	switch {
	case v == "" && !allowEmpty:
		return syncerr.New(syncerr.InvalidRequest, "%s is empty", what)
	case len(v) > MaxIdentifierBytes:
		return syncerr.New(syncerr.InvalidRequest, "%s is %d bytes; the limit is %d", what, len(v), MaxIdentifierBytes)
	case strings.IndexByte(v, 0) >= 0:
		return syncerr.New(syncerr.InvalidRequest, "%s contains U+0000, which synclane does not store", what)
	}
	return nil
}

// ValidateIdentity checks the authenticated actor id and partition name.
func ValidateIdentity(actorID, partition string) *syncerr.Error {
	for _, f := range []struct{ what, v string }{{"the actor id", actorID}, {"the partition name", partition}} {
		switch {
		case len(f.v) > MaxActorBytes:
			return syncerr.New(syncerr.InvalidRequest, "%s is %d bytes; the limit is %d", f.what, len(f.v), MaxActorBytes)
		case strings.IndexByte(f.v, 0) >= 0:
			return syncerr.New(syncerr.InvalidRequest, "%s contains U+0000", f.what)
		}
	}
	return nil
}

// ValidateRequest applies the identifier limits and the per-request caps
// to a decoded request. It is pure and cheap: the engine runs it before a
// request reaches its partition.
func ValidateRequest(req *ssp2.Request, lim Limits) *syncerr.Error {
	lim = lim.WithDefaults()
	if e := checkIdent("clientId", req.Header.ClientID, false); e != nil {
		return e
	}
	for i, c := range req.Commits {
		if e := checkIdent("commit "+itoa(i)+" clientCommitId", c.ClientCommitID, false); e != nil {
			return e
		}
		for j := range c.Operations {
			op := &c.Operations[j]
			if e := checkIdent("commit "+itoa(i)+" operation "+itoa(j)+" rowId", op.RowID, false); e != nil {
				return e
			}
			if e := checkIdent("commit "+itoa(i)+" operation "+itoa(j)+" table", op.Table, false); e != nil {
				return e
			}
		}
	}
	if n := len(req.Subscriptions); n > lim.MaxSubscriptions {
		return syncerr.New(syncerr.InvalidRequest, "request carries %d subscriptions; the limit is %d", n, lim.MaxSubscriptions)
	}
	for i, sub := range req.Subscriptions {
		if e := checkIdent("subscription "+itoa(i)+" id", sub.ID, false); e != nil {
			return e
		}
		if e := checkIdent("subscription "+storage.QuoteID(sub.ID)+" table", sub.Table, false); e != nil {
			return e
		}
		if e := ValidateScopeMap("subscription "+storage.QuoteID(sub.ID), sub.Scopes, lim); e != nil {
			return e
		}
	}
	return nil
}

// ValidateScopeMap checks a requested scope map named what (a
// subscription's, a segment download's): at most lim.MaxScopeValues
// values in all (sync.invalid_subscription beyond), and every variable and
// value a valid identifier (sync.invalid_request).
func ValidateScopeMap(what string, scopes map[string][]string, lim Limits) *syncerr.Error {
	lim = lim.WithDefaults()
	n := 0
	for k, vals := range scopes {
		if e := checkIdent(what+" scope variable", k, false); e != nil {
			return e
		}
		n += len(vals)
		if n > lim.MaxScopeValues {
			return syncerr.New(syncerr.InvalidSubscription, "%s requests more than %d scope values", what, lim.MaxScopeValues)
		}
		for _, v := range vals {
			if e := checkIdent(what+" scope value of "+storage.QuoteID(k), v, false); e != nil {
				return e
			}
		}
	}
	return nil
}

// checkRowStrings rejects string values containing U+0000 (PostgreSQL text
// cannot hold them, so no backend accepts them).
func checkRowStrings(cols []ssp2.Column, row ssp2.Row) *syncerr.Error {
	for i, c := range cols {
		if c.Type != ssp2.TypeString && c.Type != ssp2.TypeBlobRef {
			continue
		}
		if s, ok := row[i].(string); ok && strings.IndexByte(s, 0) >= 0 {
			return syncerr.New(syncerr.InvalidRequest, "column %q contains U+0000, which synclane does not store", c.Name)
		}
	}
	return nil
}

func itoa(i int) string { return strconv.Itoa(i) }

// ValidateClientID checks a clientId given outside an SSP2 request (the
// realtime connect's query parameter) against the identifier limits.
func ValidateClientID(clientID string) *syncerr.Error {
	return checkIdent("clientId", clientID, false)
}
