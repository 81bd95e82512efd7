// Package segstore stores SSP2 segments (SPEC §5.1): immutable byte strings
// named "sha256:<hex of the uncompressed bytes>", built once per build key
// (partition, table, scope digest, pin, page, schema version, log epoch,
// media type) and kept for a TTL. It is a cache: losing a segment costs a
// client a re-pull, never data.
//
// Backends: Memory, here (tests and the in-memory storage); each backend
// that needs a driver is a package of its own, so this one and its
// importers link none: sqlitefile (embedded mode: one SQLite file next to
// the data) and pgseg (any process sharing the database can serve a
// segment another built). SQLite images are built by sqliteimage. Cache
// adds the TTL, single-flight building, the expiry sweep and the metrics
// on top of any backend.
package segstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"

	"github.com/synclane/synclane/protocol/ssp2"
)

// ErrNotFound: no segment with that id (or build key) is known.
var ErrNotFound = errors.New("segstore: segment not found")

// ErrExpired: the segment existed but its TTL has passed.
var ErrExpired = errors.New("segstore: segment expired")

// Meta describes one stored segment under one build key.
type Meta struct {
	Partition string
	// Key is the build key the segment was built for (see Key).
	Key string
	// ID is "sha256:" + lowercase hex of the uncompressed bytes.
	ID            string
	MediaType     ssp2.MediaType
	Table         string
	ScopeDigest   string
	AsOfCommitSeq int64
	ByteLength    int64
	RowCount      int64
	RowCursor     *string
	NextRowCursor *string
	CreatedAtMs   int64
	ExpiresAtMs   int64
}

// Store is a segment backend. Implementations are safe for concurrent use.
type Store interface {
	// Lookup returns the segment built for key in partition if it has not
	// expired at nowMs; otherwise ErrNotFound.
	Lookup(ctx context.Context, partition, key string, nowMs int64) (Meta, error)
	// Put stores data under m.Partition and m.Key, replacing an expired
	// entry for the same key. Storing a key that is already present and
	// unexpired keeps the existing entry (another builder won the race).
	// Put keeps no reference to data once it returns (a store holding
	// segments in memory copies them): the caller may reuse the buffer.
	Put(ctx context.Context, m Meta, data []byte) error
	// Get returns the unexpired entries of segment id in partition (one per
	// build key that produced these bytes) and the bytes. ErrExpired when
	// the id is known but every entry has expired; ErrNotFound when unknown.
	// Partition "" matches every partition (signed URLs, whose audience the
	// caller checks against each entry's Partition).
	Get(ctx context.Context, partition, id string, nowMs int64) ([]Meta, []byte, error)
	// Sweep drops the bytes of segments expired at nowMs (their entries stay
	// as tombstones so downloads answer "expired", not "unknown") and
	// forgets tombstones that expired before forgetBeforeMs. It returns how
	// many segments it expired.
	Sweep(ctx context.Context, nowMs, forgetBeforeMs int64) (int, error)
	// Close releases the backend's resources.
	Close() error
}

// FileOpener is implemented by a Store that keeps each segment's bytes in
// a file (sqlitefile.Store). OpenFile answers like Get but hands the bytes
// out as the open file, already checked against the id and positioned at
// its start, so a download can stream them (with sendfile where the
// transport allows) instead of holding the segment in memory; the caller
// closes it.
// A segment whose bytes are not in a file gives a nil file and no error
// (use Get).
type FileOpener interface {
	OpenFile(ctx context.Context, partition, id string, nowMs int64) ([]Meta, *os.File, error)
}

// ID returns the segment id of uncompressed segment bytes.
func ID(data []byte) string {
	sum := sha256.Sum256(data)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// Held is one segment whose bytes a store holds: its id, the bytes it
// takes (once, however many entries name it) and the span of its entries.
type Held struct {
	ID          string
	Bytes       int64
	CreatedAtMs int64 // the newest entry's
	ExpiresAtMs int64 // the latest entry's
}

// HeldRows is the part of a query result (database/sql's *sql.Rows,
// pgx's Rows) ScanHeld reads.
type HeldRows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
}

// ScanHeld reads rows of (id, bytes, created_at_ms, expires_at_ms) into
// Helds, for the Held method of a store backed by SQL. It does not close
// rows.
func ScanHeld(rows HeldRows) ([]Held, error) {
	var out []Held
	for rows.Next() {
		var h Held
		if err := rows.Scan(&h.ID, &h.Bytes, &h.CreatedAtMs, &h.ExpiresAtMs); err != nil {
			return nil, fmt.Errorf("segstore: held segments: %w", err)
		}
		out = append(out, h)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("segstore: held segments: %w", err)
	}
	return out, nil
}

// Evicter is implemented by a Store whose contents the Cache can bound
// (Quota): sqlitefile.Store, pgseg.Store and Memory.
type Evicter interface {
	// Held lists every segment whose bytes the store holds, expired ones
	// included (their bytes take space until the sweep drops them).
	Held(ctx context.Context) ([]Held, error)
	// Evict drops the bytes of segments ids (every entry of each becomes
	// a tombstone: a download answers ErrExpired, a lookup misses) and
	// returns how many held bytes.
	Evict(ctx context.Context, ids []string) (int, error)
}
