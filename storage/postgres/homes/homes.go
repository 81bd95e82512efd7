// Package homes spreads the partitions of one deployment over several
// PostgreSQL databases, its homes.
//
// Every partition is an island (its log, rows, clients, checkpoints,
// tombstones, leases, reactions and ownership row), so a partition lives
// wholly in one home: a postgres.Store of its own, with its own pool and
// schema. The first home, "main" (the --postgres database), also holds
// the directory: table sync_home_directory, one row per placed partition
// naming its home, with a generation that starts at 1 and is raised by
// every change of the row. Homes is a storage.Backend whose roles send
// every call naming a partition to the partition's home, and answer the
// calls of no partition from every home (listings merged in their
// contract's order, counts summed) or from main (blob metadata, the
// maintenance lease), as sqlite.Dir does for the files of one directory.
//
// Placement. A call that writes places a partition the directory does
// not name yet: the home is chosen by rendezvous hashing over the home
// names (the home with the highest hash of (name, partition)), and the
// row is inserted if absent; whatever row is there after the insert (its
// primary key is the partition) decides, so two processes placing one
// partition at once agree, whatever home each computed. Rendezvous needs
// no read of the other homes' sizes, gives every process the same answer
// for the same home list, spreads new partitions evenly, and, when a
// home is added, sends it only its 1/K share of new partitions (a rule
// of "least partitions" would send every new partition, often the most
// active, to the new home until it caught up). A call that only reads a
// partition the directory does not name inserts nothing: no home holds
// anything of it, and it is answered by the home rendezvous names.
//
// The directory is cached by every process: an entry, once read, is
// used without reading the directory again; a miss reads it. An entry
// changes by a move (move.go: Move, whose switch step is a
// compare-and-swap raising the row's generation; Relocate is that step
// alone, for a partition no process serves). A home refuses every write
// of a partition moving out of it, moving in or gone (the move guard,
// storage/postgres/move.go), in the write's own transaction, so a
// process with a stale entry gets storage.ErrPartitionMoved, never a
// write to the old home: the refusal empties its cache and the retry
// reads the directory again. Forget drops a process's entry.
//
// Ownership (cluster mode) stays in the partition's home
// (sync_partitions.owner_generation): the fence is checked under the
// partition's row lock by the same transaction that writes the data it
// protects, as with one database.
//
// The serve gate stays deployment-wide (RFC 0007: a pending checkpoint
// of any partition closes the gate of processes that did not declare it):
// a partition's gate is its home's with the pending checkpoints of every
// other home, re-read when the home's gate generation changed (gate.go).
//
// A home that cannot be reached fails the calls of its partitions with
// an error wrapping storage.ErrHomeUnavailable (the engine answers 503,
// retryable); the partitions of the other homes are not affected, and
// while main is unreachable the partitions whose directory entries a
// process has cached keep serving. The calls that span every home
// (listings, counts, the orphan blob sweep) fail while any home is
// unreachable, except ClaimReactions and the commit feed, which go on
// with the others.
package homes

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"regexp"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"

	"github.com/synclane/synclane/storage"
	"github.com/synclane/synclane/storage/postgres"
)

// Main is the name of the first home: the --postgres database, which also
// holds the directory and the blob metadata.
const Main = "main"

// MaxHomes bounds the homes of one deployment (main included): each holds
// a pool of its own in every process.
const MaxHomes = 64

// DirectoryTable is the directory's table, in main's schema.
const DirectoryTable = "sync_home_directory"

// IdentityTable is the one-row table, in every home's schema, naming the
// deployment and the home the database serves as.
const IdentityTable = "sync_home_identity"

// ErrIdentity reports a home whose database already serves as another
// home, or as a home of another deployment.
var ErrIdentity = errors.New("homes: the database serves as another home")

