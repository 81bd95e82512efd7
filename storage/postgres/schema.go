package postgres

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"

	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage"
)

// storageVersion is the layout version of the sync_ tables.
const storageVersion = 1

// columnVersionsCol is the row tables' column holding each row's column
// versions (storage.ColumnVersions, SPEC §2.2): a nullable bytea, NULL for
// a row written before it existed. Only the push transaction's reads
// select it (tableSQL.txSelectList).
const columnVersionsCol = "_sync_column_versions"

// EnsureSchema creates or migrates the system tables and one row table per
// table of sch. It adds missing tables, columns (a NOT NULL column added to
// a table with rows is filled with its type's zero value) and indexes, and
// never drops anything. A stored schema version above sch.Version fails
// with storage.ErrSchemaNewer and changes nothing; one equal to it with a
// different stored fingerprint (sync_schema_meta.schema_fingerprint) fails
// with storage.ErrSchemaChanged before any row table is touched (a missing
// fingerprint is adopted). Indexes are named by schema.IndexIdent; one
// found under its legacy name is renamed. Each declared reference column
// gets its index (schema.Table.ReferenceIndexIdent, references.go), also
// when a bump adds the reference to a table that holds rows: the bump
// transaction builds it (CREATE INDEX, not CONCURRENTLY: the table's
// writers wait, as they wait for the bump). Serialization failures
// and deadlocks are retried.
//
// It runs in up to two transactions, each serialized against other
// processes' EnsureSchema by a transaction-level advisory lock keyed by the
// schema name:
//
//  1. The setup transaction creates the system tables (adding the
//     columns later layouts added, such as the partition registry's
//     ownership columns), the writer fence (function and trigger) and,
//     when the stored marker equals sch.Version, checks the row tables'
//     physical layout.
//  2. When the marker is absent or lower, the bump transaction's first
//     statement is LOCK TABLE sync_partitions IN EXCLUSIVE MODE: writers
//     (whose first statement is SELECT … FOR UPDATE on their partition
//     row, or an INSERT into it) wait from then on, while plain reads go
//     on. It then takes the advisory lock, re-reads the marker, migrates
//     the row tables, raises the marker and installs every declaration
//     (checkpoint row and fence) and commits all of it at once. A writer
//     that waited then appends under the new fence, and an old one is
//     rejected by the trigger.
//
// Lock order: the bump takes the partitions lock before the advisory lock;
// the setup transaction takes the advisory lock but does not otherwise lock
// sync_partitions (CREATE TABLE IF NOT EXISTS of an existing table takes no
// lock on it), and every writer takes its partition row lock before
// touching any other sync table. So no cycle can form: while the bump holds
// the partitions lock no writer holds locks on other sync tables that a
// setup transaction could wait for. The one exception, the one-time
// addition of the registry's ownership columns, keeps the order: that
// setup transaction takes the ACCESS EXCLUSIVE lock on sync_partitions
// first, before the advisory lock and any other sync table.
//
// Afterwards (the schema being current and memoized as the running
// version, which every commit append writes as its writer_version), a
// checkpoint at sch.Version that is neither activated nor in decls makes
// it fail with storage.ErrCheckpointIncomplete.
func (s *Store) EnsureSchema(ctx context.Context, sch *schema.Schema, decls ...storage.CheckpointDeclaration) error {
	s.mu.RLock()
	closed := s.closed
	s.mu.RUnlock()
	if closed {
		return errClosed
	}
	for _, d := range decls {
		if err := d.Validate(); err != nil {
			return fmt.Errorf("postgres: EnsureSchema v%d: %w", sch.Version, err)
		}
	}
	tables := make(map[string]*tableSQL, len(sch.Tables))
	for _, t := range sch.Tables {
		tables[t.Name] = newTableSQL(s.schema, t)
	}
	var bump bool
	err := retry(ctx, "EnsureSchema", func() error {
		return pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
			var err error
			bump, err = s.setup(ctx, tx, sch, tables)
			return err
		})
	})
	if err != nil {
		return err
	}
	if bump {
		err := retry(ctx, "EnsureSchema", func() error {
			return pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
				return s.bump(ctx, tx, sch, tables, decls)
			})
		})
		if err != nil {
			return err
		}
	}
	s.mu.Lock()
	s.tables = tables
	s.ensured = true
	s.running = sch.Version
	s.mu.Unlock()
	return s.checkIncomplete(ctx, sch.Version, decls)
}

