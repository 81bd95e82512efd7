// Package syncerr holds the SSP2 error catalog (SPEC §10) and the typed error
// that carries a protocol code through synclane's layers.
//
// Every error that can reach a client is (or wraps) an *Error; its category,
// retryability, recommended action and HTTP status are fixed by its code and
// looked up from the catalog, never chosen at the call site.
package syncerr

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
)

// Code is a protocol error code such as "sync.invalid_request".
type Code string

// Protocol error codes emitted by synclane.
const (
	InvalidRequest       Code = "sync.invalid_request"
	InvalidClientID      Code = "sync.invalid_client_id"
	InvalidSubscription  Code = "sync.invalid_subscription"
	EmptyCommit          Code = "sync.empty_commit"
	UnknownTable         Code = "sync.unknown_table"
	RowMissing           Code = "sync.row_missing"
	RowDeleted           Code = "sync.row_deleted"
	ReferenceViolation   Code = "sync.reference_violation"
	VersionConflict      Code = "sync.version_conflict"
	ConstraintViolation  Code = "sync.constraint_violation"
	MissingScopes        Code = "sync.missing_scopes"
	IdempotencyCacheMiss Code = "sync.idempotency_cache_miss"
	TooManyOperations    Code = "sync.too_many_operations"
	NotFound             Code = "sync.not_found"
	SegmentExpired       Code = "sync.segment_expired"
	CursorExpired        Code = "sync.cursor_expired"
	ScopeRevoked         Code = "sync.scope_revoked"
	RateLimited          Code = "sync.rate_limited"
	SchemaMismatch       Code = "sync.schema_mismatch"
	ClientSchemaUnsupp   Code = "sync.client_schema_unsupported"
	// ClientWireUnsupported exists only where wire version 1 is in the
	// server's version window (SPEC 0.15.48 §1.5; wire version 3 dropped it).
	ClientWireUnsupported Code = "sync.client_wire_unsupported"
	AuthRequired          Code = "sync.auth_required"
	Forbidden             Code = "sync.forbidden"
	SchemaNotReady        Code = "sync.schema_not_ready"
	InternalError         Code = "sync.internal_error"
	CRDTMergeFailed       Code = "sync.crdt_merge_failed"
	WebsocketConnLimit    Code = "sync.websocket_connection_limit"
	BlobNotFound          Code = "blob.not_found"
	BlobForbidden         Code = "blob.forbidden"
	BlobHashMismatch      Code = "blob.hash_mismatch"
	BlobTooLarge          Code = "blob.too_large"

	// Auth leases (SPEC §7.3): request-level failures of a round served
	// during a resolver outage.
	AuthLeaseRequired Code = "sync.auth_lease_required"
	AuthLeaseRevoked  Code = "sync.auth_lease_revoked"
)

// Spec is the fixed catalog entry of a code.
type Spec struct {
	Category          string
	Retryable         bool
	RecommendedAction string
	HTTPStatus        int
}

