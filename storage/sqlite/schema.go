package sqlite

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage"
)

// systemDDL creates the system tables. sync_change_scopes is the inverted
// scope index: one entry per (commit, table, "var\x00value") so ScanChanges
// reads only candidate commits.
var systemDDL = []string{
	`CREATE TABLE IF NOT EXISTS sync_meta (
		key TEXT PRIMARY KEY,
		value TEXT NOT NULL
	) WITHOUT ROWID`,
	`CREATE TABLE IF NOT EXISTS sync_partitions (
		partition_id TEXT PRIMARY KEY,
		log_epoch TEXT NOT NULL,
		epoch_required INTEGER NOT NULL DEFAULT 0,
		max_commit_seq INTEGER NOT NULL DEFAULT 0,
		horizon_seq INTEGER NOT NULL DEFAULT 0,
		created_at_ms INTEGER NOT NULL,
		epoch_rotated_at_ms INTEGER
	) WITHOUT ROWID`,
	`CREATE TABLE IF NOT EXISTS sync_commits (
		partition_id TEXT NOT NULL,
		seq INTEGER NOT NULL,
		created_at_ms INTEGER NOT NULL,
		actor_id TEXT NOT NULL,
		client_id TEXT NOT NULL,
		client_commit_id TEXT NOT NULL,
		writer_version INTEGER,
		PRIMARY KEY (partition_id, seq)
	) WITHOUT ROWID`,
	`CREATE TABLE IF NOT EXISTS sync_changes (
		partition_id TEXT NOT NULL,
		commit_seq INTEGER NOT NULL,
		idx INTEGER NOT NULL,
		table_name TEXT NOT NULL,
		row_id TEXT NOT NULL,
		op INTEGER NOT NULL,
		row_version INTEGER NOT NULL,
		scopes TEXT NOT NULL,
		row BLOB,
		PRIMARY KEY (partition_id, commit_seq, idx)
	) WITHOUT ROWID`,
	`CREATE TABLE IF NOT EXISTS sync_change_scopes (
		partition_id TEXT NOT NULL,
		table_name TEXT NOT NULL,
		scope_key TEXT NOT NULL,
		commit_seq INTEGER NOT NULL,
		PRIMARY KEY (partition_id, table_name, scope_key, commit_seq)
	) WITHOUT ROWID`,
	`CREATE TABLE IF NOT EXISTS sync_idempotency (
		partition_id TEXT NOT NULL,
		client_id TEXT NOT NULL,
		client_commit_id TEXT NOT NULL,
		status INTEGER NOT NULL,
		commit_seq INTEGER NOT NULL,
		result BLOB,
		log_seq INTEGER NOT NULL DEFAULT 0,
		PRIMARY KEY (partition_id, client_id, client_commit_id)
	) WITHOUT ROWID`,
	`CREATE TABLE IF NOT EXISTS sync_clients (
		partition_id TEXT NOT NULL,
		client_id TEXT NOT NULL,
		actor_id TEXT NOT NULL,
		subscriptions BLOB,
		cursor INTEGER NOT NULL,
		wire_version INTEGER NOT NULL,
		updated_at_ms INTEGER NOT NULL,
		PRIMARY KEY (partition_id, client_id)
	) WITHOUT ROWID`,
	// sync_tombstones holds the delete tombstones (SPEC §2.2): one per
	// deleted row, replaced by a later delete, removed by an insert over
	// the absent row (PushTx.ClearTombstone) and by pruning at or below
	// the horizon (sync_tombstones_by_seq serves that range delete).
	`CREATE TABLE IF NOT EXISTS sync_tombstones (
		partition_id TEXT NOT NULL,
		table_name TEXT NOT NULL,
		row_id TEXT NOT NULL,
		commit_seq INTEGER NOT NULL,
		PRIMARY KEY (partition_id, table_name, row_id)
	) WITHOUT ROWID`,
	`CREATE INDEX IF NOT EXISTS sync_tombstones_by_seq ON sync_tombstones(partition_id, commit_seq)`,
	checkpointDDL,
	fenceDDL,
	leaseTableDDL, leaseIndexDDL, // lease.go
	reactionsTableDDL, reactionsIndexDDL,
}