var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,31}$`)

// CheckName reports whether name can name a home: 1-32 characters of
// lowercase letters, digits, '_' and '-', starting with a letter or a
// digit.
func CheckName(name string) error {
	if !nameRE.MatchString(name) {
		return fmt.Errorf("homes: home name %q: want 1-32 of a-z, 0-9, '_' and '-', starting with a letter or digit", name)
	}
	return nil
}

// Home is one database of the deployment.
type Home struct {
	// Name names the home in the directory: Main for the first.
	Name string
	// Store is the home's store; Homes closes it.
	Store *postgres.Store
}

// Options configure Open.
type Options struct {
	// Logger receives operational messages; nil means zap.NewNop().
	Logger *zap.Logger
	// MaxCached bounds the directory entries a process caches (default
	// 1<<20); past it the cache is emptied and refilled as partitions are
	// used.
	MaxCached int
}

// home is one home with its index (main is 0; reaction ids and the gate
// readings use it) and its counters.
type home struct {
	name  string
	idx   int
	st    *postgres.Store
	b     storage.Backend
	calls atomic.Uint64 // routed calls
	// unreachable counts calls that failed because the home could not be
	// reached.
	unreachable atomic.Uint64
	// refused counts writes the home's move guard refused (a stale
	// cached entry met a moving or moved partition).
	refused atomic.Uint64
	// movesIn counts the moves into the home this process switched.
	movesIn atomic.Uint64
}

// entry is a cached directory row.
type entry struct {
	home *home
	gen  int64
}

// Homes is a storage backend over several PostgreSQL databases (see the
// package comment). It is safe for concurrent use by any number of
// goroutines and processes.
type Homes struct {
	log    *zap.Logger
	homes  []*home // main first
	byName map[string]*home
	dir    string // the directory's qualified table name

	maxCached int
	mu        sync.RWMutex
	cache     map[string]entry

	// claimTurn rotates the home ClaimReactions asks first.
	claimTurn atomic.Uint64
	// pending holds, per home, the last reading of the other homes'
	// pending checkpoints (gate.go).
	pending   []atomic.Pointer[pendingReading]
	gateReads atomic.Uint64
	// lastPending holds, per home, its own pending checkpoints as last
	// read (gate.go: used while it cannot be reached).
	lastPending []atomic.Pointer[homePending]
	// orphanMu guards orphanAfter, where MarkOrphanBlobs' walk stopped.
	orphanMu    sync.Mutex
	orphanAfter string
	// deployment is the deployment id stamped in main (EnsureSchema).
	deployment string
	// ensured is set once EnsureSchema created the directory.
	ensured atomic.Bool
}

// Open returns the backend over main (the directory's database) and the
// other homes, in the order given (their names must be distinct, valid
// and not Main; at most MaxHomes in all). Homes owns the stores: Close
// closes them. EnsureSchema (of Backend().Lifecycle) must run before any
// other call: it creates the directory, checks every home's identity and
// adopts the partitions a home held before it had one.
func Open(main *postgres.Store, others []Home, opts Options) (*Homes, error) {
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	if opts.MaxCached <= 0 {
		opts.MaxCached = 1 << 20
	}
	if 1+len(others) > MaxHomes {
		return nil, fmt.Errorf("homes: %d homes: at most %d", 1+len(others), MaxHomes)
	}
	h := &Homes{log: opts.Logger, byName: map[string]*home{}, maxCached: opts.MaxCached, cache: map[string]entry{},
		dir: qualify(main.SchemaName(), DirectoryTable)}
	add := func(name string, st *postgres.Store) error {
		if st == nil {
			return fmt.Errorf("homes: home %q has no store", name)
		}
		if _, dup := h.byName[name]; dup {
			return fmt.Errorf("homes: home %q is named twice", name)
		}
		hm := &home{name: name, idx: len(h.homes), st: st, b: st.Backend()}
		h.homes = append(h.homes, hm)
		h.byName[name] = hm
		return nil
	}
	if err := add(Main, main); err != nil {
		return nil, err
	}
	for _, o := range others {
		if err := CheckName(o.Name); err != nil {
			return nil, err
		}
		if o.Name == Main {
			return nil, fmt.Errorf("homes: %q names the --postgres database; name the others differently", Main)
		}
		if err := add(o.Name, o.Store); err != nil {
			return nil, err
		}
	}
	h.pending = make([]atomic.Pointer[pendingReading], len(h.homes))
	h.lastPending = make([]atomic.Pointer[homePending], len(h.homes))
	return h, nil
}

// qualify quotes table, in schema when one is set.
func qualify(schema, table string) string {
	if schema == "" {
		return pgx.Identifier{table}.Sanitize()
	}
	return pgx.Identifier{schema, table}.Sanitize()
}

// Names returns the homes' names, main first.
func (h *Homes) Names() []string {
	out := make([]string, len(h.homes))
	for i, hm := range h.homes {
		out[i] = hm.name
	}
	return out
}

// Store returns the store of the home named name, or nil.
func (h *Homes) Store(name string) *postgres.Store {
	if hm := h.byName[name]; hm != nil {
		return hm.st
	}
	return nil
}

// Main returns main's store (the directory, blob metadata, segments).
func (h *Homes) Main() *postgres.Store { return h.homes[0].st }

func (h *Homes) main() *home { return h.homes[0] }

// Close closes every home's store; calling it again returns nil.
func (h *Homes) Close() error {
	var errs []error
	for _, hm := range h.homes {
		if err := hm.st.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Rendezvous returns the home among names that rendezvous hashing gives
// partition: the name with the highest 64-bit score of (name,
// partition) (FNV-1a of the name, a zero byte and the partition, through
// the splitmix64 finalizer), ties to the smaller name. It is part of the
// placement rule: it never changes.
func Rendezvous(names []string, partition string) string {
	best, bestScore := "", uint64(0)
	for _, n := range names {
		s := score(n, partition)
		if best == "" || s > bestScore || (s == bestScore && n < best) {
			best, bestScore = n, s
		}
	}
	return best
}

func score(name, partition string) uint64 {
	f := fnv.New64a()
	_, _ = f.Write([]byte(name))
	_, _ = f.Write([]byte{0})
	_, _ = f.Write([]byte(partition))
	x := f.Sum64()
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// unavailable wraps err, a failure of a call to hm, with
// storage.ErrHomeUnavailable when it says hm could not be reached, and
// counts it; other errors are returned as they are.
func (h *Homes) unavailable(hm *home, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, storage.ErrPartitionMoved) {
		hm.refused.Add(1)
		// hm refused a write of a partition moving out of it (or in, not
		// switched yet): this process's cached entry is stale. Every entry
		// is read again (moves are rare; the partition is not known here);
		// the caller answers 503 and its retry routes anew.
		h.forgetAll()
		return err
	}
	if !postgres.IsUnreachable(err) {
		return err
	}
	hm.unreachable.Add(1)
	return fmt.Errorf("homes: home %q: %w: %w", hm.name, storage.ErrHomeUnavailable, err)
}

// cached returns the cached entry of partition.
func (h *Homes) cached(partition string) (entry, bool) {
	h.mu.RLock()
	e, ok := h.cache[partition]
	h.mu.RUnlock()
	return e, ok
}

// remember caches e for partition, emptying a full cache first.
func (h *Homes) remember(partition string, e entry) {
	h.mu.Lock()
	if len(h.cache) >= h.maxCached {
		h.cache = map[string]entry{}
	}
	h.cache[partition] = e
	h.mu.Unlock()
}

// Forget drops the process's cached directory entry of partition: the
// next call reads the directory again.
func (h *Homes) Forget(partition string) {
	h.mu.Lock()
	delete(h.cache, partition)
	h.mu.Unlock()
}

// forgetAll empties the process's directory cache.
func (h *Homes) forgetAll() {
	h.mu.Lock()
	h.cache = map[string]entry{}
	h.mu.Unlock()
}

// errNotEnsured is the error of a directory access before EnsureSchema.
var errNotEnsured = fmt.Errorf("homes: %w", storage.ErrSchemaNotEnsured)

// readEntry reads partition's directory row (ok false: none). A
// partition that is not storable has none (no home holds anything of
// it; its home's own call refuses it).
func (h *Homes) readEntry(ctx context.Context, partition string) (entry, bool, error) {
	if !h.ensured.Load() {
		return entry{}, false, errNotEnsured
	}
	if !storage.Storable(partition) {
		return entry{}, false, nil
	}
	var name string
	var gen int64
	err := h.main().st.Pool().QueryRow(ctx, `SELECT home, generation FROM `+h.dir+` WHERE partition = $1`, partition).Scan(&name, &gen)
	if errors.Is(err, pgx.ErrNoRows) {
		return entry{}, false, nil
	}
	if err != nil {
		return entry{}, false, h.unavailable(h.main(), fmt.Errorf("homes: read the directory: %w", err))
	}
	return h.entryOf(partition, name, gen)
}

// entryOf resolves a directory row.
func (h *Homes) entryOf(partition, name string, gen int64) (entry, bool, error) {
	hm := h.byName[name]
	if hm == nil {
		return entry{}, false, fmt.Errorf("homes: partition %s lives in home %q, which this process is not configured with (--postgres-databases): %w",
			storage.QuoteID(partition), name, storage.ErrHomeUnavailable)
	}
	return entry{home: hm, gen: gen}, true, nil
}

// lookup returns the home of partition for a call that only reads it:
// the cached or directory entry, or (the partition is not placed: no home
// holds anything of it) the home rendezvous names, not cached.
func (h *Homes) lookup(ctx context.Context, partition string) (*home, error) {
	if e, ok := h.cached(partition); ok {
		return e.home, nil
	}
	e, ok, err := h.readEntry(ctx, partition)
	if err != nil {
		return nil, err
	}
	if ok {
		h.remember(partition, e)
		return e.home, nil
	}
	return h.byName[Rendezvous(h.Names(), partition)], nil
}

// place returns the home of partition for a call that writes it, placing
// the partition when the directory does not name it yet.
func (h *Homes) place(ctx context.Context, partition string) (*home, error) {
	if e, ok := h.cached(partition); ok {
		return e.home, nil
	}
	if !h.ensured.Load() {
		return nil, errNotEnsured
	}
	if !storage.Storable(partition) {
		// No row can name it; the home's own call refuses it.
		return h.main(), nil
	}
	want := Rendezvous(h.Names(), partition)
	var name string
	var gen int64
	pool := h.main().st.Pool()
	err := pool.QueryRow(ctx, `INSERT INTO `+h.dir+` (partition, home, generation, updated_at_ms) VALUES ($1, $2, 1, $3)