func (s *Store) advisoryLock(ctx context.Context, tx pgx.Tx) error {
	var schemaArg any
	if s.schema != "" {
		schemaArg = s.schema
	}
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('synclane.ensure_schema:' || coalesce($1::text, current_schema()::text), 0))`, schemaArg); err != nil {
		return fmt.Errorf("advisory lock: %w", err)
	}
	return nil
}

// readMarker returns the stored schema version (0 when absent), failing
// with storage.ErrSchemaNewer when it is above running's, and, when it
// equals it, with storage.ErrSchemaChanged when the stored fingerprint
// differs from running's (a missing one, from before fingerprints, is
// adopted: written in tx).
func (s *Store) readMarker(ctx context.Context, tx pgx.Tx, running *schema.Schema) (int32, error) {
	var stored int32
	var fp *string
	err := tx.QueryRow(ctx, `SELECT schema_version, schema_fingerprint FROM `+s.q.meta+` WHERE id = 1`).Scan(&stored, &fp)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return 0, nil
	case err != nil:
		return 0, fmt.Errorf("read schema version: %w", err)
	case stored > running.Version:
		return stored, fmt.Errorf("postgres: stored schema version %d, running %d: %w", stored, running.Version, storage.ErrSchemaNewer)
	case stored < running.Version:
		return stored, nil
	case fp == nil:
		if _, err := tx.Exec(ctx, `UPDATE `+s.q.meta+` SET schema_fingerprint = $1 WHERE id = 1`, running.Fingerprint()); err != nil {
			return stored, fmt.Errorf("adopt schema fingerprint: %w", err)
		}
		s.log.Info("postgres: adopted the running schema's fingerprint", zap.Int32("version", running.Version), zap.String("fingerprint", running.Fingerprint()))
	case *fp != running.Fingerprint():
		return stored, fmt.Errorf("postgres: schema v%d: stored fingerprint %s, running %s: %w", stored, *fp, running.Fingerprint(), storage.ErrSchemaChanged)
	}
	return stored, nil
}

// ensureFingerprintColumn adds the meta table's schema_fingerprint column
// to a database created before it (checked in the catalog first, so a
// current database takes no lock on the table).
func (s *Store) ensureFingerprintColumn(ctx context.Context, tx pgx.Tx) error {
	var have bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_attribute
WHERE attrelid = to_regclass($1) AND attname = 'schema_fingerprint' AND NOT attisdropped)`, s.q.meta).Scan(&have); err != nil {
		return err
	}
	if have {
		return nil
	}
	_, err := tx.Exec(ctx, `ALTER TABLE `+s.q.meta+` ADD COLUMN IF NOT EXISTS schema_fingerprint text`)
	return err
}

