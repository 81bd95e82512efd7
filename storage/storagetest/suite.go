// Package storagetest is the contract suite every storage backend
// passes, organized by role (storage.Backend): each group of cases checks
// one role, and runs on a backend only when the backend has that role;
// the cases of a role the backend lacks are skipped, each by name. A
// backend's tests call Run with the roles it is expected to have (exactly:
// Run fails when the backend has another set, so a role cannot silently
// disappear) and a constructor of fresh, empty backends:
//
//	func TestContract(t *testing.T) {
//		storagetest.Run(t, []string{"Lifecycle", "Log", ...},
//			func(t *testing.T) storage.Backend { return open(t).Backend() })
//	}
//
// Beyond storage.go the suite pins these readings of the contract, which
// every backend must share:
//   - EnsureSchema is required before any other call (ErrSchemaNotEnsured).
//   - ReadPartition of a never-touched partition returns Partition set,
//     Exists false and zero values.
//   - RotateLogEpoch creates the partition if needed; it keeps rows, commits
//     and idempotency records and deletes only client records.
//   - Rollback after Commit or after Rollback returns nil; every other PushTx
//     method after either returns an error wrapping ErrTxDone.
//   - A unique index ignores rows with a NULL in any indexed column (SQL
//     semantics); index uniqueness is per partition.
//   - ChangeQuery and RowQuery scope values for integer scope columns are
//     decimal strings; a value that is not the canonical decimal form of an
//     int64 matches nothing (and is no error).
//   - A commit may have zero changes; ScanChanges never returns it.
//   - Checkpoint operations and ReadServeGate, like every other call, need
//     EnsureSchema first. Checkpoint states, watermarks and epochs are
//     compared exactly; UpdatedAtMs is not (AdvanceCheckpoint takes no
//     clock argument and stamps the wall clock).
//   - PruneThrough of a never-created partition is a no-op.
//   - Writes no backend can store fail with ErrUnstorable on every backend
//     alike (PutRow's also wrap ErrConstraint), before anything is written,
//     and RollbackToSavepoint then lets the transaction's other commits
//     commit; reads treat keys and scope values that are not Storable as
//     absent (no error). PutClient never changes a record's ActorID.
//   - Retention: PruneBatch never lowers the horizon, stops at throughSeq,
//     max and horizon+maxCommits, and deletes a rejected idempotency record
//     once the horizon reaches the max commit seq of its transaction. It
//     verifies the request's log epoch first: another epoch (an empty one
//     too) fails with ErrLogEpochChanged and deletes nothing; a
//     never-created partition returns a zero result without an error.
//   - LatestScopeCommit counts deletes (their changes carry scopes) and
//     forgets what pruning removed. A
//     client is active when updated strictly after now − ActiveWindowMs; a
//     commit is aged when created at or before now − AgeForceMs. The
//     maintenance lock is not re-entrant (a second TryLockMaintenance on
//     the same handle fails while the first holds it). A restore writes the
//     capture back whole and rotates the epoch like RotateLogEpoch.
//   - The protocol behaviour of retention through the engine (resets at
//     the horizon, bootstrap restarts, pruning under load, idempotency
//     after pruning, one maintenance pass per database) is checked on
//     every backend by engine/retention's tests, not here: this suite
//     imports no engine and no partition.
//   - HandOverClients writes a record only when none is stored or the
//     stored one is bound to the same actor and its UpdatedAtMs is not
//     above the handed one's (an equal one is replaced), only at the log
//     epoch the call names, and ignores the fence; a newer record written concurrently
//     by PutClient always stands.
//   - Leases: SwapLease is a compare-and-swap on the stored MAC (nil: none
//     stored), exactly one of concurrent swaps from one MAC wins, and
//     lease records survive RotateLogEpoch (the client keeps its lease).
//   - Column versions are stored verbatim: nil reads nil (NULL), a non-nil
//     value, even an empty one, reads back byte for byte and non-nil,
//     through PushTx.GetRow, a prefetched GetRow and PushTx.ScanRows;
//     Rows.ScanRows and VisitRows may leave them nil, and no encoded or
//     copied row (EncodeRows, CopyRowsToImage) carries them.
//   - Tombstones: DeleteRow records one whether or not the row existed
//     (except for a row id storage.CheckTombstone refuses, which gets none
//     and reads 0); PutRow leaves it; a later DeleteRow replaces it;
//     PruneBatch and PruneThrough remove every tombstone at or below the
//     new horizon (one written later with an older seq too) and
//     CountPrune counts them; RotateLogEpoch keeps them; a restore brings
//     back the captured ones.
//   - Primary keys of every eligible type (string, integer, boolean,
//     json) are addressed by their row id, the key rendered as a string
//     (schema.RenderKey); rows are ordered by the key's native order
//     (numeric for integers, false before true, byte order of string and
//     json text), and AfterRowID paging follows it (storage.AfterKey). A
//     row id no key renders as names no row: absent to every read, no
//     tombstone, never sent to the database (storage.KeyValue).
//   - Truncated is true when the scan stopped on the limit and more matching
//     commits exist up to UpToSeq, false when the last returned commit is
//     UpToSeq or the range was exhausted below the limit. (When the limit is
//     reached and no further commit matches, either value is accepted.)
package storagetest

