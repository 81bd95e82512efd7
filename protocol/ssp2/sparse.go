package ssp2

import "math/bits"

// ColumnSet is a set of a table's columns in the presence-bitmap layout of
// SPEC §2.4 (sparse rows): ceil(n/8) bytes, column i is bit i%8 (least
// significant first) of byte i/8, padding bits zero. It is both the
// presence bitmap of a sparse push payload and the conflictColumns bitmap
// of a conflict record (§6.3). A nil ColumnSet of a table with columns is
// empty, not full; FullColumnSet builds the set of every column.
type ColumnSet []byte

// NewColumnSet returns an empty set over n columns.
func NewColumnSet(n int) ColumnSet { return make(ColumnSet, (n+7)/8) }

// FullColumnSet returns the set of all n columns.
func FullColumnSet(n int) ColumnSet {
	s := NewColumnSet(n)
	for i := range n {
		s.Add(i)
	}
	return s
}

// Has reports whether column i is in the set (false beyond its length).
func (s ColumnSet) Has(i int) bool {
	return i >= 0 && i/8 < len(s) && s[i/8]&(1<<uint(i%8)) != 0
}

// Add puts column i into the set, which must be long enough for it.
func (s ColumnSet) Add(i int) { s[i/8] |= 1 << uint(i%8) }

// Len returns how many columns the set holds.
func (s ColumnSet) Len() int {
	n := 0
	for _, b := range s {
		n += bits.OnesCount8(b)
	}
	return n
}

// Full reports whether the set holds all n columns and nothing else: it
// has the length of a set over n columns, every column's bit is set and
// no padding bit is.
func (s ColumnSet) Full(n int) bool {
	if n < 0 || len(s) != (n+7)/8 {
		return false
	}
	for i := 0; i < n/8; i++ {
		if s[i] != 0xFF {
			return false
		}
	}
	return n%8 == 0 || s[len(s)-1] == byte(1<<uint(n%8)-1)
}

// fitsColumns reports whether s is a set over n columns: its length is
// ceil(n/8) and no padding bit is set.
func fitsColumns(s ColumnSet, n int) bool {
	return n >= 0 && len(s) == (n+7)/8 && (n%8 == 0 || s[len(s)-1]>>uint(n%8) == 0)
}

// SparseRow is a decoded sparse push payload (SPEC §2.4, §6.1): the values
// of the present columns, in a row of the table's width whose absent
// columns are nil (a present NULL is nil too: Present tells them apart).
type SparseRow struct {
	Row     Row
	Present ColumnSet
}

// DecodeSparse decodes one sparse row occupying all of b (SPEC §2.4
// "Sparse rows"), pk being the index of the table's primary-key column.
// The checks run in the SPEC's order, each failing with sync.invalid_request
// wrapping a *DecodeError whose Offset is the byte at fault: a set presence
// padding bit; the primary key absent; a set null-bitmap padding bit (a
// null for an absent column); a null bit on a non-nullable column; then
// every present non-null value as the full-row codec checks it (UTF-8,
// JSON, BlobRef shape, i64 range, bool byte, lengths), and exact
// consumption of b. A truncated bitmap fails where it ends, and a pk
// outside the columns fails before anything is read. It does not compare
// the primary key with the operation's rowId: that is the server's check.
// Values are copies (they do not alias b), and so is Present.
func (c *RowCodec) DecodeSparse(b []byte, pk int) (SparseRow, error) {
	r := &rd{b: b}
	sr := c.readSparse(r, pk, true)
	if r.err == nil && r.off != len(b) {
		r.fail("%d trailing bytes after sparse row", len(b)-r.off)
	}
	if r.err != nil {
		return SparseRow{}, r.err
	}
	return sr, nil
}

// ValidateSparse checks that b is exactly one well-formed sparse row, as
// DecodeSparse does, without building values.
func (c *RowCodec) ValidateSparse(b []byte, pk int) error {
	r := &rd{b: b}
	c.readSparse(r, pk, false)
	if r.err == nil && r.off != len(b) {
		r.fail("%d trailing bytes after sparse row", len(b)-r.off)
	}
	return r.err
}

