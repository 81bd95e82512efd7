package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/synclane/synclane/engine/schema"
	"github.com/synclane/synclane/storage"
)

// storageVersion is the layout version of the sync_ tables.
const storageVersion = 1

// EnsureSchema creates or migrates the system tables and one row table per
// table of sch in a single transaction, after taking a transaction-level
// advisory lock keyed by the schema name so processes starting together do
// not race on DDL. It adds missing tables, columns (a NOT NULL column added
// to a table with rows is filled with its type's zero value) and indexes,
// and never drops anything. A stored schema version above sch.Version fails
// with storage.ErrSchemaNewer and changes nothing. Serialization failures and
// deadlocks are retried.
func (s *Store) EnsureSchema(ctx context.Context, sch *schema.Schema) error {
	s.mu.RLock()
	closed := s.closed
	s.mu.RUnlock()
	if closed {
		return errClosed
	}
	tables := make(map[string]*tableSQL, len(sch.Tables))
	for _, t := range sch.Tables {
		tables[t.Name] = newTableSQL(s.schema, t)
	}
	err := retry(ctx, "EnsureSchema", func() error {
		return pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
			return s.migrate(ctx, tx, sch, tables)
		})
	})
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.tables = tables
	s.ensured = true
	s.mu.Unlock()
	return nil
}

func (s *Store) migrate(ctx context.Context, tx pgx.Tx, sch *schema.Schema, tables map[string]*tableSQL) error {
	var schemaArg any
	if s.schema != "" {
		schemaArg = s.schema
	}
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('synclane.ensure_schema:' || coalesce($1::text, current_schema()::text), 0))`, schemaArg); err != nil {
		return fmt.Errorf("advisory lock: %w", err)
	}
	if s.q.schemaIdent != "" {
		if _, err := tx.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+s.q.schemaIdent); err != nil {
			return fmt.Errorf("create schema: %w", err)
		}
	}
	for _, stmt := range s.q.systemDDL() {
		if _, err := tx.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("system tables: %w", err)
		}
	}
	var stored int32
	err := tx.QueryRow(ctx, `SELECT schema_version FROM `+s.q.meta+` WHERE id = 1`).Scan(&stored)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return fmt.Errorf("read schema version: %w", err)
	case stored > sch.Version:
		return fmt.Errorf("postgres: stored schema version %d, running %d: %w", stored, sch.Version, storage.ErrSchemaNewer)
	}
	for _, t := range sch.Tables {
		if err := ensureTable(ctx, tx, tables[t.Name]); err != nil {
			return fmt.Errorf("table %q: %w", t.Name, err)
		}
	}
	_, err = tx.Exec(ctx, `INSERT INTO `+s.q.meta+` (id, schema_version, storage_version) VALUES (1, $1, $2)
ON CONFLICT (id) DO UPDATE SET schema_version = GREATEST(`+s.q.meta+`.schema_version, EXCLUDED.schema_version),
storage_version = EXCLUDED.storage_version`, sch.Version, storageVersion)
	if err != nil {
		return fmt.Errorf("write schema version: %w", err)
	}
	return nil
}

// ensureTable creates the row table or adds its missing columns and
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
	for name, stmt := range ts.wantedIndexes() {
		if !haveIdx[name] {
			stmts = append(stmts, stmt)
		}
	}
	for _, stmt := range stmts {
		if _, err := tx.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("%s: %w", stmt, err)
		}
	}
	return nil
}
