package ssp2

import (
	"errors"
	"fmt"

	"github.com/synclane/synclane/protocol/syncerr"
)

// DecodeError describes why and where a decode failed. Offset is the byte
// offset into the decoded input (message, segment or row) at which the
// problem was detected. Every decode failure of this package is a
// *syncerr.Error whose cause (errors.As) is a *DecodeError.
type DecodeError struct {
	Offset int
	Reason string
}

// Error implements error.
func (e *DecodeError) Error() string { return fmt.Sprintf("offset %d: %s", e.Offset, e.Reason) }

// ErrTooLarge is the cause of the error ReadRequest returns when the body
// exceeds its size limit; test for it with errors.Is.
var ErrTooLarge = errors.New("ssp2: request body exceeds the size limit")

// decodeFail builds the canonical decode error: sync.invalid_request wrapping
// a *DecodeError.
func decodeFail(off int, reason string) error {
	return &syncerr.Error{Code: syncerr.InvalidRequest, Message: "malformed SSP2 input", Err: &DecodeError{Offset: off, Reason: reason}}
}

// decodeFailCode is decodeFail with another protocol code (sync.empty_commit).
func decodeFailCode(code syncerr.Code, off int, reason string) error {
	return &syncerr.Error{Code: code, Message: "malformed SSP2 input", Err: &DecodeError{Offset: off, Reason: reason}}
}

// EncodeError reports a value that cannot be encoded canonically (it would
// not decode, e.g. an i64 out of the safe range or a broken opt tie).
type EncodeError struct {
	Reason string
}

// Error implements error.
func (e *EncodeError) Error() string { return "ssp2: cannot encode: " + e.Reason }

func encFail(format string, args ...any) error {
	return &EncodeError{Reason: fmt.Sprintf(format, args...)}
}
