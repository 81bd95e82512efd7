package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/synclane/synclane/storage/sqlite"
)

// BenchmarkLogLayout measures what a commit log costs on bare SQLite,
// without synclane: the ceiling case's loop (the push workload's rows, 64
// writers, 32 single-upsert commits per fsync'd transaction, same driver
// and settings) with, per commit, the log writes of a layout added. It
// tells how far any engine on a given layout can get towards the ceiling:
//
//	go test -run='^$' -bench=LogLayout -benchtime=60000x ./bench/
//
// Layouts (statement shapes, not synclane's exact SQL):
//   - ceiling: the row upsert alone;
//   - synclane: what storage/sqlite writes per commit (idempotency and row
//     reads, the upsert, a commit, a change, a scope-index and an
//     idempotency record);
//   - log+idem, log+scopes: one append-only log record carrying the
//     commit and its changes, plus either an index for idempotency lookups
//     (keyed by client and commit id) or the inverted scope index;
//   - log: the row read, the upsert and the log record only (no
//     idempotency lookup, no scope index: not a valid SSP2 server, the
//     bound of an append-only layout).
func BenchmarkLogLayout(b *testing.B) {
	const dataDDL = `CREATE TABLE todos(id TEXT PRIMARY KEY, list_id TEXT NOT NULL, title TEXT NOT NULL, done INTEGER NOT NULL,
		position INTEGER, updated_at INTEGER, _version INTEGER NOT NULL)`
	const upsert = `INSERT INTO todos(id, list_id, title, done, position, updated_at, _version) VALUES(?,?,?,?,?,?,1)
		ON CONFLICT(id) DO UPDATE SET title=excluded.title, done=excluded.done, position=excluded.position, updated_at=excluded.updated_at, _version=_version+1`
	const (
		logDDL    = `CREATE TABLE log(p TEXT, seq INTEGER, created INTEGER, actor TEXT, c TEXT, k TEXT, changes BLOB, PRIMARY KEY(p, seq)) WITHOUT ROWID`
		logIdem   = `CREATE UNIQUE INDEX log_idem ON log(p, c, k)`
		scopesDDL = `CREATE TABLE scopes(p TEXT, t TEXT, sk TEXT, seq INTEGER, PRIMARY KEY(p, t, sk, seq)) WITHOUT ROWID`
	)
	type commit struct {
		n                     int64
		id, list, title, c, k string
	}
	// Statement indexes shared by the step functions below.
	const (
		sUpsert = iota
		sRowRead
		sIdemRead
		sLog
		sScope
		sCommit
		sChange
		sIdem
	)
	idemMiss := func(ctx context.Context, st []*sql.Stmt, c commit) error {
		var x int64
		if err := st[sIdemRead].QueryRowContext(ctx, "p", c.c, c.k).Scan(&x); !errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("idempotency lookup: %v", err)
		}
		return nil
	}
	rowWrite := func(ctx context.Context, st []*sql.Stmt, c commit) error {
		var x int64
		if err := st[sRowRead].QueryRowContext(ctx, c.id).Scan(&x); err != nil && !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		_, err := st[sUpsert].ExecContext(ctx, c.id, c.list, c.title, c.n%2, c.n, c.n)
		return err
	}
	logWrite := func(ctx context.Context, st []*sql.Stmt, c commit) error {
		_, err := st[sLog].ExecContext(ctx, c.n, c.n, c.c, c.k, []byte(c.id+c.title+c.title+c.title))
		return err
	}
	scopeWrite := func(ctx context.Context, st []*sql.Stmt, c commit) error {
		_, err := st[sScope].ExecContext(ctx, "list_id\x00"+c.list, c.n)
		return err
	}
	stmts := map[int]string{
		sUpsert:   upsert,
		sRowRead:  `SELECT _version FROM todos WHERE id = ?`,
		sIdemRead: `SELECT seq FROM log WHERE p = ? AND c = ? AND k = ?`,
		sLog:      `INSERT INTO log(p, seq, created, actor, c, k, changes) VALUES('p', ?, ?, 'a', ?, ?, ?)`,
		sScope:    `INSERT OR IGNORE INTO scopes(p, t, sk, seq) VALUES('p', 'todos', ?, ?)`,
		sCommit:   `INSERT INTO commits(p, seq, created, actor, c, k) VALUES('p', ?, ?, 'a', ?, ?)`,
		sChange:   `INSERT INTO changes(p, seq, idx, t, rid, op, ver, scopes, row) VALUES('p', ?, 0, 'todos', ?, 1, ?, ?, ?)`,
		sIdem:     `INSERT INTO idem(p, c, k, status, seq) VALUES('p', ?, ?, 1, ?)`,
	}
	layouts := []struct {
		name  string
		ddl   []string
		uses  []int
		steps func(ctx context.Context, st []*sql.Stmt, c commit) error
	}{
		{"ceiling", []string{dataDDL}, []int{sUpsert}, func(ctx context.Context, st []*sql.Stmt, c commit) error {
			_, err := st[sUpsert].ExecContext(ctx, c.id, c.list, c.title, c.n%2, c.n, c.n)
			return err
		}},
		{"synclane", []string{dataDDL,
			`CREATE TABLE commits(p TEXT, seq INTEGER, created INTEGER, actor TEXT, c TEXT, k TEXT, PRIMARY KEY(p, seq)) WITHOUT ROWID`,
			`CREATE TABLE changes(p TEXT, seq INTEGER, idx INTEGER, t TEXT, rid TEXT, op INTEGER, ver INTEGER, scopes TEXT, row BLOB, PRIMARY KEY(p, seq, idx)) WITHOUT ROWID`,
			scopesDDL,
			`CREATE TABLE idem(p TEXT, c TEXT, k TEXT, status INTEGER, seq INTEGER, PRIMARY KEY(p, c, k)) WITHOUT ROWID`},
			[]int{sUpsert, sRowRead, sScope, sCommit, sChange, sIdem, -1},
			func(ctx context.Context, st []*sql.Stmt, c commit) error {
				var x int64
				if err := st[len(st)-1].QueryRowContext(ctx, "p", c.c, c.k).Scan(&x); !errors.Is(err, sql.ErrNoRows) {
					return fmt.Errorf("idempotency lookup: %v", err)
				}
				if err := rowWrite(ctx, st, c); err != nil {
					return err
				}
				if _, err := st[sCommit].ExecContext(ctx, c.n, c.n, c.c, c.k); err != nil {
					return err
				}
				if _, err := st[sChange].ExecContext(ctx, c.n, c.id, c.n, "list_id:"+c.list, []byte(c.title+c.title+c.title)); err != nil {
					return err
				}
				if err := scopeWrite(ctx, st, c); err != nil {
					return err
				}
				_, err := st[sIdem].ExecContext(ctx, c.c, c.k, c.n)
				return err
			}},
		{"log+idem", []string{dataDDL, logDDL, logIdem}, []int{sUpsert, sRowRead, sIdemRead, sLog},
			func(ctx context.Context, st []*sql.Stmt, c commit) error {
				if err := idemMiss(ctx, st, c); err != nil {
					return err
				}
				if err := rowWrite(ctx, st, c); err != nil {
					return err
				}
				return logWrite(ctx, st, c)
			}},
		{"log+scopes", []string{dataDDL, logDDL, scopesDDL}, []int{sUpsert, sRowRead, sLog, sScope},
			func(ctx context.Context, st []*sql.Stmt, c commit) error {
				if err := rowWrite(ctx, st, c); err != nil {
					return err
				}
				if err := logWrite(ctx, st, c); err != nil {
					return err
				}
				return scopeWrite(ctx, st, c)
			}},
		{"log", []string{dataDDL, logDDL}, []int{sUpsert, sRowRead, sLog},
			func(ctx context.Context, st []*sql.Stmt, c commit) error {
				if err := rowWrite(ctx, st, c); err != nil {
					return err
				}
				return logWrite(ctx, st, c)
			}},
	}
	const writers, batch = 64, 32
	for _, l := range layouts {
		b.Run(l.name, func(b *testing.B) {
			ctx := context.Background()
			db, err := sql.Open("sqlite", "file:"+filepath.Join(b.TempDir(), "layout.db")+
				fmt.Sprintf("?_journal_mode=WAL&_synchronous=FULL&_busy_timeout=5000&_pragma=wal_autocheckpoint(%d)", sqlite.DefaultWALAutocheckpointPages))
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			db.SetMaxOpenConns(1)
			for _, q := range l.ddl {
				if _, err := db.ExecContext(ctx, q); err != nil {
					b.Fatalf("%s: %v", q, err)
				}
			}
			b.ResetTimer()
			for n := int64(0); n < int64(b.N); {
				tx, err := db.BeginTx(ctx, nil)
				if err != nil {
					b.Fatal(err)
				}
				st := make([]*sql.Stmt, sIdem+2)
				for _, i := range l.uses {
					q := stmts[i]
					if i < 0 { // the synclane layout's idempotency lookup
						i, q = len(st)-1, `SELECT seq FROM idem WHERE p = ? AND c = ? AND k = ?`
					}
					if st[i], err = tx.PrepareContext(ctx, q); err != nil {
						b.Fatal(err)
					}
				}
				for i := 0; i < batch && n < int64(b.N); i++ {
					w := n % writers
					id := "w" + strconv.FormatInt(w, 10) + "-" + strconv.FormatInt((n/writers)%rowsPerWriter, 10)
					c := commit{n: n, id: id, list: listID(int(w)), title: "todo " + id + " #" + strconv.FormatInt(n, 10),
						c: "client" + strconv.FormatInt(w, 10), k: "c" + strconv.FormatInt(n, 10)}
					if err := l.steps(ctx, st, c); err != nil {
						b.Fatal(err)
					}
					n++
				}
				for _, s := range st {
					if s != nil {
						s.Close()
					}
				}
				if err := tx.Commit(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "commits/s")
		})
	}
}