ON CONFLICT (partition) DO NOTHING RETURNING home, generation`, partition, want, time.Now().UnixMilli()).Scan(&name, &gen)
	if errors.Is(err, pgx.ErrNoRows) {
		// Another process placed it first: its row decides (read in a
		// statement of its own, whose snapshot sees that row).
		err = pool.QueryRow(ctx, `SELECT home, generation FROM `+h.dir+` WHERE partition = $1`, partition).Scan(&name, &gen)
	}
	if err != nil {
		return nil, h.unavailable(h.main(), fmt.Errorf("homes: place partition %s: %w", storage.QuoteID(partition), err))
	}
	e, _, err := h.entryOf(partition, name, gen)
	if err != nil {
		return nil, err
	}
	h.remember(partition, e)
	return e.home, nil
}

// HomeOf returns the name of the home holding partition and the
// directory row's generation (0 when the directory does not name it: the
// name is then the home a placement would choose).
func (h *Homes) HomeOf(ctx context.Context, partition string) (string, int64, error) {
	e, ok, err := h.readEntry(ctx, partition)
	if err != nil {
		return "", 0, err
	}
	if !ok {
		return Rendezvous(h.Names(), partition), 0, nil
	}
	return e.home.name, e.gen, nil
}

// ErrGenerationChanged reports a Relocate whose expected generation is
// not the directory row's.
var ErrGenerationChanged = errors.New("homes: the directory row changed since it was read")

// Relocate points partition's directory row at home to, raising its
// generation, if the row's generation is still gen (a compare-and-swap:
// of two changes made from one reading, one wins); it returns the new
// generation. It moves no data: it is the switch step of a move, taken
// once the copy in to is complete and the old home refuses writes. Other
// processes' cached entries are not told (see the package comment).
func (h *Homes) Relocate(ctx context.Context, partition, to string, gen int64) (int64, error) {
	hm := h.byName[to]
	if hm == nil {
		return 0, fmt.Errorf("homes: relocate %s: no home %q", storage.QuoteID(partition), to)
	}
	var next int64
	err := h.main().st.Pool().QueryRow(ctx, `UPDATE `+h.dir+` SET home = $2, generation = generation + 1, updated_at_ms = $4
