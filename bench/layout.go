package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"time"

	_ "modernc.org/sqlite" // the driver the sqlite store uses

	"github.com/synclane/synclane/storage/sqlite"
)

// A logLayout is what one commit of the push workload writes on bare
// SQLite under some commit-log layout, without synclane: no protocol, no
// actor, one connection. Timing the loops side by side says how far any
// engine on a layout can get towards the ceiling (the row upsert alone).
// The statements are shapes, not synclane's exact SQL.
type logLayout struct {
	name  string
	ddl   []string
	steps []layoutStep // run in order for every commit
}

// layoutStep is one statement of a commit: its SQL, prepared once per
// transaction, and how a commit runs it.
type layoutStep struct {
	sql string
	run func(ctx context.Context, st *sql.Stmt, c layoutCommit) error
}

// layoutCommit is the n-th commit of the loop: one upsert of writer
// n % writers's row, by that writer's client.
type layoutCommit struct {
	n                     int64
	id, list, title, c, k string
}

const (
	layoutDataDDL = `CREATE TABLE todos(id TEXT PRIMARY KEY, list_id TEXT NOT NULL, title TEXT NOT NULL, done INTEGER NOT NULL,
		position INTEGER, updated_at INTEGER, _version INTEGER NOT NULL)`
	layoutLogDDL    = `CREATE TABLE log(p TEXT, seq INTEGER, created INTEGER, actor TEXT, c TEXT, k TEXT, changes BLOB, PRIMARY KEY(p, seq)) WITHOUT ROWID`
	layoutLogIdem   = `CREATE UNIQUE INDEX log_idem ON log(p, c, k)`
	layoutScopesDDL = `CREATE TABLE scopes(p TEXT, t TEXT, sk TEXT, seq INTEGER, PRIMARY KEY(p, t, sk, seq)) WITHOUT ROWID`
)

// Layout names used by the push workload.
const (
	layoutCeiling  = "ceiling"
	layoutSynclane = "synclane"
)

// The steps the layouts share.
var (
	stepUpsert = layoutStep{`INSERT INTO todos(id, list_id, title, done, position, updated_at, _version) VALUES(?,?,?,?,?,?,1)
		ON CONFLICT(id) DO UPDATE SET title=excluded.title, done=excluded.done, position=excluded.position, updated_at=excluded.updated_at, _version=_version+1`,
		func(ctx context.Context, st *sql.Stmt, c layoutCommit) error {
			_, err := st.ExecContext(ctx, c.id, c.list, c.title, c.n%2, c.n, time.Now().UnixMilli())
			return err
		}}
	stepReadRow = layoutStep{`SELECT _version FROM todos WHERE id = ?`,
		func(ctx context.Context, st *sql.Stmt, c layoutCommit) error {
			var v int64
			if err := st.QueryRowContext(ctx, c.id).Scan(&v); err != nil && !errors.Is(err, sql.ErrNoRows) {
				return fmt.Errorf("row read: %w", err)
			}
			return nil
		}}
	stepAppendLog = layoutStep{`INSERT INTO log(p, seq, created, actor, c, k, changes) VALUES('p', ?, ?, 'a', ?, ?, ?)`,
		func(ctx context.Context, st *sql.Stmt, c layoutCommit) error {
			_, err := st.ExecContext(ctx, c.n, c.n, c.c, c.k, []byte(c.id+c.title+c.title+c.title))
			return err
		}}
	stepIndexScope = layoutStep{`INSERT OR IGNORE INTO scopes(p, t, sk, seq) VALUES('p', 'todos', ?, ?)`,
		func(ctx context.Context, st *sql.Stmt, c layoutCommit) error {
			_, err := st.ExecContext(ctx, "list_id\x00"+c.list, c.n)
			return err
		}}
)

// idemMissStep looks the commit's idempotency key up with q (a query of
// p, c, k), which must find nothing: every commit of the loop is new.
func idemMissStep(q string) layoutStep {
	return layoutStep{q, func(ctx context.Context, st *sql.Stmt, c layoutCommit) error {
		var seq int64
		if err := st.QueryRowContext(ctx, "p", c.c, c.k).Scan(&seq); !errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("idempotency lookup found %d: %v", seq, err)
		}
		return nil
	}}
}