// setup is the first transaction of EnsureSchema; it reports whether the
// marker needs a bump.
func (s *Store) setup(ctx context.Context, tx pgx.Tx, sch *schema.Schema, tables map[string]*tableSQL) (bool, error) {
	if err := s.lockForOwnership(ctx, tx); err != nil { // ownership.go: before the advisory lock
		return false, fmt.Errorf("ownership: %w", err)
	}
	if err := s.advisoryLock(ctx, tx); err != nil {
		return false, err
	}
	if s.q.schemaIdent != "" {
		if _, err := tx.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+s.q.schemaIdent); err != nil {
			return false, fmt.Errorf("create schema: %w", err)
		}
	}
	for _, stmt := range slices.Concat(s.q.systemDDL(), s.q.blobDDL()) {
		if _, err := tx.Exec(ctx, stmt); err != nil {
			return false, fmt.Errorf("system tables: %w", err)
		}
	}
	if err := s.ensureOwnership(ctx, tx); err != nil { // ownership.go: first, under the partitions lock
		return false, fmt.Errorf("ownership: %w", err)
	}
	if err := s.ensureFence(ctx, tx); err != nil {
		return false, fmt.Errorf("writer fence: %w", err)
	}
	if err := s.ensureRetention(ctx, tx); err != nil {
		return false, fmt.Errorf("retention: %w", err)
	}
	if err := s.ensureTombstones(ctx, tx); err != nil { // tombstones.go
		return false, fmt.Errorf("tombstones: %w", err)
	}
	if err := s.ensureLeases(ctx, tx); err != nil { // lease.go
		return false, fmt.Errorf("leases: %w", err)
	}
	if err := s.ensureReactions(ctx, tx); err != nil {
		return false, fmt.Errorf("reactions: %w", err)
	}
	if err := s.ensureFingerprintColumn(ctx, tx); err != nil {
		return false, fmt.Errorf("schema fingerprint: %w", err)
	}
	stored, err := s.readMarker(ctx, tx, sch)
	if err != nil {
		return false, err
	}
	if stored < sch.Version {
		return true, nil
	}
	for _, t := range sch.Tables {
		if err := ensureTable(ctx, tx, tables[t.Name]); err != nil {
			return false, fmt.Errorf("table %q: %w", t.Name, err)
		}
	}
	return false, nil
}

// bump is the marker-raising transaction (see EnsureSchema).
func (s *Store) bump(ctx context.Context, tx pgx.Tx, sch *schema.Schema, tables map[string]*tableSQL, decls []storage.CheckpointDeclaration) error {
	if _, err := tx.Exec(ctx, `LOCK TABLE `+s.q.partitions+` IN EXCLUSIVE MODE`); err != nil {
		return fmt.Errorf("lock partitions: %w", err)
	}
	if err := s.advisoryLock(ctx, tx); err != nil {
		return err
	}
	stored, err := s.readMarker(ctx, tx, sch)
	if err != nil {
		return err
	}
	for _, t := range sch.Tables {
		if err := ensureTable(ctx, tx, tables[t.Name]); err != nil {
			return fmt.Errorf("table %q: %w", t.Name, err)
		}
	}
	if stored == sch.Version {
		return nil // another process bumped meanwhile: install nothing
	}
	_, err = tx.Exec(ctx, `INSERT INTO `+s.q.meta+` (id, schema_version, storage_version, schema_fingerprint) VALUES (1, $1, $2, $3)
ON CONFLICT (id) DO UPDATE SET schema_version = GREATEST(`+s.q.meta+`.schema_version, EXCLUDED.schema_version),
storage_version = EXCLUDED.storage_version, schema_fingerprint = EXCLUDED.schema_fingerprint`, sch.Version, storageVersion, sch.Fingerprint())
	if err != nil {
		return fmt.Errorf("write schema version: %w", err)
	}
	now := time.Now().UnixMilli()
	for _, d := range decls {
		if err := s.declareIn(ctx, tx, d, now); err != nil {
			return fmt.Errorf("install checkpoint %s/%s: %w", d.Partition, d.Name, err)
		}
	}
	if h := s.bumpHook; h != nil {
		h(ctx)
	}
	return nil
}

