// Package rawread reads an SQLite database through SQLite's C API (the
// transpiled library of modernc.org/sqlite, the same one the database/sql
// driver runs), so that a scan can copy column bytes straight from SQLite's
// memory into an output buffer. Through database/sql every TEXT value
// becomes a fresh Go string and every integer a boxed value: for a page of
// 10,000 six-column rows that is 60,000 allocations, which is most of a
// bootstrap page's CPU and of the garbage it leaves.
//
// A Conn is read-only (opened SQLITE_OPEN_READONLY and with query_only
// set) and is not safe for concurrent use: one goroutine uses it at a time.
// Interrupt is the exception and may be called from any goroutine. Byte
// views returned by Stmt.Bytes are valid only until the next Step, Reset or
// Close of that statement.
package rawread

import (
	"errors"
	"fmt"
	"net/url"
	"time"
	"unsafe"

	"modernc.org/libc"
	sqlite3 "modernc.org/sqlite/lib"
)

// Column storage classes reported by Stmt.Type.
const (
	Integer = sqlite3.SQLITE_INTEGER
	Float   = sqlite3.SQLITE_FLOAT
	Text    = sqlite3.SQLITE_TEXT
	Blob    = sqlite3.SQLITE_BLOB
	Null    = sqlite3.SQLITE_NULL
)

// MaxStmts bounds the statements a Conn keeps prepared; the least recently
// added is finalized past it.
const MaxStmts = 32

// ErrInterrupted reports a statement stopped by Interrupt.
var ErrInterrupted = errors.New("rawread: interrupted")

// Error is an SQLite result code with SQLite's message.
type Error struct {
	Code int
	Msg  string
}

func (e *Error) Error() string { return fmt.Sprintf("sqlite: %s (%d)", e.Msg, e.Code) }

// Conn is one read-only SQLite connection.
type Conn struct {
	tls   *libc.TLS
	db    uintptr
	stmts map[string]*Stmt
	order []string
}

// Open opens path (a file name, not a URI) read-only. busy is how long a
// read waits for a lock (WAL recovery by another connection) before
// SQLITE_BUSY; cacheKiB sizes the page cache (0 keeps SQLite's default);
// mmapBytes > 0 reads up to that many bytes of the database file through a
// memory map (PRAGMA mmap_size) instead of copying each page into the page
// cache (pages still in the write-ahead log are read as before).
func Open(path string, busy time.Duration, cacheKiB int, mmapBytes int64) (*Conn, error) {
	c, err := open(path, sqlite3.SQLITE_OPEN_READONLY, busy)
	if err != nil {
		return nil, err
	}
	pragmas := "PRAGMA query_only = 1"
	if cacheKiB > 0 {
		pragmas += fmt.Sprintf("; PRAGMA cache_size = -%d", cacheKiB)
	}
	if mmapBytes > 0 {
		pragmas += fmt.Sprintf("; PRAGMA mmap_size = %d", mmapBytes)
	}
	if err := c.exec(pragmas); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("rawread: open %s: %w", path, err)
	}
	return c, nil
}

// open opens path with flags (NOMUTEX added: a Conn is used by one
// goroutine at a time), extended result codes and busy's timeout.
func open(path string, flags int32, busy time.Duration) (*Conn, error) {
	c := &Conn{tls: libc.NewTLS(), stmts: map[string]*Stmt{}}
	name, err := libc.CString(path)
	if err != nil {
		c.tls.Close()
		return nil, err
	}
	defer libc.Xfree(c.tls, name)
	pp := libc.Xmalloc(c.tls, 8)
	if pp == 0 {
		c.tls.Close()
		return nil, errors.New("rawread: out of memory")
	}
	defer libc.Xfree(c.tls, pp)
	*(*uintptr)(cmem(pp)) = 0
	rc := sqlite3.Xsqlite3_open_v2(c.tls, name, pp, flags|sqlite3.SQLITE_OPEN_NOMUTEX, 0)
	c.db = *(*uintptr)(cmem(pp))
	if rc != sqlite3.SQLITE_OK {
		err := c.err(rc)
		_ = c.Close()
		return nil, fmt.Errorf("rawread: open %s: %w", path, err)
	}
	sqlite3.Xsqlite3_extended_result_codes(c.tls, c.db, 1)
	sqlite3.Xsqlite3_busy_timeout(c.tls, c.db, int32(min(busy.Milliseconds(), 1<<31-1)))
	return c, nil
}