// logLayouts lists the layouts BenchmarkLogLayout compares:
//   - ceiling: the row upsert alone;
//   - synclane: what storage/sqlite does per commit (idempotency and row
//     reads, the upsert, a commit, a change, a scope-index and an
//     idempotency record);
//   - log+idem, log+scopes: one append-only log record carrying the commit
//     and its changes, plus either the index idempotency lookups need
//     (client and commit id) or the inverted scope index;
//   - log: the row read, the upsert and the log record only (no
//     idempotency lookup: not a valid SSP2 server; the bound of an
//     append-only layout).
func logLayouts() []logLayout {
	return []logLayout{
		{name: layoutCeiling, ddl: []string{layoutDataDDL}, steps: []layoutStep{stepUpsert}},
		{name: layoutSynclane,
			ddl: []string{layoutDataDDL,
				`CREATE TABLE commits(p TEXT, seq INTEGER, created INTEGER, actor TEXT, c TEXT, k TEXT, PRIMARY KEY(p, seq)) WITHOUT ROWID`,
				`CREATE TABLE changes(p TEXT, seq INTEGER, idx INTEGER, t TEXT, rid TEXT, op INTEGER, ver INTEGER, scopes TEXT, row BLOB, PRIMARY KEY(p, seq, idx)) WITHOUT ROWID`,
				layoutScopesDDL,
				`CREATE TABLE idem(p TEXT, c TEXT, k TEXT, status INTEGER, seq INTEGER, PRIMARY KEY(p, c, k)) WITHOUT ROWID`},
			steps: []layoutStep{
				idemMissStep(`SELECT seq FROM idem WHERE p = ? AND c = ? AND k = ?`), stepReadRow, stepUpsert,
				{`INSERT INTO commits(p, seq, created, actor, c, k) VALUES('p', ?, ?, 'a', ?, ?)`,
					func(ctx context.Context, st *sql.Stmt, c layoutCommit) error {
						_, err := st.ExecContext(ctx, c.n, c.n, c.c, c.k)
						return err
					}},
				{`INSERT INTO changes(p, seq, idx, t, rid, op, ver, scopes, row) VALUES('p', ?, 0, 'todos', ?, 1, ?, ?, ?)`,
					func(ctx context.Context, st *sql.Stmt, c layoutCommit) error {
						_, err := st.ExecContext(ctx, c.n, c.id, c.n, "list_id:"+c.list, []byte(c.title+c.title+c.title))
						return err
					}},
				stepIndexScope,
				{`INSERT INTO idem(p, c, k, status, seq) VALUES('p', ?, ?, 1, ?)`,
					func(ctx context.Context, st *sql.Stmt, c layoutCommit) error {
						_, err := st.ExecContext(ctx, c.c, c.k, c.n)
						return err
					}},
			}},
		{name: "log+idem", ddl: []string{layoutDataDDL, layoutLogDDL, layoutLogIdem},
			steps: []layoutStep{idemMissStep(`SELECT seq FROM log WHERE p = ? AND c = ? AND k = ?`), stepReadRow, stepUpsert, stepAppendLog}},
		{name: "log+scopes", ddl: []string{layoutDataDDL, layoutLogDDL, layoutScopesDDL},
			steps: []layoutStep{stepReadRow, stepUpsert, stepAppendLog, stepIndexScope}},
		{name: "log", ddl: []string{layoutDataDDL, layoutLogDDL},
			steps: []layoutStep{stepReadRow, stepUpsert, stepAppendLog}},
	}
}

// layoutNamed returns the layout called name; it panics on an unknown
// name (a programming error).
func layoutNamed(name string) logLayout {
	for _, l := range logLayouts() {
		if l.name == name {
			return l
		}
	}
	panic("bench: unknown log layout " + name)
}

// runLayout creates a fresh database at path with the sqlite store's
// settings (WAL, synchronous=FULL, the same checkpoint interval, one
// connection) and commits batch commits per transaction while more
// returns true, calling done after each COMMIT with its commits and the
// time the transaction took since began.
func runLayout(ctx context.Context, path string, l logLayout, writers, batch int,
	more func() bool, done func(commits int, began time.Time)) error {
	db, err := sql.Open("sqlite", "file:"+path+
		fmt.Sprintf("?_journal_mode=WAL&_synchronous=FULL&_busy_timeout=5000&_pragma=wal_autocheckpoint(%d)", sqlite.DefaultWALAutocheckpointPages))
	if err != nil {
		return err
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	for _, q := range l.ddl {
		if _, err := db.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	batch = max(batch, 1)
	st := make([]*sql.Stmt, len(l.steps))
	for n := int64(0); more() && ctx.Err() == nil; {
		began := time.Now()
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		for i, step := range l.steps {
			if st[i], err = tx.PrepareContext(ctx, step.sql); err != nil {
				_ = tx.Rollback()
				return err
			}
		}
		for i := 0; i < batch; i++ {
			w := n % int64(writers)
			id := "w" + strconv.FormatInt(w, 10) + "-" + strconv.FormatInt((n/int64(writers))%rowsPerWriter, 10)
			c := layoutCommit{n: n, id: id, list: listID(int(w)), title: "todo " + id + " #" + strconv.FormatInt(n, 10),
				c: "client" + strconv.FormatInt(w, 10), k: "c" + strconv.FormatInt(n, 10)}
			for i, step := range l.steps {
				if err := step.run(ctx, st[i], c); err != nil {
					_ = tx.Rollback()
					return fmt.Errorf("layout %s, commit %d: %w", l.name, n, err)
				}
			}
			n++
		}
		for _, s := range st {
			_ = s.Close()
		}
		if err := tx.Commit(); err != nil {
			return err
		}
		done(batch, began)
	}
	return nil
}
