package ssp2

import (
	"encoding/json"
	"math"
	"unicode/utf8"
)

// Cell-level row encoding: a store that reads column values as raw bytes
// (a SQLite scan reading straight from the database's memory) appends them
// to the segment without building a Row of Go values first. The result is
// byte-for-byte what AddRow produces for the same values, and every value
// is checked as AddRow checks it (TestCellRowsMatchAddRow,
// FuzzCellRowsMatchAddRow).
//
// A row is BeginRow, then exactly one Put call per column in column order,
// then EndRow; AddRow, AddEncodedRow or Finish discard a row left open. The first failed check poisons the row: later Put calls do
// nothing, and EndRow removes the row's bytes and returns the error, so a
// rejected row leaves the segment as it was. Only EndRow reports errors.

// BeginRow starts a row with the given serverVersion (checked at EndRow).
// A row left open by an earlier BeginRow is discarded.
func (sb *SegmentBuilder) BeginRow(serverVersion int64) {
	if sb.err != nil {
		return
	}
	sb.dropOpenRow()
	sb.openBlock()
	sb.rowOpen, sb.rowMark, sb.rowCol, sb.rowErr = true, len(sb.buf), 0, nil
	if serverVersion < 1 || serverVersion > MaxSafeInt {
		sb.rowErr = encFail("serverVersion %d outside [1, 2^53-1]", serverVersion)
		return
	}
	sb.buf = appendI64(sb.buf, serverVersion)
	sb.rowBitmap = len(sb.buf)
	for i := 0; i < sb.codec.bitmapLen; i++ {
		sb.buf = append(sb.buf, 0)
	}
}

// DiscardRow removes the row begun by BeginRow, if one is open, as a
// caller that finds a value it cannot put does.
func (sb *SegmentBuilder) DiscardRow() { sb.dropOpenRow() }

// dropOpenRow removes the bytes of a row begun and never ended.
func (sb *SegmentBuilder) dropOpenRow() {
	if sb.rowOpen {
		sb.buf = sb.buf[:sb.rowMark]
		sb.rowOpen = false
	}
}

// cell returns the column the next Put fills, or false when the row is
// poisoned or has no column left.
func (sb *SegmentBuilder) cell() (Column, bool) {
	if sb.err != nil || !sb.rowOpen || sb.rowErr != nil {
		return Column{}, false
	}
	if sb.rowCol >= len(sb.codec.cols) {
		sb.rowErr = encFail("row has more than %d values", len(sb.codec.cols))
		return Column{}, false
	}
	return sb.codec.cols[sb.rowCol], true
}

func (sb *SegmentBuilder) putFail(col Column, what string) {
	sb.rowErr = encFail("column %q (%s): unexpected value type %s", col.Name, ColumnTypeName(col.Type), what)
}

// PutNull sets the next column to NULL; the column must be nullable.
func (sb *SegmentBuilder) PutNull() {
	col, ok := sb.cell()
	if !ok {
		return
	}
	if !col.Nullable {
		sb.rowErr = encFail("column %q is not nullable", col.Name)
		return
	}
	sb.buf[sb.rowBitmap+sb.rowCol/8] |= 1 << uint(sb.rowCol%8)
	sb.rowCol++
}

// PutText sets the next column from text or bytes: a string column (valid
// UTF-8), a json column (a valid JSON document), a blob-ref column (a
// canonical BlobRef), or a bytes or crdt column (taken as is). b is copied.
func (sb *SegmentBuilder) PutText(b []byte) {
	col, ok := sb.cell()
	if !ok {
		return
	}
	switch col.Type {
	case TypeString:
		if !utf8.Valid(b) {
			sb.rowErr = encFail("column %q: invalid UTF-8", col.Name)
			return
		}
	case TypeJSON:
		if !utf8.Valid(b) || !json.Valid(b) {
			sb.rowErr = encFail("column %q: not a JSON document", col.Name)
			return
		}
	case TypeBlobRef:
		if !validBlobRef(b) {
			sb.rowErr = encFail("column %q: not a canonical BlobRef", col.Name)
			return
		}
	case TypeBytes, TypeCRDT:
	default:
		sb.putFail(col, "text")
		return
	}
	if uint64(len(b)) > math.MaxUint32 {
		sb.rowErr = encFail("column %q: value too long", col.Name)
		return
	}
	sb.buf = appendBytes(sb.buf, b)
	sb.rowCol++
}

// PutInt sets the next column, an integer column, to x (within ±(2^53-1)).
func (sb *SegmentBuilder) PutInt(x int64) {
	col, ok := sb.cell()
	if !ok {
		return
	}
	if col.Type != TypeInteger {
		sb.putFail(col, "int64")
		return
	}
	if !safeInt(x) {
		sb.rowErr = encFail("column %q: integer %d outside ±(2^53-1)", col.Name, x)
		return
	}
	sb.buf = appendI64(sb.buf, x)
	sb.rowCol++
}

// PutFloat sets the next column, a float column, to x.
func (sb *SegmentBuilder) PutFloat(x float64) {
	col, ok := sb.cell()
	if !ok {
		return
	}
	if col.Type != TypeFloat {
		sb.putFail(col, "float64")
		return
	}
	sb.buf = appendF64(sb.buf, x)
	sb.rowCol++
}

// PutBool sets the next column, a boolean column, to x.
func (sb *SegmentBuilder) PutBool(x bool) {
	col, ok := sb.cell()
	if !ok {
		return
	}
	if col.Type != TypeBoolean {
		sb.putFail(col, "bool")
		return
	}
	sb.buf = appendBool(sb.buf, x)
	sb.rowCol++
}

// EndRow closes the row started by BeginRow. It returns the first check
// that failed, or an error when not every column was set; either way the
// row's bytes are removed and nothing is added.
func (sb *SegmentBuilder) EndRow() error {
	if sb.err != nil {
		return sb.err
	}
	if !sb.rowOpen {
		return encFail("EndRow without BeginRow")
	}
	sb.rowOpen = false
	err := sb.rowErr
	if err == nil && sb.rowCol != len(sb.codec.cols) {
		err = encFail("row has %d values, table has %d columns", sb.rowCol, len(sb.codec.cols))
	}
	if err != nil {
		sb.buf = sb.buf[:sb.rowMark]
		return err
	}
	sb.rowAdded()
	return nil
}
