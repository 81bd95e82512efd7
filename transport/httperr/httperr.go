// Package httperr writes the protocol's JSON error body (SPEC §10.1): the
// answer every synclane HTTP route (POST /sync, segments, blobs, the
// WebSocket upgrades, test control) gives to an error found before its
// response starts, and that a host's own routes can give the same way.
//
// An error without a protocol code is written as sync.internal_error
// (syncerr.As). The message is cut to syncerr.MaxMessageBytes
// (syncerr.TrimMessage): an error body never echoes unbounded input. The status is the catalog's for the code unless the
// caller names one. The code is also handed to the metrics recorder that
// serves the request, if any (see CodeNoter).
package httperr

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"

	"github.com/synclane/synclane/protocol/syncerr"
)

// Body is the protocol's JSON error shape (SPEC §10.1).
type Body struct {
	Code              string          `json:"code"`
	Category          string          `json:"category"`
	Retryable         bool            `json:"retryable"`
	RecommendedAction string          `json:"recommendedAction"`
	Message           string          `json:"message"`
	Details           json.RawMessage `json:"details,omitempty"`
}

// Write writes err as the protocol's JSON error body with the catalog
// status of its code; an error wrapping syncerr.ErrUnavailable (a
// partition moving between cluster members) is answered 503 with
// Retry-After instead.
func Write(w http.ResponseWriter, err error) { WriteStatus(w, 0, err) }

// WriteStatus is Write with an explicit HTTP status (0 takes the
// catalog's status for the code).
func WriteStatus(w http.ResponseWriter, status int, err error) {
	e := syncerr.As(err)
	spec := e.Spec()
	if status == 0 {
		status = spec.HTTPStatus
		if errors.Is(e, syncerr.ErrUnavailable) {
			// A partition moving between cluster members: wait and retry.
			status = http.StatusServiceUnavailable
			w.Header().Set("Retry-After", strconv.Itoa(syncerr.UnavailableRetryAfterSeconds))
		}
	}
	b, _ := json.Marshal(Body{Code: string(e.Code), Category: spec.Category, Retryable: spec.Retryable,
		RecommendedAction: spec.RecommendedAction, Message: syncerr.TrimMessage(e.Message), Details: e.Details})
	NoteCode(w, string(e.Code))
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// CodeNoter is implemented by a ResponseWriter wrapper that records the
// protocol error code a request was answered with (httpsync's metrics
// recorder, which labels synclane_http_requests_total by it).
type CodeNoter interface {
	NoteCode(code string)
}

// maxUnwrap bounds the ResponseWriter wrappers NoteCode looks through.
const maxUnwrap = 16

// NoteCode tells the CodeNoter under w (found through at most 16 Unwrap
// calls) that the answer carries code; nothing when there is none.
func NoteCode(w http.ResponseWriter, code string) {
	for range maxUnwrap {
		switch v := w.(type) {
		case CodeNoter:
			v.NoteCode(code)
			return
		case interface{ Unwrap() http.ResponseWriter }:
			w = v.Unwrap()
		default:
			return
		}
	}
}
