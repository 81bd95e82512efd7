package natssync

import (
	"encoding/json"
	"errors"
	"strconv"

	"github.com/nats-io/nats.go"

	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/transport/httperr"
)

// Headers of requests and reply messages. NATS headers are case-sensitive:
// these exact spellings are the ones read and written.
const (
	// HeaderActor and HeaderPartition carry the identity DevAuth trusts.
	HeaderActor     = "x-actor"
	HeaderPartition = "x-partition"
	// HeaderAuthorization carries "Bearer <token>" for HTTPAuth.
	HeaderAuthorization = "Authorization"
	// HeaderError marks a reply message as an error: its value is the
	// protocol code and its body the protocol's JSON error body (the
	// shape httperr.Body, as POST /sync answers before its response
	// starts). NATS has no status codes; this header stands in for them.
	HeaderError = "Synclane-Error"
	// HeaderRetryAfter, on an error reply, is how many seconds to wait
	// before retrying (a partition moving between cluster members), as
	// HTTP's Retry-After.
	HeaderRetryAfter = "Synclane-Retry-After"
	// HeaderSeq numbers the messages of one reply from 0: a reply is
	// streamed as one or more messages of at most the server's max
	// payload each.
	HeaderSeq = "Synclane-Seq"
	// HeaderEnd is set ("1") on the last message of a reply.
	HeaderEnd = "Synclane-End"
)

// errorMsg is the reply message for err: the protocol's JSON error body
// (code, category, retryable, recommendedAction, message, details: the
// fields and catalog values httperr writes over HTTP), marked with
// HeaderError and HeaderEnd. An error wrapping syncerr.ErrUnavailable
// carries HeaderRetryAfter too, where HTTP answers 503 with Retry-After.
func errorMsg(subject string, seq int, err error) *nats.Msg {
	e := syncerr.As(err)
	spec := e.Spec()
	b, _ := json.Marshal(httperr.Body{Code: string(e.Code), Category: spec.Category, Retryable: spec.Retryable,
		RecommendedAction: spec.RecommendedAction, Message: syncerr.TrimMessage(e.Message), Details: e.Details})
	m := nats.NewMsg(subject)
	m.Header.Set(HeaderError, string(e.Code))
	m.Header.Set(HeaderSeq, strconv.Itoa(seq))
	m.Header.Set(HeaderEnd, "1")
	if errors.Is(e, syncerr.ErrUnavailable) {
		m.Header.Set(HeaderRetryAfter, strconv.Itoa(syncerr.UnavailableRetryAfterSeconds))
	}
	m.Data = b
	return m
}

// ReplyError is an error reply decoded by Client: the protocol error
// (Code, Message, Details, as *syncerr.Error carries them) and the body's
// catalog fields as the server sent them.
type ReplyError struct {
	// Err is the protocol error: code, message and details.
	Err *syncerr.Error
	// Body is the JSON error body as received.
	Body httperr.Body
	// RetryAfterSeconds is HeaderRetryAfter's value (0 when absent).
	RetryAfterSeconds int
}

// Error implements error.
func (e *ReplyError) Error() string { return e.Err.Error() }

// Unwrap returns the *syncerr.Error, so syncerr.CodeOf and errors.As see
// the protocol code.
func (e *ReplyError) Unwrap() error { return e.Err }

// decodeError turns an error reply message into a *ReplyError; a body
// that is not the protocol's JSON still yields the header's code.
func decodeError(m *nats.Msg) *ReplyError {
	var body httperr.Body
	if err := json.Unmarshal(m.Data, &body); err != nil || body.Code == "" {
		body.Code = m.Header.Get(HeaderError)
		body.Message = "undecodable error body"
	}
	re := &ReplyError{Err: &syncerr.Error{Code: syncerr.Code(body.Code), Message: body.Message, Details: body.Details}, Body: body}
	re.RetryAfterSeconds, _ = strconv.Atoi(m.Header.Get(HeaderRetryAfter))
	return re
}
