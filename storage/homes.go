package storage

import "errors"

// ErrHomeUnavailable marks the failure of a call whose partition lives in
// a database that cannot be reached right now, when the backend spreads
// partitions over several databases (storage/postgres/homes): the
// partitions of the other databases keep serving. The engine answers it
// as a temporary unavailability (HTTP 503, retryable, retryLater).
var ErrHomeUnavailable = errors.New("storage: the database holding the partition is unreachable")
