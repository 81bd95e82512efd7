package opwire

import (
	"fmt"
	"math"

	"github.com/synclane/synclane/protocol/syncerr"
)

// Revision is the protocol revision this package speaks.
const Revision = 1

// Request kinds.
const (
	KindQuery   = "query"
	KindCommand = "command"
	KindError   = "error"
)

// Command statuses.
const (
	StatusApplied  = "applied"
	StatusCached   = "cached"
	StatusRejected = "rejected"
)

// MaxSafeInteger is the largest integer a "number" carries exactly
// (2^53-1); maxCommitSeq and commitSeq are sent as numbers.
const MaxSafeInteger = 1<<53 - 1

// Request is a decoded operation request. RequestID is set (non-empty)
// for commands and empty for queries; Params is any decoded value.
type Request struct {
	Kind        string
	ClientID    string
	OperationID string
	RequestID   string
	Params      any
}

// DecodeRequest decodes and validates one request message: an object with
// revision 1, kind "query" or "command", string clientId and operationId,
// a non-empty string requestId for commands (absent for queries), and
// params (any value; absent means null). Unknown keys are refused.
// Identifier lengths are the caller's to check.
func DecodeRequest(data []byte) (*Request, error) {
	v, err := Decode(data)
	if err != nil {
		return nil, err
	}
	o, ok := v.(Object)
	if !ok {
		return nil, invalid("the request is not an object value")
	}
	if err := checkRevision(o); err != nil {
		return nil, err
	}
	r := &Request{}
	if r.Kind, err = stringField(o, "kind"); err != nil {
		return nil, err
	}
	allowed := map[string]bool{"revision": true, "kind": true, "clientId": true, "operationId": true, "params": true}
	switch r.Kind {
	case KindQuery:
	case KindCommand:
		allowed["requestId"] = true
		if r.RequestID, err = stringField(o, "requestId"); err != nil {
			return nil, err
		}
		if r.RequestID == "" {
			return nil, invalid("a command's requestId must not be empty")
		}
	default:
		return nil, invalid("kind %q is neither %q nor %q", r.Kind, KindQuery, KindCommand)
	}
	for _, f := range o {
		if !allowed[f.Key] {
			return nil, invalid("a %s request has no field %q", r.Kind, f.Key)
		}
	}
	if r.ClientID, err = stringField(o, "clientId"); err != nil {
		return nil, err
	}
	if r.OperationID, err = stringField(o, "operationId"); err != nil {
		return nil, err
	}
	r.Params, _ = o.Get("params")
	return r, nil
}

func checkRevision(o Object) error {
	rv, ok := o.Get("revision")
	switch x := rv.(type) {
	case float64:
		ok = ok && x == Revision
	case int64:
		ok = ok && x == Revision
	default:
		ok = false
	}
	if !ok {
		return invalid("revision must be %d", Revision)
	}
	return nil
}

func stringField(o Object, key string) (string, error) {
	v, ok := o.Get(key)
	if !ok {
		return "", invalid("the message has no %q", key)
	}
	s, ok := v.(string)
	if !ok {
		return "", invalid("%q is not a string", key)
	}
	return s, nil
}

// QueryResult is a successful query response: rows (each an Object of
// the query's result columns in declared order) and the partition's
// maxCommitSeq read in the same snapshot.
type QueryResult struct {
	OperationID  string
	Rows         []Object
	MaxCommitSeq int64
}

// Encode encodes the response.
func (r *QueryResult) Encode() ([]byte, error) {
	if r.MaxCommitSeq < 0 || r.MaxCommitSeq > MaxSafeInteger {
		return nil, fmt.Errorf("opwire: maxCommitSeq %d is not a safe non-negative integer", r.MaxCommitSeq)
	}
	rows := make([]any, len(r.Rows))
	for i, row := range r.Rows {
		rows[i] = row
	}
	return Encode(Object{
		{"revision", float64(Revision)}, {"kind", KindQuery}, {"operationId", r.OperationID},
		{"rows", rows}, {"maxCommitSeq", float64(r.MaxCommitSeq)},
	})
}

// CommandResult is a command response: applied (with its commitSeq),
// cached (a replay of an applied command, same commitSeq) or rejected
// (no commitSeq). Results holds one entry per result record.
type CommandResult struct {
	OperationID string
	RequestID   string
	Status      string
	CommitSeq   int64 // > 0 when applied or cached
	Results     []any
}

// Encode encodes the response.
func (r *CommandResult) Encode() ([]byte, error) {
	o := Object{{"revision", float64(Revision)}, {"kind", KindCommand}, {"operationId", r.OperationID},
		{"requestId", r.RequestID}, {"status", r.Status}}
	if r.CommitSeq > 0 {
		if r.CommitSeq > MaxSafeInteger {
			return nil, fmt.Errorf("opwire: commitSeq %d is not a safe integer", r.CommitSeq)
		}
		o = append(o, Field{"commitSeq", float64(r.CommitSeq)})
	}
	results := r.Results
	if results == nil {
		results = []any{}
	}
	return Encode(append(o, Field{"results", results}))
}

// EncodeError encodes an operation-level failure: its code, message and
// whether retrying may help (from the error catalog).
func EncodeError(e *syncerr.Error) []byte { return EncodeWatchError("", e) }

// EncodeWatchError is EncodeError for a watch socket: watchId names the
// watch the error ends ("" for an error about the socket or a message
// that named none).
func EncodeWatchError(watchID string, e *syncerr.Error) []byte {
	o := Object{{"revision", float64(Revision)}, {"kind", KindError}}
	if watchID != "" {
		o = append(o, Field{"watchId", watchID})
	}
	b, err := Encode(append(o, Field{"code", string(e.Code)}, Field{"message", e.Message}, Field{"retryable", e.Spec().Retryable}))
	if err != nil { // unreachable: every field is a string or bool
		panic(err)
	}
	return b
}

// SafeNumber returns v (a decoded number or integer) as an int64 when it
// is an integer within ±MaxSafeInteger.
func SafeNumber(v any) (int64, bool) {
	switch x := v.(type) {
	case int64:
		return x, x >= -MaxSafeInteger && x <= MaxSafeInteger
	case float64:
		if x != math.Trunc(x) || math.Abs(x) > MaxSafeInteger {
			return 0, false
		}
		return int64(x), true
	}
	return 0, false
}