// ensureTable creates the row table or adds its missing columns (the
// schema's, and _sync_column_versions to a table created before it) and
// indexes. Existing objects are detected from the catalog first so a
// no-op EnsureSchema takes no table locks.
func ensureTable(ctx context.Context, tx pgx.Tx, ts *tableSQL) error {
	var exists bool
	if err := tx.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, ts.regclass).Scan(&exists); err != nil {
		return err
	}
	var stmts []string
	if !exists {
		stmts = append(stmts, ts.createTable())
	} else {
		rows, err := tx.Query(ctx, `SELECT attname FROM pg_attribute
WHERE attrelid = to_regclass($1) AND attnum > 0 AND NOT attisdropped`, ts.regclass)
		if err != nil {
			return err
		}
		have, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		haveSet := map[string]bool{}
		for _, c := range have {
			haveSet[c] = true
		}
		for i, c := range ts.t.Columns {
			if !haveSet[c.Name] {
				stmts = append(stmts, ts.addColumn(i)...)
			}
		}
		if !haveSet[columnVersionsCol] {
			// Nullable without a default: a catalog change only, no row
			// is rewritten; the existing rows read NULL (legacy).
			stmts = append(stmts, fmt.Sprintf("ALTER TABLE %s ADD COLUMN %s bytea", ts.ident, columnVersionsCol))
		}
	}
	haveIdx := map[string]bool{}
	if exists {
		rows, err := tx.Query(ctx, `SELECT c.relname::text FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
WHERE i.indrelid = to_regclass($1)`, ts.regclass)
		if err != nil {
			return err
		}
		names, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		for _, n := range names {
			haveIdx[n] = true
		}
	}
	for name, w := range ts.wantedIndexes() {
		switch {
		case haveIdx[name]:
		case haveIdx[w.legacy]:
			// Created before schema.IndexIdent: renamed in place (the
			// legacy name is looked up on this table only).
			stmts = append(stmts, fmt.Sprintf("ALTER INDEX %s RENAME TO %s",
				qualify(ts.schemaName, w.legacy), pgx.Identifier{name}.Sanitize()))
		default:
			stmts = append(stmts, w.create)
		}
	}
	for _, stmt := range stmts {
		if _, err := tx.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("%s: %w", stmt, err)
		}
	}
	return nil
}

// checkIncomplete fails with storage.ErrCheckpointIncomplete when a
// checkpoint at version is neither activated nor in decls.
func (s *Store) checkIncomplete(ctx context.Context, version int32, decls []storage.CheckpointDeclaration) error {
	var refs []storage.CheckpointRef
	err := retry(ctx, "EnsureSchema", func() error {
		var err error
		refs, err = s.pending(ctx, s.pool, version)
		return err
	})
	if err != nil {
		return err
	}
	if err := storage.CheckIncomplete(refs, decls); err != nil {
		return fmt.Errorf("postgres: EnsureSchema v%d: %w", version, err)
	}
	return nil
}

// pending lists the checkpoints at version that are not activated, ordered
// by (partition, name).
func (s *Store) pending(ctx context.Context, q queryer, version int32) ([]storage.CheckpointRef, error) {
	rows, err := q.Query(ctx, `SELECT partition, name FROM `+s.q.checkpoints+`
WHERE schema_version = $1 AND state <> 'activated' ORDER BY partition, name`, version)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (storage.CheckpointRef, error) {
		var c storage.CheckpointRef
		err := r.Scan(&c.Partition, &c.Name)
		return c, err
	})
}