func (s *Store) createSystemTables(ctx context.Context) error {
	if err := s.lock(ctx); err != nil {
		return fmt.Errorf("sqlite: create system tables: %w", err)
	}
	defer s.unlock()
	return s.inWriteTx(ctx, "create system tables", func(ctx context.Context) error {
		for _, q := range slices.Concat(systemDDL, blobDDL) {
			if _, err := s.conn.ExecContext(ctx, q); err != nil {
				return err
			}
		}
		if err := s.installFence(ctx); err != nil {
			return err
		}
		return s.installRetention(ctx)
	})
}

// columnVersionsCol is the row tables' column holding each row's column
// versions (storage.ColumnVersions, SPEC §2.2): a nullable BLOB, NULL for
// a row written before it existed. It is read only by the push
// transaction (GetRow, ScanRows); no committed-row read (ScanRows,
// VisitRows, EncodeRows, CopyRowsToImage, AdminRow) selects it, so it
// never reaches a client.
const columnVersionsCol = "_sync_column_versions"

// EnsureSchema creates the row tables of sch, or migrates them by adding
// missing tables, columns and indexes (never dropping anything), in one
// write transaction (BEGIN IMMEDIATE under the write lock), records
// sch.Version, and prepares the push statements. A stored version above
// sch.Version fails with storage.ErrSchemaNewer, and one equal to it with
// a different stored fingerprint (sync_meta's schema_fingerprint) with
// storage.ErrSchemaChanged before any table is touched (a missing
// fingerprint is adopted). Declared indexes are named by
// schema.IndexIdent; one found under its legacy name is rebuilt under the
// new one and the legacy one dropped. Each declared reference column gets
// its index (schema.Table.ReferenceIndexIdent, references.go), also when
// a bump adds the reference to a table that holds rows (the index is
// built in this transaction); reference indexes have no legacy names. A
// column added to an
// existing table is created nullable even when the schema declares it NOT
// NULL (SQLite cannot add a NOT NULL column without a default; existing
// rows read NULL there). A row table created before column versions gains
// the nullable _sync_column_versions column the same way: ADD COLUMN
// changes only the table's definition, no row is rewritten, and the
// existing rows read NULL (legacy: every column at the row's version).
//
// When the stored marker is absent or below sch.Version, the same
// transaction installs every declaration (checkpoint row and fence), so a
// failed bump leaves neither marker nor rows behind. Declarations are
// validated before anything is written. Afterwards (the schema being
// current and memoized as the running version) a checkpoint at
// sch.Version that is neither activated nor in decls makes it fail with
// storage.ErrCheckpointIncomplete. There is no memoized fast path: every
// call checks the checkpoints.
func (s *Store) EnsureSchema(ctx context.Context, sch *schema.Schema, decls ...storage.CheckpointDeclaration) error {
	for _, d := range decls {
		if err := d.Validate(); err != nil {
			return fmt.Errorf("sqlite: ensure schema v%d: %w", sch.Version, err)
		}
	}
	if err := s.lock(ctx); err != nil {
		return fmt.Errorf("sqlite: ensure schema: %w", err)
	}
	defer s.unlock()
	err := s.inWriteTx(ctx, "ensure schema", func(ctx context.Context) error {
		var stored string
		bump := true
		err := s.conn.QueryRowContext(ctx, `SELECT value FROM sync_meta WHERE key = 'schema_version'`).Scan(&stored)
		if err == nil {
			v, perr := strconv.ParseInt(stored, 10, 32)
			if perr != nil {
				return fmt.Errorf("stored schema version %q: %w", stored, perr)
			}
			if v > int64(sch.Version) {
				return fmt.Errorf("stored v%d, running v%d: %w", v, sch.Version, storage.ErrSchemaNewer)
			}
			bump = v < int64(sch.Version)
		} else if !isNoRows(err) {
			return fmt.Errorf("read schema version: %w", err)
		}
		if !bump {
			if err := s.checkFingerprint(ctx, sch); err != nil {
				return err
			}
		}
		for _, t := range sch.Tables {
			if err := s.migrateTable(ctx, t); err != nil {
				return fmt.Errorf("table %s: %w", t.Name, err)
			}
		}
		if !bump {
			return nil
		}
		if _, err = s.conn.ExecContext(ctx, `INSERT INTO sync_meta(key, value) VALUES('schema_version', ?)
			ON CONFLICT(key) DO UPDATE SET value = excluded.value`, strconv.Itoa(int(sch.Version))); err != nil {
			return err
		}
		if err := s.writeFingerprint(ctx, sch); err != nil {
			return err
		}
		now := time.Now().UnixMilli()
		for _, d := range decls {
			if err := declareIn(ctx, s.conn, d, now); err != nil {
				return fmt.Errorf("install checkpoint %s/%s: %w", d.Partition, d.Name, err)
			}
		}
		if len(decls) > 0 {
			s.log.Info("sqlite: installed checkpoint declarations with schema bump", zap.Int32("version", sch.Version), zap.Int("declarations", len(decls)))
		}
		return nil
	})
	if err != nil {
		return err
	}
	sys, err := prepareSys(ctx, s.conn)
	if err != nil {
		return err
	}
	tables := map[string]*tableStmts{}
	for _, t := range sch.Tables {
		ts, err := prepareTable(ctx, s.conn, t)
		if err != nil {
			closeStmts(sys, tables)
			return err
		}
		tables[t.Name] = ts
	}
	s.mu.Lock()
	closeStmts(s.stmts, s.tables)
	s.sch, s.tables, s.stmts = sch, tables, sys
	s.mu.Unlock()
	return s.checkIncomplete(ctx, sch.Version, decls)
}

