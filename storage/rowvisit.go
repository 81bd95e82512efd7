package storage

import (
	"context"

	"github.com/synclane/synclane/protocol/ssp2"
)

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

// RowEncoder is a Store that encodes the rows of a row query straight into
// an SSG2 segment, without building a RowRecord per row: a bootstrap page
// then costs one copy of each value, from the database into the segment.
// It is optional (the SQLite store implements it); a caller falls back to
// RowVisitor. The storagetest contract checks that its segments equal
// those built from VisitRows with AddRow.
type RowEncoder interface {
	// EncodeRows appends to sb, in order, the first q.Limit rows that
	// ScanRows(ctx, partition, q) would return (q.Limit must be > 0: a
	// page is always bounded), from one consistent read, and reports how many it appended,
	// the row id of the last one, and whether at least one more row
	// matches q after them. A row that sb refuses (a stored value that
	// does not fit its column) fails the call; rows appended before it
	// stay in sb, so a caller drops sb on error.
	EncodeRows(ctx context.Context, partition string, q RowQuery, sb *ssp2.SegmentBuilder) (EncodedRows, error)
}

// EncodedRows is what RowEncoder.EncodeRows appended.
type EncodedRows struct {
	// Rows is how many rows were appended.
	Rows int
	// LastRowID is the row id of the last row appended ("" with none).
	LastRowID string
	// More reports that rows matching the query remain after them.
	More bool
}

// ImageCopier is a Store that writes the rows of a row query straight into
// a SQLite segment image (SPEC §5.3) file, inside the database engine,
// instead of handing them out one by one: a table image then costs one
// INSERT ... SELECT. It is optional (the SQLite store implements it).
type ImageCopier interface {
	// CopyRowsToImage inserts into table q.Table.Name of the SQLite file
	// at imagePath (created with the image's columns and
	// _syncular_version, empty) every row ScanRows(ctx, partition, q)
	// would return (q.Limit <= 0: all of them), from one consistent read,
	// with booleans as 0/1, and returns how many it inserted. A stored
	// value that does not fit its column fails the call, as it fails
	// VisitRows.
	CopyRowsToImage(ctx context.Context, partition string, q RowQuery, imagePath string) (int64, error)
}