import (
	"context"
	"slices"
	"testing"

	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/storage"
)

// SchemaV1 is the schema the suite ensures on every fresh store: "items"
// (every column type, a string and an integer scope, a unique index on
// code) and "notes" (one string scope).
const SchemaV1 = `{
  "version": 1,
  "tables": [
    {
      "name": "items",
      "columns": [
        {"name": "id", "type": "string"},
        {"name": "project", "type": "string"},
        {"name": "owner", "type": "integer"},
        {"name": "title", "type": "string", "nullable": true},
        {"name": "n", "type": "integer", "nullable": true},
        {"name": "f", "type": "float", "nullable": true},
        {"name": "b", "type": "boolean", "nullable": true},
        {"name": "j", "type": "json", "nullable": true},
        {"name": "bin", "type": "bytes", "nullable": true},
        {"name": "ref", "type": "blob_ref", "nullable": true},
        {"name": "c", "type": "crdt", "nullable": true, "crdtType": "yjs-doc"},
        {"name": "code", "type": "string", "nullable": true}
      ],
      "primaryKey": "id",
      "scopes": ["project:{project}", {"pattern": "owner:{owner}", "column": "owner"}],
      "indexes": [
        {"name": "items_code", "columns": ["code"], "unique": true},
        {"name": "items_title", "columns": ["project", "title"]}
      ]
    },
    {
      "name": "notes",
      "columns": [
        {"name": "id", "type": "string"},
        {"name": "project", "type": "string"},
        {"name": "body", "type": "string", "nullable": true}
      ],
      "primaryKey": ["id"],
      "scopes": ["project:{project}"]
    }
  ]
}`

// SchemaV2 migrates SchemaV1: items gains the nullable column "extra" and
// a unique index on it, notes gains an index, and the table "tags" is new.
const SchemaV2 = `{
  "version": 2,
  "tables": [
    {
      "name": "items",
      "columns": [
        {"name": "id", "type": "string"},
        {"name": "project", "type": "string"},
        {"name": "owner", "type": "integer"},
        {"name": "title", "type": "string", "nullable": true},
        {"name": "n", "type": "integer", "nullable": true},
        {"name": "f", "type": "float", "nullable": true},
        {"name": "b", "type": "boolean", "nullable": true},
        {"name": "j", "type": "json", "nullable": true},
        {"name": "bin", "type": "bytes", "nullable": true},
        {"name": "ref", "type": "blob_ref", "nullable": true},
        {"name": "c", "type": "crdt", "nullable": true, "crdtType": "yjs-doc"},
        {"name": "code", "type": "string", "nullable": true},
        {"name": "extra", "type": "string", "nullable": true}
      ],
      "primaryKey": "id",
      "scopes": ["project:{project}", {"pattern": "owner:{owner}", "column": "owner"}],
      "indexes": [
        {"name": "items_code", "columns": ["code"], "unique": true},
        {"name": "items_title", "columns": ["project", "title"]},
        {"name": "items_extra", "columns": ["extra"], "unique": true}
      ]
    },
    {
      "name": "notes",
      "columns": [
        {"name": "id", "type": "string"},
        {"name": "project", "type": "string"},
        {"name": "body", "type": "string", "nullable": true}
      ],
      "primaryKey": ["id"],
      "scopes": ["project:{project}"],
      "indexes": [{"name": "notes_body", "columns": ["body"]}]
    },
    {
      "name": "tags",
      "columns": [
        {"name": "id", "type": "string"},
        {"name": "project", "type": "string"},
        {"name": "label", "type": "string"}
      ],
      "primaryKey": "id",
      "scopes": ["project:{project}"]
    }
  ]
}`