// systemDDL returns the statements creating the system tables (storage
// layout version 1). Each is idempotent.
func (q sysSQL) systemDDL() []string {
	r := strings.NewReplacer(
		"{meta}", q.meta, "{partitions}", q.partitions, "{commits}", q.commits,
		"{changes}", q.changes, "{change_scopes}", q.changeScopes,
		"{idempotency}", q.idempotency, "{clients}", q.clients,
		"{checkpoints}", q.checkpoints, "{fence}", q.fence,
	)
	stmts := []string{
		`CREATE TABLE IF NOT EXISTS {meta} (
	id integer PRIMARY KEY CHECK (id = 1),
	schema_version integer NOT NULL,
	storage_version integer NOT NULL,
	schema_fingerprint text
)`,
		`CREATE TABLE IF NOT EXISTS {partitions} (
	partition text COLLATE "C" PRIMARY KEY,
	log_epoch text NOT NULL,
	epoch_required boolean NOT NULL DEFAULT false,
	max_commit_seq bigint NOT NULL DEFAULT 0,
	horizon_seq bigint NOT NULL DEFAULT 0,
	created_at_ms bigint NOT NULL,
	owner text NOT NULL DEFAULT '',
	owner_generation bigint NOT NULL DEFAULT 0
)`,
		`CREATE TABLE IF NOT EXISTS {commits} (
	partition text COLLATE "C" NOT NULL,
	seq bigint NOT NULL,
	created_at_ms bigint NOT NULL,
	actor_id text NOT NULL,
	client_id text NOT NULL,
	client_commit_id text NOT NULL,
	PRIMARY KEY (partition, seq)
)`,
		`CREATE TABLE IF NOT EXISTS {changes} (
	partition text COLLATE "C" NOT NULL,
	seq bigint NOT NULL,
	idx integer NOT NULL,
	table_name text COLLATE "C" NOT NULL,
	row_id text NOT NULL,
	op smallint NOT NULL,
	row_version bigint NOT NULL,
	scopes text NOT NULL,
	row_data bytea,
	PRIMARY KEY (partition, seq, idx)
)`,
		`CREATE INDEX IF NOT EXISTS sync_changes_by_table ON {changes} (partition, table_name, seq, idx)`,
		`CREATE TABLE IF NOT EXISTS {change_scopes} (
	partition text COLLATE "C" NOT NULL,
	table_name text COLLATE "C" NOT NULL,
	var text COLLATE "C" NOT NULL,
	value text COLLATE "C" NOT NULL,
	seq bigint NOT NULL,
	idx integer NOT NULL,
	PRIMARY KEY (partition, table_name, var, value, seq, idx)
)`,
		`CREATE TABLE IF NOT EXISTS {idempotency} (
	partition text COLLATE "C" NOT NULL,
	client_id text COLLATE "C" NOT NULL,
	client_commit_id text COLLATE "C" NOT NULL,
	status smallint NOT NULL,
	commit_seq bigint NOT NULL,
	result bytea,
	log_seq bigint NOT NULL DEFAULT 0,
	PRIMARY KEY (partition, client_id, client_commit_id)
)`,
		`CREATE TABLE IF NOT EXISTS {clients} (
	partition text COLLATE "C" NOT NULL,
	client_id text COLLATE "C" NOT NULL,
	actor_id text NOT NULL,
	subscriptions text,
	cursor bigint NOT NULL,
	wire_version integer NOT NULL,
	updated_at_ms bigint NOT NULL,
	PRIMARY KEY (partition, client_id)
)`,
		`CREATE TABLE IF NOT EXISTS {checkpoints} (
	partition text COLLATE "C" NOT NULL,
	name text COLLATE "C" NOT NULL,
	schema_version integer NOT NULL,
	state text NOT NULL CHECK (state IN ('declared', 'backfilling', 'activated')),
	watermark bigint NOT NULL DEFAULT 0,
	owner_epoch bigint NOT NULL DEFAULT 0,
	observed_rows bigint NOT NULL DEFAULT 0,
	updated_at_ms bigint NOT NULL,
	PRIMARY KEY (partition, name)
)`,
		`CREATE TABLE IF NOT EXISTS {fence} (
	partition text COLLATE "C" PRIMARY KEY,
	required_writer_version integer NOT NULL
)`,
	}
	for i := range stmts {
		stmts[i] = r.Replace(stmts[i])
	}
	return stmts
}

// pgType maps a row-codec type to its PostgreSQL column type. json is text
// (not jsonb) so the raw text is kept byte for byte.
func pgType(t ssp2.ColumnType) string {
	switch t {
	case ssp2.TypeInteger:
		return "bigint"
	case ssp2.TypeFloat:
		return "double precision"
	case ssp2.TypeBoolean:
		return "boolean"
	case ssp2.TypeBytes, ssp2.TypeCRDT:
		return "bytea"
	default: // string, json, blob_ref
		return "text"
	}
}

// zeroLiteral is the value existing rows get when a migration adds a NOT
// NULL column to a table that already holds rows.
func zeroLiteral(t ssp2.ColumnType) string {
	switch t {
	case ssp2.TypeInteger, ssp2.TypeFloat:
		return "0"
	case ssp2.TypeBoolean:
		return "false"
	case ssp2.TypeBytes, ssp2.TypeCRDT:
		return `'\x'::bytea`
	case ssp2.TypeJSON:
		return `'null'`
	default:
		return `''`
	}
}