// readSparse reads one sparse row at r's position. Each failure is
// reported at the byte that holds the fault: the last presence byte for
// its padding, the primary key's presence byte, the last null byte for its
// padding, the null byte of a non-nullable column, the value itself.
func (c *RowCodec) readSparse(r *rd, pk int, build bool) SparseRow {
	n := len(c.cols)
	if pk < 0 || pk >= n {
		r.fail("primary-key column index %d outside the table's %d columns", pk, n)
		return SparseRow{}
	}
	if !r.need(c.bitmapLen, "presence bitmap") {
		return SparseRow{}
	}
	start := r.off
	pres := r.b[start : start+c.bitmapLen]
	// 1. A set presence padding bit.
	if n%8 != 0 && pres[len(pres)-1]>>uint(n%8) != 0 {
		r.off = start + c.bitmapLen - 1
		r.fail("presence bitmap padding bits set")
		return SparseRow{}
	}
	present := ColumnSet(pres)
	// 2. The primary key absent.
	if !present.Has(pk) {
		r.off = start + pk/8
		r.fail("primary-key column %q is not present", c.cols[pk].Name)
		return SparseRow{}
	}
	r.off += c.bitmapLen
	p := present.Len()
	nullLen := (p + 7) / 8
	if !r.need(nullLen, "null bitmap") {
		return SparseRow{}
	}
	nullStart := r.off
	nulls := ColumnSet(r.b[nullStart : nullStart+nullLen])
	// 3. A set null-bitmap padding bit: a null for an absent column.
	if p%8 != 0 && nulls[nullLen-1]>>uint(p%8) != 0 {
		r.off = nullStart + nullLen - 1
		r.fail("null bitmap padding bits set (a null for an absent column)")
		return SparseRow{}
	}
	// 4. A null bit on a non-nullable column.
	j := 0
	for i, col := range c.cols {
		if !present.Has(i) {
			continue
		}
		if nulls.Has(j) && !col.Nullable {
			r.off = nullStart + j/8
			r.fail("null bit set on non-nullable column %q", col.Name)
			return SparseRow{}
		}
		j++
	}
	r.off += nullLen
	// 5. The values, checked as the full-row codec checks them.
	var sr SparseRow
	if build {
		sr = SparseRow{Row: make(Row, n), Present: append(ColumnSet(nil), present...)}
	}
	j = 0
	for i, col := range c.cols {
		if !present.Has(i) {
			continue
		}
		isNull := nulls.Has(j)
		j++
		if isNull {
			continue
		}
		v := readValue(r, col, build)
		if r.err != nil {
			return SparseRow{}
		}
		if build {
			sr.Row[i] = v
		}
	}
	return sr
}

// AppendSparse appends the sparse-row encoding (SPEC §2.4) of the columns
// of row that present holds; a nil present means every column (the full
// sparse row: a presence bitmap of all ones, then the full-row encoding).
// row must have the table's width; absent columns' values are ignored.
// Present values are checked as Append checks them, and present must hold
// the primary key pk. On error dst is returned unchanged.
func (c *RowCodec) AppendSparse(dst []byte, row Row, present ColumnSet, pk int) ([]byte, error) {
	n := len(c.cols)
	if len(row) != n {
		return dst, encFail("row has %d values, table has %d columns", len(row), n)
	}
	if present == nil {
		present = FullColumnSet(n)
	}
	if !fitsColumns(present, n) {
		return dst, encFail("presence set does not fit %d columns", n)
	}
	if !present.Has(pk) {
		return dst, encFail("the primary-key column must be present")
	}
	start := len(dst)
	dst = append(dst, present...)
	p := present.Len()
	nullAt := len(dst)
	for range (p + 7) / 8 {
		dst = append(dst, 0)
	}
	j := 0
	for i, col := range c.cols {
		if !present.Has(i) {
			continue
		}
		v := row[i]
		if v == nil {
			if !col.Nullable {
				return dst[:start], encFail("column %q is not nullable", col.Name)
			}
			dst[nullAt+j/8] |= 1 << uint(j%8)
			j++
			continue
		}
		j++
		var err error
		if dst, err = appendValue(dst, col, v); err != nil {
			return dst[:start], err
		}
	}
	return dst, nil
}
