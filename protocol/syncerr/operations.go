package syncerr

import "net/http"

// Remote operation error codes (REMOTE.md §7). None is retryable; a
// storage outage during an operation is sync.internal_error instead.
const (
	// OperationUnknown: the operation ID is not registered, or is
	// registered with the other kind.
	OperationUnknown Code = "operation.unknown"
	// OperationForbidden: scope coverage or the authorize callback denied
	// the caller, or the callback failed (fail closed).
	OperationForbidden Code = "operation.forbidden"
	// OperationInvalidRequest: the message, its params, or a command's
	// mutations are invalid.
	OperationInvalidRequest Code = "operation.invalid_request"
	// OperationResultTooLarge: a query matched more than its maxRows.
	OperationResultTooLarge Code = "operation.result_too_large"
	// OperationStorageUnsupported: the storage backend cannot run
	// registered queries (the in-memory store).
	OperationStorageUnsupported Code = "operation.storage_unsupported"
	// OperationQueryFailed: the registered SQL failed, or a result value
	// does not fit its declared column.
	OperationQueryFailed Code = "operation.query_failed"
	// OperationExecutionFailed: registered Go code (a command, a params
	// binder) failed unexpectedly.
	OperationExecutionFailed Code = "operation.execution_failed"
)

func init() {
	for c, s := range map[Code]Spec{
		OperationUnknown:            {"not-found", false, "fixRequest", http.StatusNotFound},
		OperationForbidden:          {"forbidden", false, "checkPermissions", http.StatusForbidden},
		OperationInvalidRequest:     {"invalid-request", false, "fixRequest", http.StatusBadRequest},
		OperationResultTooLarge:     {"invalid-request", false, "fixRequest", http.StatusUnprocessableEntity},
		OperationStorageUnsupported: {"internal", false, "inspectServer", http.StatusNotImplemented},
		OperationQueryFailed:        {"internal", false, "inspectServer", http.StatusInternalServerError},
		OperationExecutionFailed:    {"internal", false, "inspectServer", http.StatusInternalServerError},
	} {
		catalog[c] = s
	}
}
