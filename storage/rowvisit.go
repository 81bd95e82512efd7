package storage

import "context"

// RowVisitor is a Store that hands the rows of a row query to a callback
// one at a time instead of returning them as a slice, so a caller that
// encodes them as it goes (a bootstrap page) holds one row, not the page.
// Every backend implements it (the storagetest contract checks it).
type RowVisitor interface {
	// VisitRows calls fn for each row ScanRows(ctx, partition, q) would
	// return, in the same order, from one consistent read. rec.Values is
	// reused between calls: it is valid only during the call (copy what
	// you keep; rec.RowID and string values are immutable and may be
	// kept). When fn returns an error, VisitRows stops and returns it
	// unwrapped; a storage error is wrapped with %w. A query that matches
	// nothing calls fn zero times. fn runs while the read is open: it
	// must not call back into the store.
	VisitRows(ctx context.Context, partition string, q RowQuery, fn func(rec RowRecord) error) error
}
