// Package segstore stores SSP2 segments (SPEC §5.1): immutable byte strings
// named "sha256:<hex of the uncompressed bytes>", kept once per id, each
// with the list of its publications. A publication is one build of those
// bytes for one context: build key (partition, table, scope digest, pin,
// page, schema version, log epoch, media type), with its own lifetime
// (TTL). The bytes go when the last publication of them has expired. It
// is a cache: losing a segment costs a client a re-pull, never data.
//
// Backends: Memory, here (tests and the in-memory storage); each backend
// that needs a driver is a package of its own, so this one and its
// importers link none: sqlitefile (embedded mode: one SQLite file next to
// the data) and pgseg (any process sharing the database can serve a
// segment another built). SQLite images are built by sqliteimage. Cache
// adds the TTL, single-flight building, the expiry sweep and the metrics
// on top of any backend, and the compressed forms of segments (Form:
// built once per segment and encoding, stored beside the bytes by a
// FormStore, bounded by the quota).
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

// ErrCollision: bytes published under a segment id differ from the bytes
// already stored under it. The id is their SHA-256, so this is a hash
// collision (or a store altered behind its back); a store fails the
// publication rather than overwrite (SPEC §5.1).
var ErrCollision = errors.New("segstore: different bytes under one segment id")

// Meta describes one publication of a stored segment (SPEC §5.1): the
// bytes named ID as built for one context (Partition, LogEpoch, Key and
// the descriptor fields), with the publication's own creation and expiry.
// Two publications of the same bytes share them and never each other's
// lifetime.
type Meta struct {
	Partition string
	// LogEpoch is the partition's log epoch the segment was built under
	// (KeyParts.LogEpoch): a download is served only while it is the
	// partition's live epoch.
	LogEpoch string
	// Key is the build key the segment was built for (see Key).
	Key string
	// ID is "sha256:" + lowercase hex of the uncompressed bytes.
	ID string
	// SchemaVersion is the schema the bytes are encoded for
	// (KeyParts.SchemaVersion).
	SchemaVersion int32
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

// Publication is a publication as a download reads it: its Meta and
// whether it is live.
type Publication struct {
	Meta
	// Live: unexpired at the time of the read, and the store held the
	// segment's bytes for it (eviction and the expiry of the last
	// publication drop them).
	Live bool
}

// Store is a segment backend: one record of bytes per segment id and the
// publications of each. Implementations are safe for concurrent use.
type Store interface {
	// Lookup returns the live publication built for key in partition at
	// nowMs; otherwise ErrNotFound.
	Lookup(ctx context.Context, partition, key string, nowMs int64) (Meta, error)
	// Put publishes data as m: the publication m.Partition, m.Key replaces
	// one of the same key that is no longer live; one that is live stays
	// as it is (another builder won the race). The bytes are stored once
	// per m.ID, shared by every publication of it; bytes of another
	// length already under m.ID fail with ErrCollision (never
	// overwritten). Two publications of the same bytes by different
	// callers (partitions, keys), concurrent or not, both stay. Put keeps
	// no reference to data once it returns (a store holding segments in
	// memory copies them): the caller may reuse the buffer.
	Put(ctx context.Context, m Meta, data []byte) error
	// Get returns every publication of segment id in partition, live or
	// not (expired, evicted), and, when at least one of them is live, the
	// bytes (nil otherwise). ErrNotFound when there is none. Partition ""
	// matches every partition (signed URLs, whose audience the caller
	// checks against each publication's Partition).
	Get(ctx context.Context, partition, id string, nowMs int64) ([]Publication, []byte, error)
	// Sweep drops the bytes of segments whose every publication expired
	// at nowMs (the publications stay as tombstones so downloads answer
	// "expired", not "unknown"), and forgets publications that expired
	// before forgetBeforeMs. It returns how many segments' bytes it
	// dropped.
	Sweep(ctx context.Context, nowMs, forgetBeforeMs int64) (int, error)
	// Close releases the backend's resources.
	Close() error
}

// FileOpener is implemented by a Store that keeps each segment's bytes in
// a file (sqlitefile.Store). OpenFile answers like Get but hands the bytes
// out as the open file, already checked against the id and positioned at
// its start, so a download can stream them (with sendfile where the
// transport allows) instead of holding the segment in memory; the caller
// closes it. The file is nil when no publication is live, or when the
// bytes are not in a file (then some publication is live: use Get).
type FileOpener interface {
	OpenFile(ctx context.Context, partition, id string, nowMs int64) ([]Publication, *os.File, error)
}

// AnyLive reports whether a publication of pubs is live.
func AnyLive(pubs []Publication) bool {
	for _, p := range pubs {
		if p.Live {
			return true
		}
	}
	return false
}

// ID returns the segment id of uncompressed segment bytes.
func ID(data []byte) string {
	sum := sha256.Sum256(data)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// Held is one segment whose bytes a store holds: its id, the bytes it
// takes (once, however many publications share them) and the span of its
// publications.
type Held struct {
	ID          string
	Bytes       int64
	CreatedAtMs int64 // the newest publication's
	ExpiresAtMs int64 // the latest publication's
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
	// Evict drops the bytes of segments ids (every publication of each
	// stops being live: a download answers ErrExpired, a lookup misses)
	// and returns how many held bytes.
	Evict(ctx context.Context, ids []string) (int, error)
}