// OpenImageWriter opens path read-write (creating it) with no journal and
// no syncs, for filling a SQLite image file that is read back whole once
// closed, and attaches the database file src read-only as schema "src"
// (through a mode=ro URI), so that one INSERT ... SELECT copies rows from
// src into the image inside SQLite.
func OpenImageWriter(path, src string, busy time.Duration) (*Conn, error) {
	c, err := open(path, sqlite3.SQLITE_OPEN_READWRITE|sqlite3.SQLITE_OPEN_CREATE|sqlite3.SQLITE_OPEN_URI, busy)
	if err != nil {
		return nil, err
	}
	if err := c.exec("PRAGMA journal_mode = OFF; PRAGMA synchronous = OFF"); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("rawread: open %s: %w", path, err)
	}
	st, err := c.Prepare("ATTACH ? AS src")
	if err == nil {
		if err = st.Bind("file:" + (&url.URL{Path: src}).EscapedPath() + "?mode=ro"); err == nil {
			_, err = st.Step()
		}
	}
	if err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("rawread: attach %s: %w", src, err)
	}
	return c, nil
}

// Changes reports the rows the last INSERT, UPDATE or DELETE changed.
func (c *Conn) Changes() int64 { return sqlite3.Xsqlite3_changes64(c.tls, c.db) }

// exec runs sql (no rows expected).
func (c *Conn) exec(sql string) error {
	z, err := libc.CString(sql)
	if err != nil {
		return err
	}
	defer libc.Xfree(c.tls, z)
	if rc := sqlite3.Xsqlite3_exec(c.tls, c.db, z, 0, 0, 0); rc != sqlite3.SQLITE_OK {
		return c.err(rc)
	}
	return nil
}

// err renders rc with the connection's last message.
func (c *Conn) err(rc int32) error {
	if rc&0xff == sqlite3.SQLITE_INTERRUPT {
		return ErrInterrupted
	}
	msg := libc.GoString(sqlite3.Xsqlite3_errstr(c.tls, rc))
	if c.db != 0 {
		if m := libc.GoString(sqlite3.Xsqlite3_errmsg(c.tls, c.db)); m != "" && m != msg {
			msg += ": " + m
		}
	}
	return &Error{Code: int(rc), Msg: msg}
}

// Close finalizes the prepared statements and closes the connection.
func (c *Conn) Close() error {
	if c.tls == nil {
		return nil
	}
	for _, s := range c.stmts {
		sqlite3.Xsqlite3_finalize(c.tls, s.p)
	}
	c.stmts, c.order = nil, nil
	var err error
	if c.db != 0 {
		if rc := sqlite3.Xsqlite3_close_v2(c.tls, c.db); rc != sqlite3.SQLITE_OK {
			err = c.err(rc)
		}
		c.db = 0
	}
	c.tls.Close()
	c.tls = nil
	return err
}

// Interrupt makes the statement running on c, if any, stop with
// ErrInterrupted. It may be called from any goroutine, also while c is in
// use; it must not be called after Close. SQLite clears the flag once no
// statement of c runs, but a caller that cannot tell whether an interrupt
// landed should close c rather than reuse it.
func (c *Conn) Interrupt() {
	tls := libc.NewTLS() // c.tls belongs to the goroutine using c
	sqlite3.Xsqlite3_interrupt(tls, c.db)
	tls.Close()
}

// Prepare returns the statement for sql, prepared once per Conn and kept
// (at most MaxStmts). The statement is reset, with no bindings.
func (c *Conn) Prepare(sql string) (*Stmt, error) {
	if s, ok := c.stmts[sql]; ok {
		s.Reset()
		return s, nil
	}
	z, err := libc.CString(sql)
	if err != nil {
		return nil, err
	}
	defer libc.Xfree(c.tls, z)
	pp := libc.Xmalloc(c.tls, 8)
	if pp == 0 {
		return nil, errors.New("rawread: out of memory")
	}
	defer libc.Xfree(c.tls, pp)
	*(*uintptr)(cmem(pp)) = 0
	if rc := sqlite3.Xsqlite3_prepare_v2(c.tls, c.db, z, -1, pp, 0); rc != sqlite3.SQLITE_OK {
		return nil, fmt.Errorf("rawread: prepare: %w", c.err(rc))
	}
	p := *(*uintptr)(cmem(pp))
	if p == 0 {
		return nil, errors.New("rawread: prepare: no statement in the SQL text")
	}
	s := &Stmt{c: c, p: p, cols: int(sqlite3.Xsqlite3_column_count(c.tls, p))}
	if len(c.order) == MaxStmts {
		old := c.order[0]
		c.order = c.order[1:]
		sqlite3.Xsqlite3_finalize(c.tls, c.stmts[old].p)
		delete(c.stmts, old)
	}
	c.stmts[sql] = s
	c.order = append(c.order, sql)
	return s, nil
}

