package ssp2

import (
	"encoding/json"
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
	return decodeFailCode(syncerr.InvalidRequest, off, reason)
}

// decodeFailCode is decodeFail with another protocol code (sync.empty_commit).
// The error says where and why to the client too: its message is
// "malformed SSP2 input at offset N: reason" and its details
// {"offset":N,"reason":"..."} (the JSON error body of POST /sync, a socket
// round's ERROR frame).
func decodeFailCode(code syncerr.Code, off int, reason string) error {
	details, _ := json.Marshal(decodeDetails{Offset: off, Reason: reason})
	return &syncerr.Error{Code: code, Message: fmt.Sprintf("malformed SSP2 input at offset %d: %s", off, reason), Details: details,
		Err: &DecodeError{Offset: off, Reason: reason}}
}

// decodeDetails are a decode error's details.
type decodeDetails struct {
	Offset int    `json:"offset"`
	Reason string `json:"reason"`
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
