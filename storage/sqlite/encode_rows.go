package sqlite

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage"
	"github.com/synclane/synclane/storage/sqlite/internal/rawread"
)

// EncodeRows implements storage.RowEncoder. It runs ScanRows' statement on
// a connection of its own pool of read-only C-API connections
// (internal/rawread) and copies each column from SQLite's memory into sb,
// with the conversions and checks of decodeValue and ssp2's AddRow: a page
// of rows costs no Go allocation per row. The statement's read transaction
// is one consistent snapshot; ctx's end interrupts it.
func (s *Store) EncodeRows(ctx context.Context, partition string, q storage.RowQuery, sb *ssp2.SegmentBuilder) (storage.EncodedRows, error) {
	var out storage.EncodedRows
	if q.Limit <= 0 {
		return out, fmt.Errorf("sqlite: encode rows: limit %d, want > 0", q.Limit)
	}
	if err := ctx.Err(); err != nil {
		return out, fmt.Errorf("sqlite: encode rows: %w", err)
	}
	_, tables, _, err := s.current()
	if err != nil {
		return out, fmt.Errorf("sqlite: encode rows: %w", err)
	}
	ts := tables[q.Table.Name]
	if ts == nil {
		return out, fmt.Errorf("sqlite: encode rows: table %q is not in the ensured schema", q.Table.Name)
	}
	t := ts.t
	limit := q.Limit
	q.Limit = limit + 1 // the row past the page tells More
	query, args, none, err := rowsQuery(ts, partition, q)
	if err != nil || none {
		return out, err
	}
	c, err := s.raw.get(ctx)
	if err != nil {
		return out, fmt.Errorf("sqlite: encode rows of %s: %w", t.Name, err)
	}
	reuse := true
	defer func() { s.raw.put(c, reuse) }()
	st, err := c.Prepare(query)
	if err != nil {
		return out, fmt.Errorf("sqlite: encode rows of %s: %w", t.Name, err)
	}
	defer st.Reset() // ends the read transaction
	if err := st.Bind(args...); err != nil {
		return out, fmt.Errorf("sqlite: encode rows of %s: %w", t.Name, err)
	}
	interrupted := make(chan struct{})
	stop := context.AfterFunc(ctx, func() { c.Interrupt(); close(interrupted) })
	defer func() {
		if !stop() {
			<-interrupted // never close c under a running Interrupt
			reuse = false // and never hand out a connection it may have hit
		}
	}()
	var last []byte
	for {
		row, err := st.Step()
		if err != nil {
			if errors.Is(err, rawread.ErrInterrupted) && ctx.Err() != nil {
				err = ctx.Err()
			}
			return out, fmt.Errorf("sqlite: encode rows of %s: %w", t.Name, err)
		}
		if !row {
			break
		}
		if out.Rows == limit {
			out.More = true
			break
		}
		if err := encodeRawRow(st, t, sb); err != nil {
			return out, fmt.Errorf("sqlite: encode rows of %s: %w", t.Name, err)
		}
		last = appendRawRowID(last[:0], st, t)
		out.Rows++
	}
	if out.Rows > 0 {
		out.LastRowID = string(last)
	}
	return out, nil
}

// appendRawRowID appends the row id of st's current row (schema.RenderKey
// of its key, read as encodeRawRow read it) to dst.
func appendRawRowID(dst []byte, st *rawread.Stmt, t *schema.Table) []byte {
	switch t.Columns[t.PK].Type {
	case ssp2.TypeInteger:
		return strconv.AppendInt(dst, st.Int64(t.PK), 10)
	case ssp2.TypeBoolean:
		return strconv.AppendBool(dst, st.Int64(t.PK) != 0)
	}
	return append(dst, st.Bytes(t.PK)...)
}

// storageClassName names a SQLite storage class for error messages.
func storageClassName(c int32) string {
	switch c {
	case rawread.Integer:
		return "INTEGER"
	case rawread.Float:
		return "REAL"
	case rawread.Text:
		return "TEXT"
	case rawread.Blob:
		return "BLOB"
	}
	return "NULL"
}

