package postgres_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage"
	"github.com/synclane/synclane/storage/postgres"
	"github.com/synclane/synclane/storage/postgres/pgtest"
)

// The log tables a pull reads (and whose statistics its plan could follow).
var logTables = []string{"sync_partitions", "sync_commits", "sync_changes", "sync_change_scopes", "sync_idempotency"}

// An incremental pull's pages cost about what they return whatever the
// log tables' statistics say (issue 48: pages of two commits took
// 0.6-0.8 s before ANALYZE, 9-33 ms after). One partition holds 20,000
// changes in 40 commits of 500; autovacuum is off on the log tables, so
// only this test decides what statistics exist. Pages of 1,000 changes
// (two commits) are read from cursor 0 to the end, for the scope shapes
// ScanChanges builds (one value; several values, some without changes; a
// second scope var; no scope), with no statistics, with statistics taken
// when the tables held another partition's log only (the partition and
// its values then look absent), and after ANALYZE. The slowest page with
// no or skewed statistics must be at most 4× the slowest after ANALYZE,
// plus 20 ms.
func TestIncrementalPullPlanIgnoresStatistics(t *testing.T) {
	shapes := []struct {
		name   string
		scopes map[string][]string
	}{
		{"one value", map[string][]string{"project": {"p1"}}},
		{"several values", map[string][]string{"project": {"p0", "p1", "p2", "p1"}}},
		{"two vars", map[string][]string{"project": {"p1"}, "team": {"t0", "t1"}}},
		{"no scope", map[string][]string{}},
	}
	type variant struct {
		name string
		// prepare runs on the fresh schema before the partition's log is
		// written.
		prepare func(t *testing.T, s *postgres.Store, schema string)
	}
	variants := []variant{
		{"no statistics", func(*testing.T, *postgres.Store, string) {}},
		{"skewed statistics", func(t *testing.T, s *postgres.Store, schema string) {
			// Another partition's log, with other values, is all ANALYZE sees.
			writeLog(t, s, "other", 40, 50, "o", "u")
			analyze(t, s, schema)
		}},
	}
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			schema := pgtest.NewSchema(t)
			s := pgtest.OpenSchema(t, schema, postgres.Options{MaxConns: 4})
			if err := s.EnsureSchema(t.Context(), mustSchema(t)); err != nil {
				t.Fatal(err)
			}
			for _, tb := range logTables {
				exec(t, s, fmt.Sprintf(`ALTER TABLE %s SET (autovacuum_enabled = false, toast.autovacuum_enabled = false)`, pgx.Identifier{schema, tb}.Sanitize()))
			}
			v.prepare(t, s, schema)
			writeLog(t, s, "p", 40, 500, "p1", "t1")
			before := map[string]time.Duration{}
			for _, sh := range shapes {
				before[sh.name] = slowestPage(t, s, sh.scopes)
			}
			explainPage(t, s, "before ANALYZE", shapes[0].scopes)
			analyze(t, s, schema)
			for _, sh := range shapes {
				after := slowestPage(t, s, sh.scopes)
				t.Logf("%s: slowest page %v with %s, %v after ANALYZE", sh.name, before[sh.name].Round(time.Microsecond), v.name, after.Round(time.Microsecond))
				if limit := 4*after + 20*time.Millisecond; before[sh.name] > limit {
					t.Errorf("%s: slowest page %v with %s, want <= %v (4x the slowest after ANALYZE, %v, + 20ms)", sh.name, before[sh.name], v.name, limit, after)
				}
			}
			explainPage(t, s, "after ANALYZE", shapes[0].scopes)
		})
	}
}

// writeLog appends commits commits of perCommit changes of table docs to
// partition's log, every change with scope values project=project and
// team=team.
func writeLog(t *testing.T, s *postgres.Store, partition string, commits, perCommit int, project, team string) {
	t.Helper()
	ctx := t.Context()
	data := []byte(strings.Repeat("x", 80))
	for c := 1; c <= commits; c++ {
		tx, err := s.BeginPush(ctx, partition)
		if err != nil {
			t.Fatal(err)
		}
		chs := make([]storage.ChangeRecord, perCommit)
		for i := range chs {
			chs[i] = storage.ChangeRecord{Table: "docs", RowID: fmt.Sprintf("r%06d", (c-1)*perCommit+i), Op: ssp2.OpUpsert, RowVersion: 1,
				Scopes: map[string]string{"project": project, "team": team}, Row: data}
		}
		seq := tx.Partition().MaxCommitSeq + 1
		if err := tx.AppendCommit(ctx, storage.CommitRecord{Seq: seq, CreatedAtMs: seq, ActorID: "a", ClientID: "c", ClientCommitID: fmt.Sprint(seq), Changes: chs}); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

func exec(t *testing.T, s *postgres.Store, sql string) {
	t.Helper()
	if _, err := s.Pool().Exec(t.Context(), sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func analyze(t *testing.T, s *postgres.Store, schema string) {
	t.Helper()
	for _, tb := range logTables {
		exec(t, s, "ANALYZE "+pgx.Identifier{schema, tb}.Sanitize())
	}
}

// slowestPage reads partition p's log from cursor 0 to its end in pages
// of 1,000 changes, checks what every page returns (two whole commits in
// order), and returns the slowest page. The read is repeated three times
// and each page's fastest time is kept, so a hiccup of a shared machine
// is not taken for a plan.
func slowestPage(t *testing.T, s *postgres.Store, scopes map[string][]string) time.Duration {
	t.Helper()
	const pages = 20
	best := make([]time.Duration, pages)
	for pass := range 3 {
		cursor := int64(0)
		for page := range pages {
			start := time.Now()
			scan, err := s.ScanChanges(t.Context(), "p", storage.ChangeQuery{Table: "docs", Scopes: scopes, AfterSeq: cursor, UpToSeq: 40, LimitChanges: 1000})
			took := time.Since(start)
			if err != nil {
				t.Fatal(err)
			}
			if len(scan.Commits) != 2 || scan.Commits[0].Seq != cursor+1 || scan.Commits[1].Seq != cursor+2 ||
				len(scan.Commits[0].Changes) != 500 || len(scan.Commits[1].Changes) != 500 || scan.Truncated != (page < pages-1) {
				t.Fatalf("page %d from cursor %d: %d commits (truncated %v), want seqs %d and %d with 500 changes each", page, cursor, len(scan.Commits), scan.Truncated, cursor+1, cursor+2)
			}
			cursor += 2
			if pass == 0 || took < best[page] {
				best[page] = took
			}
		}
	}
	return slices.Max(best)
}

// explainPage logs the plan of the statement of a page from cursor 0
// (EXPLAIN (ANALYZE, BUFFERS), shown by go test -v).
func explainPage(t *testing.T, s *postgres.Store, when string, scopes map[string][]string) {
	t.Helper()
	sql, args := postgres.ChangeRangeSQL(s, "p", storage.ChangeQuery{Table: "docs", Scopes: scopes}, 0, 40, 1000)
	rows, err := s.Pool().Query(t.Context(), "EXPLAIN (ANALYZE, BUFFERS) "+sql, args...)
	if err != nil {
		t.Fatal(err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("plan of a page from cursor 0, %s:\n%s", when, strings.Join(lines, "\n"))
}