// columnDef is the DDL of column i in CREATE TABLE.
func (ts *tableSQL) columnDef(i int) string {
	c := ts.t.Columns[i]
	def := ts.cols[i] + " " + pgType(c.Type)
	if i == ts.t.PK && pgType(c.Type) == "text" { // byte order (bigint and boolean have no collation)
		def += ` COLLATE "C"`
	}
	if !c.Nullable {
		def += " NOT NULL"
	}
	return def
}

// createTable is the CREATE TABLE statement of a table that does not exist.
func (ts *tableSQL) createTable() string {
	defs := []string{`partition_id text COLLATE "C" NOT NULL`}
	for i := range ts.cols {
		defs = append(defs, ts.columnDef(i))
	}
	defs = append(defs, "_sync_version bigint NOT NULL", columnVersionsCol+" bytea",
		fmt.Sprintf("PRIMARY KEY (partition_id, %s)", ts.cols[ts.t.PK]))
	return fmt.Sprintf("CREATE TABLE %s (\n\t%s\n)", ts.ident, strings.Join(defs, ",\n\t"))
}

// addColumn returns the statements adding column i to an existing table.
// A NOT NULL column is filled with its type's zero value in existing rows.
func (ts *tableSQL) addColumn(i int) []string {
	c := ts.t.Columns[i]
	if c.Nullable {
		return []string{fmt.Sprintf("ALTER TABLE %s ADD COLUMN %s", ts.ident, ts.columnDef(i))}
	}
	return []string{
		fmt.Sprintf("ALTER TABLE %s ADD COLUMN %s DEFAULT %s", ts.ident, ts.columnDef(i), zeroLiteral(c.Type)),
		fmt.Sprintf("ALTER TABLE %s ALTER COLUMN %s DROP DEFAULT", ts.ident, ts.cols[i]),
	}
}

// indexName derives an index name of at most 63 bytes: the row tables'
// index names before schema.IndexIdent (see legacy in wantedIndexes), and
// still the snapshot tables' long names.
func indexName(table, kind, name string) string {
	n := table + "__" + kind + "_" + name
	if len(n) <= 63 {
		return n
	}
	sum := sha256.Sum256([]byte(n))
	return n[:50] + "_" + hex.EncodeToString(sum[:6])
}

// wantedIndex is one index a row table needs.
type wantedIndex struct {
	create string // CREATE INDEX statement
	legacy string // its name before schema.IndexIdent
}

// wantedIndexes returns index name (schema.IndexIdent) -> index for the
// table's declared indexes (on (partition_id, cols...)), one index per
// scope column (on (partition_id, col, pk)) for scoped bootstrap scans and
// one per reference column (on (partition_id, col, pk), references.go)
// for PushTx.ScanByColumn.
func (ts *tableSQL) wantedIndexes() map[string]wantedIndex {
	out := map[string]wantedIndex{}
	for _, ix := range ts.t.Indexes {
		name := ts.t.IndexIdent(ix)
		cols := []string{"partition_id"}
		for _, c := range ix.Columns {
			cols = append(cols, ts.cols[c])
		}
		unique := ""
		if ix.Unique {
			unique = "UNIQUE "
		}
		out[name] = wantedIndex{legacy: indexName(ts.t.Name, "i", ix.Name), create: fmt.Sprintf("CREATE %sINDEX %s ON %s (%s)", unique,
			pgx.Identifier{name}.Sanitize(), ts.ident, strings.Join(cols, ", "))}
	}
	seen := map[int]bool{}
	for _, sv := range ts.t.Scopes {
		if seen[sv.Column] || sv.Column == ts.t.PK {
			continue
		}
		seen[sv.Column] = true
		name := ts.t.ScopeIndexIdent(sv.Column)
		out[name] = wantedIndex{legacy: indexName(ts.t.Name, "s", ts.t.Columns[sv.Column].Name), create: fmt.Sprintf("CREATE INDEX %s ON %s (partition_id, %s, %s)",
			pgx.Identifier{name}.Sanitize(), ts.ident, ts.cols[sv.Column], ts.cols[ts.t.PK])}
	}
	maps.Copy(out, ts.referenceIndexes()) // references.go
	return out
}
