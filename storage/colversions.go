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
//   - otherwise one format byte, 0x01, the server_version the versions
//     were written at (unsigned LEB128), then an unsigned LEB128 pair
//     (ordinal, version) for each column whose version exceeds 1, in
//     ascending ordinal order; a column not listed reads as 1.
//
// The stamp makes the form safe against writers that do not keep column
// versions: a row whose server_version moved past its stamp (an older
// synclane build updated it, after a downgrade or in a cluster mid-upgrade,
// leaving the bytes as they were) reads like a row without versions, every
// column at the row's server_version. That answers more conflicts, never
// fewer: no write is lost to a stale version.
//
// A row inserted now stores InsertedColumnVersions (two bytes). Backends
// persist the bytes as given and hand them back unchanged (an empty,
// non-nil value must never come back as nil); they never interpret them.
// Host hooks that see a stored row's ColumnVersions must treat them as
// opaque.
type ColumnVersions []byte

// columnVersionsFormat is the first byte of every non-nil ColumnVersions.
const columnVersionsFormat = 0x01

// ErrBadColumnVersions reports stored column versions that do not decode.
var ErrBadColumnVersions = errors.New("storage: malformed column versions")

// InsertedColumnVersions returns the versions of a freshly inserted row:
// every column at 1, written at version 1.
func InsertedColumnVersions() ColumnVersions { return EncodeColumnVersions(nil, 1) }

// Legacy reports whether cv is the form of a row stored before column
// versions existed.
func (cv ColumnVersions) Legacy() bool { return cv == nil }

// Decode returns the version of every one of n columns of a row at
// serverVersion: every column at serverVersion for a row without versions
// or whose versions were written at another server_version (see the type's
// doc), else the stored ones. Malformed bytes (a bad format byte, a
// truncated varint, ordinals out of order or out of range, a version below
// 2 or above the stamp) fail with ErrBadColumnVersions.
func (cv ColumnVersions) Decode(n int, serverVersion int64) ([]int64, error) {
	out := make([]int64, n)
	all := func(v int64) []int64 {
		for i := range out {
			out[i] = v
		}
		return out
	}
	if cv == nil {
		return all(serverVersion), nil
	}
	if len(cv) == 0 || cv[0] != columnVersionsFormat {
		return nil, fmt.Errorf("%w: format byte", ErrBadColumnVersions)
	}
	stamp, k := binary.Uvarint(cv[1:])
	if k <= 0 || stamp < 1 {
		return nil, fmt.Errorf("%w: stamp", ErrBadColumnVersions)
	}
	b := cv[1+k:]
	all(1)
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
		if ver < 2 || ver > stamp {
			return nil, fmt.Errorf("%w: version %d of column %d written at %d", ErrBadColumnVersions, ver, ord, stamp)
		}
		last = int(ord)
		out[ord] = int64(ver)
	}
	if int64(stamp) != serverVersion {
		return all(serverVersion), nil // rewritten by a writer that keeps no versions
	}
	return out, nil
}

// EncodeColumnVersions returns the stored form of versions (one per
// column, each from 1 to serverVersion) of a row at serverVersion.
func EncodeColumnVersions(versions []int64, serverVersion int64) ColumnVersions {
	cv := binary.AppendUvarint(ColumnVersions{columnVersionsFormat}, uint64(serverVersion))
	for i, v := range versions {
		if v > 1 {
			cv = binary.AppendUvarint(cv, uint64(i))
			cv = binary.AppendUvarint(cv, uint64(v))
		}
	}
	return cv
}
