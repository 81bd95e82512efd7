package postgres

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage"
)

// EncodeRows implements storage.RowEncoder with ScanRows' statement: each
// column is copied from the row's wire bytes (pgx's raw values) into sb,
// with no Go value per column. Binary and text result formats are both
// read. A serialization failure or deadlock is retried only while nothing
// has been appended to sb.
func (s *Store) EncodeRows(ctx context.Context, partition string, q storage.RowQuery, sb *ssp2.SegmentBuilder) (storage.EncodedRows, error) {
	var out storage.EncodedRows
	if q.Limit <= 0 {
		return out, fmt.Errorf("postgres: encode rows: limit %d, want > 0", q.Limit)
	}
	if err := s.ready(); err != nil {
		return out, err
	}
	if !storage.Storable(partition) {
		return out, nil
	}
	if q.Table == nil {
		return out, fmt.Errorf("postgres: encode rows: nil table")
	}
	ts, err := s.table(q.Table.Name)
	if err != nil {
		return out, err
	}
	limit := q.Limit
	q.Limit = limit + 1 // the row past the page tells More
	query, args, none := rowsSQL(ts, partition, q)
	if none {
		return out, nil
	}
	t := ts.t
	appended := false
	err = retry(ctx, "EncodeRows", func() error {
		out = storage.EncodedRows{}
		rows, err := s.pool.Query(ctx, query, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		fds := rows.FieldDescriptions()
		if len(fds) != len(t.Columns)+1 {
			return fmt.Errorf("%d result columns, want %d", len(fds), len(t.Columns)+1)
		}
		var last []byte
		for rows.Next() {
			if out.Rows == limit {
				out.More = true
				break
			}
			raw := rows.RawValues()
			appended = true
			if err := encodeWireRow(raw, fds, t.Columns, sb); err != nil {
				return &rowError{err}
			}
			if last, err = appendWireRowID(last[:0], raw[t.PK], fds[t.PK].Format, t.Columns[t.PK]); err != nil {
				return &rowError{fmt.Errorf("primary key %s: %w", t.Columns[t.PK].Name, err)}
			}
			out.Rows++
		}
		if err := rows.Err(); err != nil && appended && retryableConflict(err) {
			return fmt.Errorf("after rows were encoded: %v", err) // not retried
		} else if err != nil {
			return err
		}
		if out.Rows > 0 {
			out.LastRowID = string(last)
		}
		return nil
	})
	var re *rowError
	if errors.As(err, &re) {
		return out, fmt.Errorf("postgres: encode rows of %s: %w", t.Name, re.err)
	}
	if err != nil {
		return out, fmt.Errorf("postgres: encode rows of %s: %w", t.Name, err)
	}
	return out, nil
}

// rowError is a stored value that does not fit its column: not retried.
type rowError struct{ err error }

func (e *rowError) Error() string { return e.err.Error() }

// encodeWireRow appends one result row (the columns, then _sync_version)
// to sb from its wire bytes. The column types are the ones the store
// creates (pgType): bigint, double precision, boolean, bytea and text.
func encodeWireRow(raw [][]byte, fds []pgconn.FieldDescription, cols []ssp2.Column, sb *ssp2.SegmentBuilder) error {
	vc := len(cols)
	ver, err := wireInt(raw[vc], fds[vc].Format)
	if err != nil {
		return fmt.Errorf("_sync_version: %w", err)
	}
	sb.BeginRow(ver)
	for i, c := range cols {
		v, f := raw[i], fds[i].Format
		if v == nil {
			sb.PutNull()
			continue
		}
		var err error
		switch c.Type {
		case ssp2.TypeInteger:
			var x int64
			if x, err = wireInt(v, f); err == nil {
				sb.PutInt(x)
			}
		case ssp2.TypeFloat:
			var x float64
			if x, err = wireFloat(v, f); err == nil {
				sb.PutFloat(x)
			}
		case ssp2.TypeBoolean:
			var x bool
			if x, err = wireBool(v, f); err == nil {
				sb.PutBool(x)
			}
		case ssp2.TypeBytes, ssp2.TypeCRDT:
			if f == pgtype.TextFormatCode {
				err = errors.New("bytea in text format") // pgx reads bytea in binary
			} else {
				sb.PutText(v)
			}
		default: // text: the same bytes in both formats
			sb.PutText(v)
		}
		if err != nil {
			sb.DiscardRow()
			return fmt.Errorf("column %s: %w", c.Name, err)
		}
	}
	return sb.EndRow()
}

// appendWireRowID appends the row id of a key's wire bytes (schema.RenderKey
// of the value encodeWireRow reads from them) to dst.
func appendWireRowID(dst, v []byte, format int16, c ssp2.Column) ([]byte, error) {
	switch c.Type {
	case ssp2.TypeInteger:
		n, err := wireInt(v, format)
		return strconv.AppendInt(dst, n, 10), err
	case ssp2.TypeBoolean:
		b, err := wireBool(v, format)
		return strconv.AppendBool(dst, b), err
	}
	return append(dst, v...), nil // text: the same bytes in both formats
}

func wireInt(v []byte, format int16) (int64, error) {
	if format == pgtype.TextFormatCode {
		return strconv.ParseInt(string(v), 10, 64)
	}
	if len(v) != 8 {
		return 0, fmt.Errorf("int8 of %d bytes", len(v))
	}
	return int64(binary.BigEndian.Uint64(v)), nil
}

func wireFloat(v []byte, format int16) (float64, error) {
	if format == pgtype.TextFormatCode {
		return strconv.ParseFloat(string(v), 64)
	}
	if len(v) != 8 {
		return 0, fmt.Errorf("float8 of %d bytes", len(v))
	}
	return math.Float64frombits(binary.BigEndian.Uint64(v)), nil
}

func wireBool(v []byte, format int16) (bool, error) {
	if format == pgtype.TextFormatCode {
		return string(v) == "t", nil
	}
	if len(v) != 1 {
		return false, fmt.Errorf("bool of %d bytes", len(v))
	}
	return v[0] != 0, nil
}