// checkFingerprint compares sch's fingerprint with the one stored next to
// the (equal) schema version: a different one fails with
// storage.ErrSchemaChanged, a missing one (a database from before
// fingerprints) is adopted.
func (s *Store) checkFingerprint(ctx context.Context, sch *schema.Schema) error {
	var stored string
	err := s.conn.QueryRowContext(ctx, `SELECT value FROM sync_meta WHERE key = 'schema_fingerprint'`).Scan(&stored)
	switch {
	case isNoRows(err):
		s.log.Info("sqlite: adopted the running schema's fingerprint", zap.Int32("version", sch.Version), zap.String("fingerprint", sch.Fingerprint()))
		return s.writeFingerprint(ctx, sch)
	case err != nil:
		return fmt.Errorf("read schema fingerprint: %w", err)
	case stored != sch.Fingerprint():
		return fmt.Errorf("schema v%d: stored fingerprint %s, running %s: %w", sch.Version, stored, sch.Fingerprint(), storage.ErrSchemaChanged)
	}
	return nil
}

func (s *Store) writeFingerprint(ctx context.Context, sch *schema.Schema) error {
	if _, err := s.conn.ExecContext(ctx, `INSERT INTO sync_meta(key, value) VALUES('schema_fingerprint', ?)
		ON CONFLICT(key) DO UPDATE SET value = excluded.value`, sch.Fingerprint()); err != nil {
		return fmt.Errorf("write schema fingerprint: %w", err)
	}
	return nil
}

func (s *Store) migrateTable(ctx context.Context, t *schema.Table) error {
	rows, err := s.conn.QueryContext(ctx, `SELECT name FROM pragma_table_info(?)`, t.Name)
	if err != nil {
		return fmt.Errorf("read columns: %w", err)
	}
	have := map[string]bool{}
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			rows.Close()
			return err
		}
		have[strings.ToLower(name)] = true
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	if len(have) == 0 {
		if _, err := s.conn.ExecContext(ctx, createTableSQL(t)); err != nil {
			return fmt.Errorf("create: %w", err)
		}
		s.log.Info("sqlite: created table", zap.String("table", t.Name))
	} else {
		for _, c := range t.Columns {
			if have[strings.ToLower(c.Name)] {
				continue
			}
			def := quote(c.Name) + " " + affinity(c.Type)
			if _, err := s.conn.ExecContext(ctx, "ALTER TABLE "+quote(t.Name)+" ADD COLUMN "+def); err != nil {
				return fmt.Errorf("add column %s: %w", c.Name, err)
			}
			s.log.Info("sqlite: added column", zap.String("table", t.Name), zap.String("column", c.Name))
		}
		if !have[columnVersionsCol] {
			if _, err := s.conn.ExecContext(ctx, "ALTER TABLE "+quote(t.Name)+" ADD COLUMN "+columnVersionsCol+" BLOB"); err != nil {
				return fmt.Errorf("add column %s: %w", columnVersionsCol, err)
			}
			s.log.Info("sqlite: added column versions", zap.String("table", t.Name), zap.String("column", columnVersionsCol))
		}
	}
	for _, ix := range t.Indexes {
		if _, err := s.conn.ExecContext(ctx, createIndexSQL(t, ix)); err != nil {
			return fmt.Errorf("create index %s: %w", ix.Name, err)
		}
		if err := s.dropLegacyIndex(ctx, t, ix); err != nil {
			return fmt.Errorf("index %s: %w", ix.Name, err)
		}
	}
	return s.ensureReferenceIndexes(ctx, t) // references.go
}

