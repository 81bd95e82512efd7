package syncerr

import "net/http"

// Host-facing storage error codes (SPEC §6.7-6.8): errors a host hook or
// command receives from the storage, never sent to a client as such (a
// hook that returns one rejects its commit with sync.constraint_violation,
// SPEC §6.7's fixed message).
const (
	// TransactionQueryUnsupported: the storage backend cannot run a
	// registered query inside the push transaction (its PushTx.Query
	// answers storage.ErrTxQueryUnsupported: a backend without SQL).
	TransactionQueryUnsupported Code = "sync.storage.transaction_query_unsupported"
)

// MsgTransactionQueryUnsupported is the fixed message of
// TransactionQueryUnsupported.
const MsgTransactionQueryUnsupported = "the storage backend cannot run a registered query inside the push transaction"

func init() {
	catalog[TransactionQueryUnsupported] = Spec{"internal", false, "inspectServer", http.StatusNotImplemented}
}