// MustParse compiles schema JSON or panics; for the fixed suite schemas.
func MustParse(src string) *schema.Schema {
	s, err := schema.Parse([]byte(src))
	if err != nil {
		panic(err)
	}
	return s
}

// Run runs the whole contract suite. roles are the roles the backend is
// expected to have (storage.Backend field names), exactly. open must
// return a fresh, empty backend on which EnsureSchema has not run; each
// subtest opens its own and closes it once when the subtest ends (open
// may register t.Cleanup for further teardown, which runs after that
// Close).
//
// Run skips the cases that need two handles on one database; backends
// that can open one call RunShared instead.
func Run(t *testing.T, roles []string, open func(t *testing.T) storage.Backend) {
	t.Helper()
	run(t, roles, open, nil)
}

// RunShared runs the whole suite like Run plus the cases that need two
// handles on one database (two processes running different schema
// versions: the writer fence, the serve gate seen by an old process).
// share must return a second handle on the database of b, on which
// EnsureSchema has not run, with its own running schema version; the
// suite does not close it (share registers t.Cleanup for that).
func RunShared(t *testing.T, roles []string, open func(t *testing.T) storage.Backend, share func(t *testing.T, b storage.Backend) storage.Backend) {
	t.Helper()
	run(t, roles, open, share)
}

// group is the cases of one role. Cases that need further roles name them
// (test.roles).
type group struct {
	name  string
	role  string
	tests []test
	// setup, when set, prepares each case's env (after EnsureSchema).
	setup func(e *env)
}

// groups are the suite's cases by role.
func groups() []group {
	return []group{
		{name: "Schema", role: "Lifecycle", tests: slices.Concat(schemaTests, schemaShapeTests)},
		{name: "Partition", role: "Log", tests: partitionTests},
		{name: "PushTx", role: "Log", tests: pushTxTests},
		{name: "Prefetch", role: "Log", tests: prefetchTests},
		{name: "Values", role: "Log", tests: valueTests},
		{name: "Constraint", role: "Log", tests: constraintTests},
		{name: "Unstorable", role: "Log", tests: unstorableTests},
		{name: "Idempotency", role: "Log", tests: idempotencyTests},
		{name: "ScanChanges", role: "Log", tests: slices.Concat(scanChangesTests, latestScopeCommitTests)},
		{name: "TxScanRows", role: "Log", tests: txScanRowsTests},
		{name: "ScanByColumn", role: "Log", tests: refScanTests},
		{name: "ColumnVersions", role: "Log", tests: colVersionTests},
		{name: "Tombstones", role: "Log", tests: tombstoneTests},
		{name: "Concurrency", role: "Log", tests: concurrencyTests},
		{name: "KeyTypes", role: "Log", tests: keyTypeTests},
		{name: "ScanRows", role: "Rows", tests: scanRowsTests},
		{name: "VisitRows", role: "Rows", tests: visitRowsTests},
		{name: "VisitEncoder", role: "Rows", tests: encodeRowsTests, setup: func(e *env) { e.visitEncoder = true }},
		{name: "EncodeRows", role: "RowEncoder", tests: encodeRowsTests},
		{name: "ImageCopy", role: "ImageCopier", tests: imageCopyTests},
		{name: "Clients", role: "Clients", tests: slices.Concat(clientTests, putClientUnstorableTests, bindTests)},
		{name: "Checkpoint", role: "Checkpoints", tests: checkpointTests},
		{name: "SharedCheckpoint", role: "Checkpoints", tests: sharedCheckpointTests},
		{name: "Retention", role: "Retention", tests: retentionTests},
		{name: "RetentionTombstones", role: "Retention", tests: tombstoneRetentionTests},
		{name: "Leases", role: "Leases", tests: leaseTests},
		{name: "Reactions", role: "Reactions", tests: reactionTests},
		{name: "Query", role: "Queries", tests: queryTests},
		{name: "TxQuery", role: "Log", tests: txQueryTests},
		{name: "Admin", role: "Admin", tests: adminTests},
		{name: "Blobs", role: "Blobs", tests: blobTests},
		{name: "Ownership", role: "Ownership", tests: ownershipTests},
		{name: "HandOver", role: "HandOver", tests: handOverTests},
	}
}

