package main

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	_ "modernc.org/sqlite" // the driver the sqlite store uses

	"github.com/synclane/synclane/storage/sqlite"
)

// ceilingCase is the most any engine could do on this disk and CPU: a bare
// loop that upserts the push workload's rows into one SQLite table (same
// driver, WAL, synchronous=FULL), batch rows per transaction, one fsync'd
// COMMIT per batch, no protocol, no log, no idempotency. The push
// workload's single-partition rate is reported as a fraction of it.
func ceilingCase(ctx context.Context, cfg *Config, batch int) (Result, error) {
	batch = max(batch, 1)
	r := Result{Workload: "push", Case: fmt.Sprintf("ceiling: bare SQLite upsert loop, %d rows per transaction", batch), Store: "sqlite", Mode: "bare",
		Params: map[string]any{"batch": batch, "duration": cfg.Duration.String()}}
	dir, err := os.MkdirTemp(cfg.DataDir, "synclane-ceiling-")
	if err != nil {
		return r, err
	}
	defer os.RemoveAll(dir)
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "ceiling.db")+fmt.Sprintf("?_journal_mode=WAL&_synchronous=FULL&_busy_timeout=5000&_pragma=wal_autocheckpoint(%d)", sqlite.DefaultWALAutocheckpointPages))
	if err != nil {
		return r, err
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	if _, err := db.ExecContext(ctx, `CREATE TABLE todos(id TEXT PRIMARY KEY, list_id TEXT NOT NULL, title TEXT NOT NULL, done INTEGER NOT NULL,
		position INTEGER, updated_at INTEGER, _version INTEGER NOT NULL)`); err != nil {
		return r, err
	}
	stmtSQL := `INSERT INTO todos(id, list_id, title, done, position, updated_at, _version) VALUES(?,?,?,?,?,?,1)
		ON CONFLICT(id) DO UPDATE SET title=excluded.title, done=excluded.done, position=excluded.position, updated_at=excluded.updated_at, _version=_version+1`
	ph := newPhase(cfg.Warmup, cfg.Duration, cfg.MaxOps)
	var rows int64
	var lat Hist
	for n := int64(0); ph.next() && ctx.Err() == nil; {
		t0 := time.Now()
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return r, err
		}
		st, err := tx.PrepareContext(ctx, stmtSQL)
		if err != nil {
			_ = tx.Rollback()
			return r, err
		}
		for i := 0; i < batch; i++ {
			w := n % int64(cfg.Writers)
			id := "w" + strconv.FormatInt(w, 10) + "-" + strconv.FormatInt((n/int64(cfg.Writers))%rowsPerWriter, 10)
			if _, err := st.ExecContext(ctx, id, listID(int(w)), "todo "+id+" #"+strconv.FormatInt(n, 10), n%2, n, time.Now().UnixMilli()); err != nil {
				_ = tx.Rollback()
				return r, err
			}
			n++
		}
		_ = st.Close()
		if err := tx.Commit(); err != nil {
			return r, err
		}
		if ph.measuring(t0) {
			rows += int64(batch)
			lat.Record(time.Since(t0))
		}
	}
	elapsed := time.Since(ph.measureFrom)
	r.add("commits/s", "1/s", float64(rows)/elapsed.Seconds())
	r.add("commits", "", float64(rows))
	r.add("transaction p99", "ms", ms(lat.Quantile(0.99)))
	return r, nil
}