// encodeRawRow appends the current row of st (t's columns then
// _sync_version) to sb. It accepts exactly what decodeValue accepts: an
// integer for integer, boolean (non-zero is true) and float columns, a
// real for float columns, TEXT or BLOB for string, json and blob-ref
// columns, a BLOB for bytes and crdt columns, NULL anywhere (sb refuses it
// in a NOT NULL column).
func encodeRawRow(st *rawread.Stmt, t *schema.Table, sb *ssp2.SegmentBuilder) error {
	vc := len(t.Columns)
	if cl := st.Type(vc); cl != rawread.Integer {
		return fmt.Errorf("_sync_version stored as %s", storageClassName(cl))
	}
	sb.BeginRow(st.Int64(vc))
	for i, col := range t.Columns {
		cl := st.Type(i)
		ok := true
		switch cl {
		case rawread.Null:
			sb.PutNull()
		case rawread.Integer:
			switch col.Type {
			case ssp2.TypeInteger:
				sb.PutInt(st.Int64(i))
			case ssp2.TypeBoolean:
				sb.PutBool(st.Int64(i) != 0)
			case ssp2.TypeFloat:
				sb.PutFloat(float64(st.Int64(i)))
			default:
				ok = false
			}
		case rawread.Float:
			if ok = col.Type == ssp2.TypeFloat; ok {
				sb.PutFloat(st.Float64(i))
			}
		case rawread.Text:
			switch col.Type {
			case ssp2.TypeString, ssp2.TypeJSON, ssp2.TypeBlobRef:
				sb.PutText(st.Bytes(i))
			default:
				ok = false
			}
		case rawread.Blob:
			switch col.Type {
			case ssp2.TypeString, ssp2.TypeJSON, ssp2.TypeBlobRef, ssp2.TypeBytes, ssp2.TypeCRDT:
				sb.PutText(st.Bytes(i))
			default:
				ok = false
			}
		default:
			ok = false
		}
		if !ok {
			sb.DiscardRow()
			return fmt.Errorf("column %s: stored %s value does not fit type tag %d", col.Name, storageClassName(cl), col.Type)
		}
	}
	return sb.EndRow()
}

// rawPool holds the read-only C-API connections of EncodeRows: at most
// size open at once, idle ones kept for reuse, all closed by close.
type rawPool struct {
	path     string
	busy     time.Duration
	cacheKiB int
	mmap     int64
	slots    chan struct{}

	mu     sync.Mutex
	idle   []*rawread.Conn
	closed bool
}

func newRawPool(path string, size int, busy time.Duration, cacheKiB int, mmap int64) *rawPool {
	return &rawPool{path: path, busy: busy, cacheKiB: cacheKiB, mmap: mmap, slots: make(chan struct{}, size)}
}

// get returns an idle connection or opens one, waiting for a free slot
// until ctx ends.
func (p *rawPool) get(ctx context.Context) (*rawread.Conn, error) {
	if err := ctx.Err(); err != nil {
		return nil, err // a free slot must not win over an ended context
	}
	select {
	case p.slots <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		<-p.slots
		return nil, errClosed
	}
	if n := len(p.idle); n > 0 {
		c := p.idle[n-1]
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		return c, nil
	}
	p.mu.Unlock()
	c, err := rawread.Open(p.path, p.busy, p.cacheKiB, p.mmap)
	if err != nil {
		<-p.slots
		return nil, err
	}
	return c, nil
}

// put returns c to the pool, or closes it when reuse is false or the pool
// is closed.
func (p *rawPool) put(c *rawread.Conn, reuse bool) {
	p.mu.Lock()
	if reuse && !p.closed {
		p.idle = append(p.idle, c)
		c = nil
	}
	p.mu.Unlock()
	if c != nil {
		_ = c.Close()
	}
	<-p.slots
}

// close closes the idle connections; connections in use are closed when
// they are put back.
func (p *rawPool) close() {
	p.mu.Lock()
	idle := p.idle
	p.idle, p.closed = nil, true
	p.mu.Unlock()
	for _, c := range idle {
		_ = c.Close()
	}
}