var catalog = map[Code]Spec{
	InvalidRequest:        {"invalid-request", false, "fixRequest", http.StatusBadRequest},
	InvalidClientID:       {"invalid-request", false, "resetClientId", http.StatusBadRequest},
	InvalidSubscription:   {"invalid-request", false, "fixRequest", http.StatusBadRequest},
	EmptyCommit:           {"invalid-request", false, "fixRequest", http.StatusBadRequest},
	UnknownTable:          {"schema-mismatch", false, "regenerateClient", http.StatusBadRequest},
	RowMissing:            {"not-found", false, "forceResync", http.StatusNotFound},
	RowDeleted:            {"not-found", false, "fixRequest", http.StatusNotFound},
	ReferenceViolation:    {"invalid-request", false, "fixRequest", http.StatusBadRequest},
	VersionConflict:       {"conflict", false, "resolveConflict", http.StatusConflict},
	ConstraintViolation:   {"invalid-request", false, "fixRequest", http.StatusBadRequest},
	MissingScopes:         {"internal", false, "inspectServer", http.StatusInternalServerError},
	IdempotencyCacheMiss:  {"internal", true, "retryLater", http.StatusInternalServerError},
	TooManyOperations:     {"invalid-request", false, "splitBatch", http.StatusBadRequest},
	NotFound:              {"not-found", false, "forceResync", http.StatusNotFound},
	SegmentExpired:        {"not-found", true, "retryLater", http.StatusNotFound},
	CursorExpired:         {"reset-required", false, "rebootstrap", http.StatusConflict},
	ScopeRevoked:          {"scope-revoked", false, "checkPermissions", http.StatusForbidden},
	RateLimited:           {"rate-limited", true, "retryLater", http.StatusTooManyRequests},
	SchemaMismatch:        {"schema-mismatch", false, "regenerateClient", http.StatusBadRequest},
	ClientSchemaUnsupp:    {"schema-mismatch", false, "upgradeClient", http.StatusBadRequest},
	ClientWireUnsupported: {"schema-mismatch", false, "upgradeClient", http.StatusBadRequest},
	AuthRequired:          {"auth-required", true, "refreshAuth", http.StatusUnauthorized},
	Forbidden:             {"forbidden", false, "checkPermissions", http.StatusForbidden},
	SchemaNotReady:        {"internal", true, "retryLater", http.StatusServiceUnavailable},
	InternalError:         {"internal", true, "retryLater", http.StatusInternalServerError},
	CRDTMergeFailed:       {"internal", false, "inspectServer", http.StatusInternalServerError},
	WebsocketConnLimit:    {"rate-limited", true, "retryLater", http.StatusTooManyRequests},
	BlobNotFound:          {"not-found", false, "fixRequest", http.StatusNotFound},
	BlobForbidden:         {"forbidden", false, "checkPermissions", http.StatusForbidden},
	BlobHashMismatch:      {"invalid-request", false, "fixRequest", http.StatusBadRequest},
	BlobTooLarge:          {"invalid-request", false, "fixRequest", http.StatusRequestEntityTooLarge},
	AuthLeaseRequired:     {"auth-required", true, "refreshAuth", http.StatusUnauthorized},
	AuthLeaseRevoked:      {"auth-required", true, "refreshAuth", http.StatusUnauthorized},
}

// Lookup returns the catalog entry for code. Unknown codes (for example host
// validator codes) are reported as non-retryable invalid-request errors.
func Lookup(code Code) Spec {
	if s, ok := catalog[code]; ok {
		return s
	}
	return Spec{Category: "invalid-request", Retryable: false, RecommendedAction: "fixRequest", HTTPStatus: http.StatusBadRequest}
}

// Error is an error carrying a protocol code. Message is for humans and is
// never parsed by clients; Details, when non-nil, is a JSON object.
type Error struct {
	Code    Code
	Message string
	Details json.RawMessage
	Err     error // optional cause
}

// New returns an *Error with a formatted message.
func New(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Wrap returns an *Error with code and message whose cause is err.
func Wrap(code Code, err error, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...), Err: err}
}

// WithDetails returns a copy of e whose details are v marshalled as JSON.
func (e *Error) WithDetails(v any) *Error {
	c := *e
	b, err := json.Marshal(v)
	if err == nil {
		c.Details = b
	}
	return &c
}

// Error implements error.
func (e *Error) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%s: %s: %v", e.Code, e.Message, e.Err)
	}
	return fmt.Sprintf("%s: %s", e.Code, e.Message)
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// Spec returns the catalog entry of the error's code.
func (e *Error) Spec() Spec { return Lookup(e.Code) }

// CodeOf returns the protocol code carried by err, or InternalError when err
// carries none.
func CodeOf(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return InternalError
}

// As converts any error into an *Error: errors already carrying a code are
// returned as they are, anything else becomes sync.internal_error with a
// generic message (the cause is kept for logs, never sent).
func As(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return &Error{Code: InternalError, Message: "internal server error", Err: err}
}