// Stmt is a prepared statement of a Conn.
type Stmt struct {
	c    *Conn
	p    uintptr
	cols int
}

// Columns reports how many columns a row of s has.
func (s *Stmt) Columns() int { return s.cols }

// Bind resets s and binds args to its parameters in order: string, []byte
// (bound as TEXT), int, int64 or nil. SQLite copies the values.
func (s *Stmt) Bind(args ...any) error {
	s.Reset()
	tls := s.c.tls
	for i, a := range args {
		n := int32(i + 1)
		var rc int32
		switch v := a.(type) {
		case nil:
			rc = sqlite3.Xsqlite3_bind_null(tls, s.p, n)
		case int:
			rc = sqlite3.Xsqlite3_bind_int64(tls, s.p, n, int64(v))
		case int64:
			rc = sqlite3.Xsqlite3_bind_int64(tls, s.p, n, v)
		case string:
			rc = s.bindText(n, v)
		case []byte:
			rc = s.bindText(n, string(v))
		default:
			return fmt.Errorf("rawread: bind parameter %d: unsupported Go type %T", n, a)
		}
		if rc != sqlite3.SQLITE_OK {
			return fmt.Errorf("rawread: bind parameter %d: %w", n, s.c.err(rc))
		}
	}
	return nil
}

func (s *Stmt) bindText(n int32, v string) int32 {
	z, err := libc.CString(v)
	if err != nil {
		return sqlite3.SQLITE_NOMEM
	}
	defer libc.Xfree(s.c.tls, z)
	return sqlite3.Xsqlite3_bind_text(s.c.tls, s.p, n, z, int32(len(v)), sqlite3.SQLITE_TRANSIENT)
}

// Step advances to the next row: true with a row, false when done.
func (s *Stmt) Step() (bool, error) {
	switch rc := sqlite3.Xsqlite3_step(s.c.tls, s.p); rc {
	case sqlite3.SQLITE_ROW:
		return true, nil
	case sqlite3.SQLITE_DONE:
		return false, nil
	default:
		err := s.c.err(rc)
		s.Reset()
		return false, err
	}
}

// Reset ends the statement's current run (releasing its read transaction)
// and clears its bindings.
func (s *Stmt) Reset() {
	sqlite3.Xsqlite3_reset(s.c.tls, s.p)
	sqlite3.Xsqlite3_clear_bindings(s.c.tls, s.p)
}

// Type reports column i's storage class in the current row.
func (s *Stmt) Type(i int) int32 { return sqlite3.Xsqlite3_column_type(s.c.tls, s.p, int32(i)) }

// Int64 reads column i of the current row as an integer.
func (s *Stmt) Int64(i int) int64 { return sqlite3.Xsqlite3_column_int64(s.c.tls, s.p, int32(i)) }

// Float64 reads column i of the current row as a float.
func (s *Stmt) Float64(i int) float64 { return sqlite3.Xsqlite3_column_double(s.c.tls, s.p, int32(i)) }

// Bytes returns column i of the current row as bytes (TEXT as UTF-8, BLOB
// as is), a view into SQLite's memory valid until the next Step, Reset or
// Close: copy what must outlive that. An empty value is a nil slice.
func (s *Stmt) Bytes(i int) []byte {
	var p uintptr
	if s.Type(i) == Blob {
		p = sqlite3.Xsqlite3_column_blob(s.c.tls, s.p, int32(i))
	} else {
		p = sqlite3.Xsqlite3_column_text(s.c.tls, s.p, int32(i))
	}
	n := sqlite3.Xsqlite3_column_bytes(s.c.tls, s.p, int32(i))
	if p == 0 || n <= 0 {
		return nil
	}
	return unsafe.Slice((*byte)(cmem(p)), n)
}

// cmem turns an address in SQLite's C heap (libc's allocator, outside the
// Go heap, so never moved or collected by Go) into a pointer. It reads the
// address through memory instead of converting the uintptr directly, which
// go vet's unsafeptr check reserves for Go-heap pointers.
func cmem(addr uintptr) unsafe.Pointer { return *(*unsafe.Pointer)(unsafe.Pointer(&addr)) }
