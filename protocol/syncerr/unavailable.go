package syncerr

import (
	"errors"
	"fmt"
)

// ErrUnavailable marks an error as a temporary unavailability of the
// partition (a cluster member cannot serve it right now: its partition is
// moving between members, or the member has lost its membership) or of
// what a request needs (the identity provider's JWKS cannot be fetched),
// as opposed to a failure: transports answer it with HTTP 503 and Retry-After
// instead of the code's own status. Its code stays sync.internal_error
// (retryable, retryLater), the catalog's code for a server-side
// condition a client waits out; Details say why ({"reason": …}).
var ErrUnavailable = errors.New("the partition is temporarily unavailable")

// UnavailableRetryAfterSeconds is the Retry-After an unavailable answer
// carries.
const UnavailableRetryAfterSeconds = 1

// Unavailable returns a sync.internal_error that wraps ErrUnavailable and
// cause, with a formatted message and {"reason": reason} as its details.
func Unavailable(reason string, cause error, format string, args ...any) *Error {
	e := &Error{Code: InternalError, Message: fmt.Sprintf(format, args...), Err: errors.Join(ErrUnavailable, cause)}
	return e.WithDetails(map[string]any{"reason": reason, "retryAfterMs": UnavailableRetryAfterSeconds * 1000})
}