// legacyIndexName is the name indexes were created under before
// schema.IndexIdent: "<table>__<index>", which two tables could share
// (table a__b index c, table a index b__c), the second index then never
// being created.
func legacyIndexName(t *schema.Table, ix schema.Index) string { return t.Name + "__" + ix.Name }

// dropLegacyIndex drops ix's index created under its legacy name, once the
// index under its current name exists (SQLite cannot rename an index, so an
// upgraded database builds each declared index once more). An index of that
// name on another table is that table's own and is left to its migration.
func (s *Store) dropLegacyIndex(ctx context.Context, t *schema.Table, ix schema.Index) error {
	old := legacyIndexName(t, ix)
	var owner string
	err := s.conn.QueryRowContext(ctx, `SELECT tbl_name FROM sqlite_master WHERE type = 'index' AND name = ? COLLATE NOCASE`, old).Scan(&owner)
	if isNoRows(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("look up legacy index %s: %w", old, err)
	}
	if !strings.EqualFold(owner, t.Name) {
		return nil
	}
	if _, err := s.conn.ExecContext(ctx, "DROP INDEX "+quote(old)); err != nil {
		return fmt.Errorf("drop legacy index %s: %w", old, err)
	}
	s.log.Info("sqlite: renamed index", zap.String("table", t.Name), zap.String("index", ix.Name), zap.String("from", old), zap.String("to", t.IndexIdent(ix)))
	return nil
}

// checkIncomplete fails with storage.ErrCheckpointIncomplete when a
// checkpoint at version is neither activated nor in decls.
func (s *Store) checkIncomplete(ctx context.Context, version int32, decls []storage.CheckpointDeclaration) error {
	rows, err := s.readQuery(ctx, `SELECT partition_id, name FROM sync_backfill_checkpoints
		WHERE schema_version = ? AND state <> 'activated' ORDER BY partition_id, name`, version)
	if err != nil {
		return fmt.Errorf("sqlite: ensure schema: read checkpoints: %w", err)
	}
	defer rows.Close()
	var pending []storage.CheckpointRef
	for rows.Next() {
		var r storage.CheckpointRef
		if err := rows.Scan(&r.Partition, &r.Name); err != nil {
			return fmt.Errorf("sqlite: ensure schema: read checkpoints: %w", err)
		}
		pending = append(pending, r)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("sqlite: ensure schema: read checkpoints: %w", err)
	}
	if err := storage.CheckIncomplete(pending, decls); err != nil {
		return fmt.Errorf("sqlite: ensure schema v%d: %w", version, err)
	}
	return nil
}

// quote quotes an SQL identifier.
func quote(id string) string { return `"` + strings.ReplaceAll(id, `"`, `""`) + `"` }

// affinity is the SQLite column type of a schema column type.
func affinity(t ssp2.ColumnType) string {
	switch t {
	case ssp2.TypeInteger, ssp2.TypeBoolean:
		return "INTEGER"
	case ssp2.TypeFloat:
		return "REAL"
	case ssp2.TypeBytes, ssp2.TypeCRDT:
		return "BLOB"
	default: // string, json, blob_ref
		return "TEXT"
	}
}

func columnDef(c ssp2.Column) string {
	d := quote(c.Name) + " " + affinity(c.Type)
	if !c.Nullable {
		d += " NOT NULL"
	}
	return d
}

func createTableSQL(t *schema.Table) string {
	var b strings.Builder
	fmt.Fprintf(&b, "CREATE TABLE %s (\n\tpartition_id TEXT NOT NULL", quote(t.Name))
	for _, c := range t.Columns {
		b.WriteString(",\n\t" + columnDef(c))
	}
	fmt.Fprintf(&b, ",\n\t_sync_version INTEGER NOT NULL,\n\t%s BLOB,\n\tPRIMARY KEY (partition_id, %s)\n) WITHOUT ROWID", columnVersionsCol, quote(t.Columns[t.PK].Name))
	return b.String()
}

func createIndexSQL(t *schema.Table, ix schema.Index) string {
	cols := []string{"partition_id"}
	for _, c := range ix.Columns {
		cols = append(cols, quote(t.Columns[c].Name))
	}
	u := ""
	if ix.Unique {
		u = "UNIQUE "
	}
	return fmt.Sprintf("CREATE %sINDEX IF NOT EXISTS %s ON %s (%s)", u, quote(t.IndexIdent(ix)), quote(t.Name), strings.Join(cols, ", "))
}
