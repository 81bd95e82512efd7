package rawread

import (
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	_ "modernc.org/sqlite"
)

// fixture writes a WAL database with rows of every storage class through
// the database/sql driver, and keeps that handle open (as the store's
// writer is) while the test reads.
func fixture(t *testing.T, rows int) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "db.sqlite")
	db, err := sql.Open("sqlite", "file:"+path+"?_journal_mode=WAL")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if _, err := db.Exec(`CREATE TABLE t(id TEXT PRIMARY KEY, n INTEGER, f REAL, b BLOB, s TEXT) WITHOUT ROWID`); err != nil {
		t.Fatal(err)
	}
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < rows; i++ {
		if _, err := tx.Exec(`INSERT INTO t VALUES(?,?,?,?,?)`, fmt.Sprintf("r%05d", i), i-1, float64(i)/2, []byte{byte(i), 0}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestReadsEveryStorageClass(t *testing.T) {
	path := fixture(t, 3)
	// Without and with the memory map (the fixture is checkpointed into
	// the database file, so the mapped run reads its pages through it).
	for _, mmap := range []int64{0, 1 << 20} {
		t.Run(fmt.Sprintf("mmap=%d", mmap), func(t *testing.T) { readsEveryStorageClass(t, path, mmap) })
	}
}

func readsEveryStorageClass(t *testing.T, path string, mmap int64) {
	c, err := Open(path, time.Second, 1024, mmap)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	pragma, err := c.Prepare(`PRAGMA mmap_size`)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := pragma.Step(); err != nil || !ok {
		t.Fatalf("PRAGMA mmap_size: %v, %v", ok, err)
	}
	if got := pragma.Int64(0); got != mmap {
		t.Fatalf("mmap_size = %d, want %d", got, mmap)
	}
	pragma.Reset()
	st, err := c.Prepare(`SELECT id, n, f, b, s, 'ü' FROM t WHERE id > ? AND n >= ? ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	if st.Columns() != 6 {
		t.Fatalf("Columns = %d, want 6", st.Columns())
	}
	if err := st.Bind("r00000", int64(-1)); err != nil {
		t.Fatal(err)
	}
	var got []string
	for {
		ok, err := st.Step()
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		types := []int32{Text, Integer, Float, Blob, Null, Text}
		for i, want := range types {
			if ty := st.Type(i); ty != want {
				t.Fatalf("column %d type = %d, want %d", i, ty, want)
			}
		}
		got = append(got, fmt.Sprintf("%s/%d/%g/%x/%v/%s", st.Bytes(0), st.Int64(1), st.Float64(2), st.Bytes(3), st.Bytes(4) == nil, st.Bytes(5)))
	}
	want := "r00001/0/0.5/0100/true/ü,r00002/1/1/0200/true/ü"
	if strings.Join(got, ",") != want {
		t.Fatalf("rows = %s, want %s", strings.Join(got, ","), want)
	}
	// The cached statement is handed out again, reset and unbound.
	again, err := c.Prepare(`SELECT id, n, f, b, s, 'ü' FROM t WHERE id > ? AND n >= ? ORDER BY id`)
	if err != nil || again != st {
		t.Fatalf("Prepare again = %p, %v; want the cached %p", again, err, st)
	}
}

func TestReadOnly(t *testing.T) {
	c, err := Open(fixture(t, 1), time.Second, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	st, err := c.Prepare(`DELETE FROM t`)
	if err == nil {
		_, err = st.Step()
	}
	var se *Error
	if !errors.As(err, &se) {
		t.Fatalf("a DELETE on a read-only connection = %v, want an *Error", err)
	}
}

func TestErrors(t *testing.T) {
	c, err := Open(fixture(t, 1), time.Second, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Prepare(`SELECT nope FROM t`); err == nil || !strings.Contains(err.Error(), "no such column") {
		t.Fatalf("Prepare of a bad statement = %v, want SQLite's message", err)
	}
	st, err := c.Prepare(`SELECT ?`)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Bind(1.5); err == nil {
		t.Fatal("Bind took a float64, which it does not support")
	}
	if _, err := Open(filepath.Join(t.TempDir(), "missing", "db"), time.Second, 0, 0); err == nil {
		t.Fatal("Open of a missing file succeeded")
	}
}

// TestInterruptStopsARunningStatement: Interrupt between two steps of an
// active statement makes the next step fail with ErrInterrupted.
func TestInterruptStopsARunningStatement(t *testing.T) {
	c, err := Open(fixture(t, 500), time.Second, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	st, err := c.Prepare(`SELECT id FROM t ORDER BY n DESC`) // sorts: steps keep working
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := st.Step(); !ok || err != nil {
		t.Fatalf("first step = %v, %v", ok, err)
	}
	c.Interrupt()
	var stepErr error
	for i := 0; i < 1000 && stepErr == nil; i++ {
		var ok bool
		if ok, stepErr = st.Step(); !ok && stepErr == nil {
			break
		}
	}
	if !errors.Is(stepErr, ErrInterrupted) {
		t.Fatalf("steps after Interrupt = %v, want ErrInterrupted", stepErr)
	}
}

func TestStatementCacheIsBounded(t *testing.T) {
	c, err := Open(fixture(t, 1), time.Second, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	first, err := c.Prepare(`SELECT 0`)
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= MaxStmts; i++ {
		if _, err := c.Prepare(fmt.Sprintf("SELECT %d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if len(c.stmts) != MaxStmts || len(c.order) != MaxStmts {
		t.Fatalf("cache holds %d statements (%d in order), want %d", len(c.stmts), len(c.order), MaxStmts)
	}
	again, err := c.Prepare(`SELECT 0`)
	if err != nil {
		t.Fatal(err)
	}
	if again == first {
		t.Fatal("the oldest statement was not evicted")
	}
	if ok, err := again.Step(); !ok || err != nil || again.Int64(0) != 0 {
		t.Fatalf("re-prepared statement step = %v, %v", ok, err)
	}
}

// TestImageWriterAttachesTheSourceReadOnly: the image writer copies rows
// from the attached source with one INSERT ... SELECT, and cannot write to
// the source.
func TestImageWriterAttachesTheSourceReadOnly(t *testing.T) {
	src := fixture(t, 50)
	img := filepath.Join(t.TempDir(), "image.db")
	c, err := OpenImageWriter(img, src, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, q := range []string{`CREATE TABLE main.t(id TEXT PRIMARY KEY, n INTEGER)`, `INSERT INTO main.t SELECT id, n FROM src.t WHERE n >= ?`} {
		st, err := c.Prepare(q)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(q, "?") {
			if err := st.Bind(int64(9)); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := st.Step(); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		st.Reset()
	}
	if n := c.Changes(); n != 40 { // n = i-1 for i in 0..49: 9..48
		t.Fatalf("copied %d rows, want 40", n)
	}
	st, err := c.Prepare(`DELETE FROM src.t`)
	if err == nil {
		_, err = st.Step()
	}
	if err == nil {
		t.Fatal("a DELETE on the attached source succeeded; it must be read-only")
	}
}
