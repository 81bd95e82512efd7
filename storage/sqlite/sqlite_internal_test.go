package sqlite

import (
	"encoding/json"
	"errors"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/synclane/synclane/storage"
	"github.com/synclane/synclane/storage/storagetest"
)

// TestDurabilitySettings checks the writer runs WAL with synchronous=FULL
// and that data and the schema version survive a reopen.
func TestDurabilitySettings(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "sync.db")
	s, err := Open(ctx, path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var mode string
	var sync int
	if err := s.conn.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil || mode != "wal" {
		t.Fatalf("journal_mode = %q, %v", mode, err)
	}
	if err := s.conn.QueryRowContext(ctx, "PRAGMA synchronous").Scan(&sync); err != nil || sync != 2 {
		t.Fatalf("synchronous = %d, %v; want 2 (FULL)", sync, err)
	}
	if err := s.EnsureSchema(ctx, storagetest.MustParse(storagetest.SchemaV2)); err != nil {
		t.Fatal(err)
	}
	p, err := s.TouchPartition(ctx, "p", 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(ctx, path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.EnsureSchema(ctx, storagetest.MustParse(storagetest.SchemaV1)); !errors.Is(err, storage.ErrSchemaNewer) {
		t.Fatalf("EnsureSchema(v1) after reopen of v2 database: %v", err)
	}
	if err := s.EnsureSchema(ctx, storagetest.MustParse(storagetest.SchemaV2)); err != nil {
		t.Fatal(err)
	}
	if got, err := s.ReadPartition(ctx, "p"); err != nil || got != p {
		t.Fatalf("partition after reopen = %+v, %v; want %+v", got, err, p)
	}
}

// TestWALAutocheckpointSetting: the writer checkpoints the WAL at the
// configured size: DefaultWALAutocheckpointPages by default, an explicit
// value, or SQLite's own default when negative.
func TestWALAutocheckpointSetting(t *testing.T) {
	for _, c := range []struct {
		opt, want int
	}{{0, DefaultWALAutocheckpointPages}, {2500, 2500}, {-1, 1000}} {
		s, err := Open(t.Context(), filepath.Join(t.TempDir(), "sync.db"), Options{WALAutocheckpointPages: c.opt})
		if err != nil {
			t.Fatal(err)
		}
		var got int
		err = s.conn.QueryRowContext(t.Context(), "PRAGMA wal_autocheckpoint").Scan(&got)
		s.Close()
		if err != nil || got != c.want {
			t.Fatalf("option %d: wal_autocheckpoint = %d, %v; want %d", c.opt, got, err, c.want)
		}
	}
}

// queryPlan returns the EXPLAIN QUERY PLAN details of q, joined by "; ".
func queryPlan(t *testing.T, s *Store, q string, args ...any) string {
	t.Helper()
	rows, err := s.rdb.QueryContext(t.Context(), "EXPLAIN QUERY PLAN "+q, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var id, parent, notused int
		var detail string
		if err := rows.Scan(&id, &parent, &notused, &detail); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, detail)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return strings.Join(plan, "; ")
}

// TestScanChangesUsesScopeIndex checks the candidate query ScanChanges
// runs is answered from sync_change_scopes' primary key, never by scanning
// sync_change_scopes or sync_changes (the only SCAN allowed is the one of
// the bound JSON array of values), for a few values as for many, and that
// loading the candidate commits searches sync_changes by primary key.
func TestScanChangesUsesScopeIndex(t *testing.T) {
	ctx := t.Context()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "sync.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	many := make([]string, 40_000)
	for i := range many {
		many[i] = "v" + strconv.Itoa(i)
	}
	manyJSON, err := json.Marshal(many)
	if err != nil {
		t.Fatal(err)
	}
	for _, vals := range []string{`["a","b"]`, string(manyJSON)} {
		joined := queryPlan(t, s, candScopesSQL, "p", "items", "project\x00", vals, 0, 10, 10)
		if !strings.Contains(joined, "SEARCH sync_change_scopes USING PRIMARY KEY (partition_id=? AND table_name=? AND scope_key=?") ||
			strings.Contains(strings.ReplaceAll(joined, "SCAN json_each VIRTUAL TABLE", ""), "SCAN ") {
			t.Fatalf("candidate query plan does not use the scope index: %s", joined)
		}
	}
	for _, vals := range []string{`["a","b"]`, string(manyJSON)} {
		// The scope pin: a seek per value, never a scan of the index.
		joined := queryPlan(t, s, latestScopeSQL, "p", "items", vals, "project\x00", 10)
		if !strings.Contains(joined, "SEARCH s USING PRIMARY KEY (partition_id=? AND table_name=? AND scope_key=? AND commit_seq<?)") ||
			strings.Contains(strings.ReplaceAll(joined, "SCAN j VIRTUAL TABLE", ""), "SCAN ") {
			t.Fatalf("scope pin query plan does not seek the scope index: %s", joined)
		}
	}
	joined := queryPlan(t, s, loadCommitsSQL, "p", "items", "[1,2,3]")
	if !strings.Contains(joined, "SEARCH ch USING PRIMARY KEY (partition_id=? AND commit_seq=?)") ||
		strings.Contains(strings.ReplaceAll(joined, "SCAN json_each VIRTUAL TABLE", ""), "SCAN ") {
		t.Fatalf("commit load plan does not search sync_changes by primary key: %s", joined)
	}
}

// TestScanRowsUsesPrimaryKey checks the statement ScanRows builds, with
// its JSON-array scope filters, searches the row table by an index (never
// scans it; the only SCAN allowed is the one of the bound JSON array).
func TestScanRowsUsesPrimaryKey(t *testing.T) {
	ctx := t.Context()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "sync.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.EnsureSchema(ctx, storagetest.MustParse(storagetest.SchemaV1)); err != nil {
		t.Fatal(err)
	}
	_, tables, _, err := s.current()
	if err != nil {
		t.Fatal(err)
	}
	for _, scopes := range []map[string][]string{
		{"project": {"p1", "p2"}},
		{"project": {"p1"}, "owner": {"1", "2"}},
	} {
		q, args, none, err := rowsQuery(tables["items"], "p", storage.RowQuery{Scopes: scopes, AfterRowID: new("a"), Limit: 10})
		if err != nil || none {
			t.Fatalf("rowsQuery: none %v, err %v", none, err)
		}
		if n := strings.Count(q, "?"); n != len(args) || n > 5 {
			t.Fatalf("rowsQuery: %d placeholders for %d args: %s", n, len(args), q)
		}
		joined := queryPlan(t, s, q, args...)
		if !strings.Contains(joined, "SEARCH items USING") || strings.Contains(strings.ReplaceAll(joined, "SCAN json_each VIRTUAL TABLE", ""), "SCAN ") {
			t.Fatalf("ScanRows plan scans: %s", joined)
		}
		t.Logf("%v: %s", scopes, joined)
	}
}
