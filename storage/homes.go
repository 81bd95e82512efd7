package storage

import "errors"

// ErrHomeUnavailable marks the failure of a call whose partition lives in
// a database that cannot be reached right now, when the backend spreads
// partitions over several databases (storage/postgres/homes): the
// partitions of the other databases keep serving. The engine answers it
// as a temporary unavailability (HTTP 503, retryable, retryLater).
var ErrHomeUnavailable = errors.New("storage: the database holding the partition is unreachable")

// ErrPartitionMoved marks a write refused by a database because the
// partition is moving out of it, moving in and not switched yet, or gone
// to another database (storage/postgres/homes: a move between homes). The
// caller's idea of the partition's home is stale: it reads the directory
// again and routes anew; the engine answers it as a temporary
// unavailability (HTTP 503, retryable), never a reset.
var ErrPartitionMoved = errors.New("storage: the partition is moving between databases")
