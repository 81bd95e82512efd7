package storage

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// ColumnVersions holds the column versions of one stored row (SPEC §2.2):
// for each column, the row's server_version when that column was last
// written. They are server-internal (never on the wire) and decide which
// columns of an upsert conflict (§6.2).
//
// The stored form is synclane's own (the SPEC fixes only the semantics):
//
//   - nil (NULL in a database) is a row written before column versions
//     existed: every column reads as the row's current server_version, so
//     databases written by older synclane builds serve without a rewrite;
//   - otherwise one format byte, 0x01, then an unsigned LEB128 pair
//     (ordinal, version) for each column whose version exceeds 1, in
//     ascending ordinal order; a column not listed reads as 1.
//
// A row inserted now stores InsertedColumnVersions (one byte). Backends
// persist the bytes as given and hand them back unchanged (an empty,
// non-nil value must never come back as nil: it would turn a new row into
// an old one); they never interpret them.
type ColumnVersions []byte

// columnVersionsFormat is the first byte of every non-nil ColumnVersions.
const columnVersionsFormat = 0x01

// ErrBadColumnVersions reports stored column versions that do not decode.
var ErrBadColumnVersions = errors.New("storage: malformed column versions")

// InsertedColumnVersions returns the versions of a freshly inserted row:
// every column at 1.
func InsertedColumnVersions() ColumnVersions { return ColumnVersions{columnVersionsFormat} }

// Legacy reports whether cv is the form of a row stored before column
// versions existed.
func (cv ColumnVersions) Legacy() bool { return cv == nil }

// Decode returns the version of every one of n columns of a row at
// serverVersion. Malformed bytes (a bad format byte, a truncated varint,
// ordinals out of order or out of range, a version below 2 or above
// serverVersion) fail with ErrBadColumnVersions.
func (cv ColumnVersions) Decode(n int, serverVersion int64) ([]int64, error) {
	out := make([]int64, n)
	if cv == nil {
		for i := range out {
			out[i] = serverVersion
		}
		return out, nil
	}
	for i := range out {
		out[i] = 1
	}
	if len(cv) == 0 || cv[0] != columnVersionsFormat {
		return nil, fmt.Errorf("%w: format byte", ErrBadColumnVersions)
	}
	b := cv[1:]
	last := -1
	for len(b) > 0 {
		ord, k := binary.Uvarint(b)
		if k <= 0 {
			return nil, fmt.Errorf("%w: truncated ordinal", ErrBadColumnVersions)
		}
		b = b[k:]
		ver, k := binary.Uvarint(b)
		if k <= 0 {
			return nil, fmt.Errorf("%w: truncated version", ErrBadColumnVersions)
		}
		b = b[k:]
		if ord >= uint64(n) || int(ord) <= last {
			return nil, fmt.Errorf("%w: ordinal %d", ErrBadColumnVersions, ord)
		}
		if ver < 2 || ver > uint64(serverVersion) {
			return nil, fmt.Errorf("%w: version %d of column %d at server_version %d", ErrBadColumnVersions, ver, ord, serverVersion)
		}
		last = int(ord)
		out[ord] = int64(ver)
	}
	return out, nil
}

// EncodeColumnVersions returns the stored form of versions (one per
// column, each at least 1).
func EncodeColumnVersions(versions []int64) ColumnVersions {
	cv := ColumnVersions{columnVersionsFormat}
	for i, v := range versions {
		if v > 1 {
			cv = binary.AppendUvarint(cv, uint64(i))
			cv = binary.AppendUvarint(cv, uint64(v))
		}
	}
	return cv
}