WHERE partition = $1 AND generation = $3 RETURNING generation`, partition, to, gen, time.Now().UnixMilli()).Scan(&next)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, fmt.Errorf("homes: relocate %s from generation %d: %w", storage.QuoteID(partition), gen, ErrGenerationChanged)
	}
	if err != nil {
		return 0, h.unavailable(h.main(), fmt.Errorf("homes: relocate %s: %w", storage.QuoteID(partition), err))
	}
	h.remember(partition, entry{home: hm, gen: next})
	return next, nil
}

// HomeCount is one home's partition count in the directory.
type HomeCount struct {
	Home       string
	Partitions int64
}

// Counts returns every home's partition count from the directory, in
// home order (main first), with homes the directory names that this
// process is not configured with after them.
func (h *Homes) Counts(ctx context.Context) ([]HomeCount, error) {
	rows, err := h.main().st.Pool().Query(ctx, `SELECT home, count(*) FROM `+h.dir+` GROUP BY home ORDER BY home`)
	if err != nil {
		return nil, h.unavailable(h.main(), fmt.Errorf("homes: count partitions: %w", err))
	}
	got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[HomeCount])
	if err != nil {
		return nil, h.unavailable(h.main(), fmt.Errorf("homes: count partitions: %w", err))
	}
	by := map[string]int64{}
	for _, c := range got {
		by[c.Home] = c.Partitions
	}
	out := make([]HomeCount, 0, len(got))
	for _, hm := range h.homes {
		out = append(out, HomeCount{Home: hm.name, Partitions: by[hm.name]})
		delete(by, hm.name)
	}
	for _, c := range got {
		if _, ok := by[c.Home]; ok {
			out = append(out, c)
		}
	}
	return out, nil
}

// HomeStats are one home's counters in this process.
type HomeStats struct {
	Home string
	// Calls counts the calls routed to the home.
	Calls uint64
	// Unreachable counts the calls that failed because the home could not
	// be reached (storage.ErrHomeUnavailable).
	Unreachable uint64
	// MoveRefused counts the writes the home refused because the
	// partition was moving out, moving in or gone (answered 503
	// partition_moving, re-routed on retry).
	MoveRefused uint64
	// MovesIn counts the moves into the home this process made.
	MovesIn uint64
	// AcquiredConns and TotalConns are the home's pool's connections in
	// use and open.
	AcquiredConns, TotalConns int32
}

// Stats returns every home's counters, main first.
func (h *Homes) Stats() []HomeStats {
	out := make([]HomeStats, len(h.homes))
	for i, hm := range h.homes {
		ps := hm.st.Pool().Stat()
		out[i] = HomeStats{Home: hm.name, Calls: hm.calls.Load(), Unreachable: hm.unreachable.Load(),
			MoveRefused: hm.refused.Load(), MovesIn: hm.movesIn.Load(),
			AcquiredConns: ps.AcquiredConns(), TotalConns: ps.TotalConns()}
	}
	return out
}

// reactionID maps home idx's reaction id l to the deployment's: l*K +
// idx, so ids stay unique and increasing within a home, and the home of
// an id is id mod K. Ids are stable while the list of homes is.
func (h *Homes) reactionID(idx int, l int64) int64 { return l*int64(len(h.homes)) + int64(idx) }

// splitReaction maps a deployment reaction id to its home and the home's
// id.
func (h *Homes) splitReaction(id int64) (*home, int64) {
	k := int64(len(h.homes))
	if id < 0 {
		return h.homes[0], id
	}
	return h.homes[id%k], id / k
}