func run(t *testing.T, roles []string, open func(t *testing.T) storage.Backend, share func(t *testing.T, b storage.Backend) storage.Backend) {
	t.Helper()
	all := storage.RoleNames()
	for _, r := range roles {
		if !slices.Contains(all, r) {
			t.Fatalf("expected role %q is not a role of storage.Backend (%v)", r, all)
		}
	}
	// The backend has exactly the roles expected of it.
	probe := open(t)
	has := probe.Roles()
	if err := probe.Lifecycle.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if !slices.Equal(has, sortedRoles(roles)) {
		t.Fatalf("the backend has the roles %v, expected exactly %v", has, sortedRoles(roles))
	}
	if err := probe.CheckRequired(); err != nil {
		t.Fatal(err)
	}
	for _, g := range groups() {
		t.Run(g.name, func(t *testing.T) {
			for _, tc := range g.tests {
				t.Run(tc.name, func(t *testing.T) {
					for _, r := range append([]string{g.role}, tc.roles...) {
						if !slices.Contains(all, r) {
							t.Fatalf("the case needs %q, which is not a role of storage.Backend", r)
						}
						if !slices.Contains(has, r) {
							t.Skipf("the backend has no %s role (by design: no variable enables it)", r)
						}
					}
					if tc.shared && share == nil {
						t.Skip("needs two handles on one database: runs under storagetest.RunShared only (by design: no variable enables it)")
					}
					b := open(t)
					e := &env{t: t, b: b, ctx: t.Context()}
					if share != nil {
						e.share = func() storage.Backend { return share(t, b) }
					}
					if !tc.raw {
						e.ensure(MustParse(SchemaV1))
					}
					defer func() {
						if err := b.Lifecycle.Close(); err != nil {
							t.Errorf("Close: %v", err)
						}
					}()
					if g.setup != nil {
						g.setup(e)
					}
					tc.fn(e)
				})
			}
		})
	}
}

// sortedRoles returns roles in storage.Backend's field order.
func sortedRoles(roles []string) []string {
	var out []string
	for _, r := range storage.RoleNames() {
		if slices.Contains(roles, r) {
			out = append(out, r)
		}
	}
	return out
}

// test is one contract case. raw cases get a store without EnsureSchema.
type test struct {
	name   string
	raw    bool
	shared bool // needs env.share (RunShared)
	// roles are the roles the case needs beyond its group's.
	roles []string
	fn    func(e *env)
}

// env bundles a backend under test with the schema it was ensured with.
type env struct {
	t     *testing.T
	b     storage.Backend
	ctx   context.Context
	sch   *schema.Schema
	items *schema.Table
	notes *schema.Table
	// share opens a second, not yet ensured handle on the same database
	// (nil under Run).
	share func() storage.Backend
	// schemas records the schema each handle (by its Lifecycle role) was
	// last ensured with by the checkpoint cases (ensureWith); handles
	// absent from it run e.sch.
	schemas map[storage.Lifecycle]*schema.Schema
	// visitEncoder makes encoder return storage.VisitEncoder over the
	// Rows role instead of the RowEncoder fast path.
	visitEncoder bool
}

func (e *env) ensure(s *schema.Schema) {
	e.t.Helper()
	if err := e.b.Lifecycle.EnsureSchema(e.ctx, s); err != nil {
		e.t.Fatalf("EnsureSchema(v%d): %v", s.Version, err)
	}
	e.sch = s
	e.items = s.Table("items")
	e.notes = s.Table("notes")
}
