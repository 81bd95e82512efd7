package storage

import (
	"context"
	"fmt"

	"github.com/synclane/synclane/protocol/ssp2"
)

// RowEncoder is the optional fast path of a backend's Rows role that
// encodes the rows of a row query straight into an SSG2 segment, without
// building a RowRecord per row: a bootstrap page then costs one copy of
// each value, from the database into the segment. Backend.RowEncoder is
// nil for a backend without it (the SQLite and PostgreSQL stores have
// it); the caller then encodes with VisitEncoder, chosen once when it is
// built. The storagetest contract checks that its segments equal those
// built from VisitRows with AddRow.
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

// ImageCopier is the optional fast path of a backend's Rows role that
// writes the rows of a row query straight into a SQLite segment image
// (SPEC §5.3) file, inside the database engine, instead of handing them
// out one by one: a table image then costs one INSERT ... SELECT.
// Backend.ImageCopier is nil for a backend without it (the SQLite store
// has it); the caller then fills the image from Rows.ScanRows pages,
// chosen once when it is built.
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

// VisitEncoder is the RowEncoder every backend has through its Rows role:
// EncodeRows visits q.Limit+1 rows with Rows.VisitRows and appends the
// first q.Limit with SegmentBuilder.AddRow (the one past them only tells
// that more rows match). It is what a caller encodes pages with when
// Backend.RowEncoder is nil; it holds one row at a time, not the page.
type VisitEncoder struct {
	Rows Rows
}

// EncodeRows implements RowEncoder on Rows.VisitRows; a q.Limit <= 0
// fails before anything is read.
func (v VisitEncoder) EncodeRows(ctx context.Context, partition string, q RowQuery, sb *ssp2.SegmentBuilder) (EncodedRows, error) {
	var out EncodedRows
	if q.Limit <= 0 {
		return out, fmt.Errorf("storage: EncodeRows with limit %d: a page is always bounded (limit > 0)", q.Limit)
	}
	page := q.Limit
	q.Limit++
	err := v.Rows.VisitRows(ctx, partition, q, func(rec RowRecord) error {
		if out.Rows == page {
			out.More = true // the one row past the page: rows remain
			return nil
		}
		if err := sb.AddRow(rec.Version, rec.Values); err != nil {
			return err
		}
		out.Rows++
		out.LastRowID = rec.RowID
		return nil
	})
	return out, err
}
