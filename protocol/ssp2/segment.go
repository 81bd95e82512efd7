package ssp2

import (
	"encoding/binary"
	"fmt"
	"slices"
)

// SegmentMagic is the 4-byte SSG2 rows segment magic.
const SegmentMagic = "SSG2"

// SegmentFormatV1 is the only SSG2 formatVersion.
const SegmentFormatV1 uint16 = 1

// SegmentBlockRows is the number of rows per block the builder emits.
const SegmentBlockRows = 1000

// Segment is a decoded SSG2 rows segment (notes §10). The rows of one
// block share one backing array of values (each row's Values has its own
// length and capacity, so appending to one never overwrites another).
type Segment struct {
	FormatVersion uint16
	Table         string
	SchemaVersion int32
	Columns       []Column
	Blocks        [][]SegmentRow
}

// SegmentRow is one row of a segment block.
type SegmentRow struct {
	ServerVersion int64
	Values        Row
}

// DecodeSegment decodes a whole SSG2 segment. Errors are
// sync.invalid_request wrapping a *DecodeError; it never panics.
func DecodeSegment(b []byte) (*Segment, error) {
	return decodeSegment(b, 0, true)
}

// validateSegment checks the structure of an SSG2 segment (including every
// row against its own column table) without building values. base is the
// offset of b within an enclosing message, for error offsets.
func validateSegment(b []byte, base int) error {
	_, err := decodeSegment(b, base, false)
	return err
}

func decodeSegment(b []byte, base int, build bool) (*Segment, error) {
	r := &rd{b: b, base: base}
	if !r.need(8, "SSG2 header") {
		return nil, r.err
	}
	if string(b[:4]) != SegmentMagic {
		r.fail("bad SSG2 magic %q", b[:4])
		return nil, r.err
	}
	r.off = 4
	s := &Segment{}
	s.FormatVersion = r.u16("formatVersion")
	if s.FormatVersion != SegmentFormatV1 {
		r.off -= 2
		r.fail("unsupported SSG2 formatVersion %d", s.FormatVersion)
		return nil, r.err
	}
	if fl := r.u16("flags"); fl != 0 {
		r.off -= 2
		r.fail("SSG2 flags 0x%04x must be 0", fl)
		return nil, r.err
	}
	s.Table = r.str("table")
	s.SchemaVersion = r.i32("schemaVersion")
	nc := int(r.u16("columns"))
	if r.err == nil && nc*6 > r.remaining() {
		r.fail("column count %d cannot fit", nc)
	}
	if r.err != nil {
		return nil, r.err
	}
	s.Columns = make([]Column, nc)
	for i := 0; i < nc && r.err == nil; i++ {
		c := &s.Columns[i]
		c.Name = r.str("column name")
		st := r.off
		c.Type = ColumnType(r.u8("column type"))
		if r.err == nil && ColumnTypeName(c.Type) == "" {
			r.off = st
			r.fail("unknown column type tag %d", c.Type)
		}
		st = r.off
		fl := r.u8("column flags")
		if r.err == nil && fl&^1 != 0 {
			r.off = st
			r.fail("column flags 0x%02x: only bit 0 is defined", fl)
		}
		c.Nullable = fl&1 != 0
	}
	if r.err != nil {
		return nil, r.err
	}
	codec := NewRowCodec(s.Columns)
	for {
		st := r.off
		n := r.u32("block rowCount")
		if r.err != nil {
			r.err = decodeFail(base+st, "SSG2 segment ends without the end marker")
			return nil, r.err
		}
		if n == 0 {
			break
		}
		bl := r.u32("block byteLength")
		if r.err == nil && uint64(bl) > uint64(r.remaining()) {
			r.off -= 4
			r.fail("block byteLength %d exceeds remaining %d bytes", bl, r.remaining())
		}
		if r.err == nil && uint64(n)*uint64(8+codec.bitmapLen) > uint64(bl) {
			r.off = st
			r.fail("block rowCount %d cannot fit in %d bytes", n, bl)
		}
		if r.err != nil {
			return nil, r.err
		}
		br := &rd{b: b[r.off : r.off+int(bl)], base: base + r.off}
		var block []SegmentRow
		var vals []any // the block's values: one allocation, not one per row
		if build {
			block = make([]SegmentRow, n)
			vals = make([]any, int(n)*nc)
		}
		for i := 0; i < int(n) && br.err == nil; i++ {
			vst := br.off
			sv := br.i64("serverVersion")
			if br.err == nil && sv < 1 {
				br.off = vst
				br.fail("row serverVersion %d < 1", sv)
			}
			var row Row
			if build {
				row = vals[i*nc : (i+1)*nc : (i+1)*nc]
			}
			row = codec.read(br, row)
			if build {
				block[i] = SegmentRow{ServerVersion: sv, Values: row}
			}
		}
		if br.err == nil && br.off != len(br.b) {
			br.fail("block byteLength mismatch: %d bytes left after %d rows", len(br.b)-br.off, n)
		}
		if br.err != nil {
			return nil, br.err
		}
		r.off += int(bl)
		if build {
			s.Blocks = append(s.Blocks, block)
		}
	}
	if r.off != len(b) {
		r.fail("%d bytes after the SSG2 end marker", len(b)-r.off)
		return nil, r.err
	}
	if !build {
		return nil, nil
	}
	return s, nil
}

// EncodeSegment encodes s canonically, keeping its block structure. Every
// block must hold at least one row and every serverVersion must be >= 1.
func EncodeSegment(s *Segment) ([]byte, error) {
	if s == nil {
		return nil, encFail("nil segment")
	}
	if s.FormatVersion != SegmentFormatV1 {
		return nil, encFail("unsupported SSG2 formatVersion %d", s.FormatVersion)
	}
	b, err := appendSegmentHeader(nil, s.Table, s.SchemaVersion, s.Columns)
	if err != nil {
		return nil, err
	}
	codec := NewRowCodec(s.Columns)
	for bi, block := range s.Blocks {
		if len(block) == 0 {
			return nil, encFail("segment block %d is empty", bi)
		}
		start := len(b)
		b = append(b, 0, 0, 0, 0, 0, 0, 0, 0)
		for _, row := range block {
			if row.ServerVersion < 1 || row.ServerVersion > MaxSafeInt {
				return nil, encFail("serverVersion %d outside [1, 2^53-1]", row.ServerVersion)
			}
			b = appendI64(b, row.ServerVersion)
			if b, err = codec.Append(b, row.Values); err != nil {
				return nil, err
			}
		}
		binary.LittleEndian.PutUint32(b[start:], uint32(len(block)))
		binary.LittleEndian.PutUint32(b[start+4:], uint32(len(b)-start-8))
	}
	return append(b, 0, 0, 0, 0), nil
}

func appendSegmentHeader(b []byte, table string, schemaVersion int32, cols []Column) ([]byte, error) {
	if err := checkStr("table", table); err != nil {
		return nil, err
	}
	if len(cols) > 0xFFFF {
		return nil, encFail("%d columns exceed u16", len(cols))
	}
	b = append(b, SegmentMagic...)
	b = appendU16(b, SegmentFormatV1)
	b = appendU16(b, 0)
	b = appendStr(b, table)
	b = appendI32(b, schemaVersion)
	b = appendU16(b, uint16(len(cols)))
	for _, c := range cols {
		if err := checkStr("column name", c.Name); err != nil {
			return nil, err
		}
		if ColumnTypeName(c.Type) == "" {
			return nil, encFail("column %q has unknown type tag %d", c.Name, c.Type)
		}
		b = appendStr(b, c.Name)
		b = append(b, byte(c.Type))
		b = appendBool(b, c.Nullable)
	}
	return b, nil
}

// SegmentBuilder assembles an SSG2 rows segment incrementally in blocks of
// SegmentBlockRows rows, for the bootstrap path.
type SegmentBuilder struct {
	codec      *RowCodec
	buf        []byte
	blockStart int // offset of the open block header, -1 if none
	blockRows  int
	rows       int
	err        error
	// The row open between BeginRow and EndRow (segment_cells.go): where
	// it starts, where its null bitmap is, the next column, and the first
	// failed check.
	rowOpen   bool
	rowMark   int
	rowBitmap int
	rowCol    int
	rowErr    error
	// expect is the row count announced by ExpectRows (0: none); the
	// buffer is sized for it when the first block closes.
	expect int
}

// NewSegmentBuilder starts a segment for table at schemaVersion with the
// given column table. Invalid table or column data is reported by AddRow
// and surfaces as an empty result from Finish.
func NewSegmentBuilder(table string, schemaVersion int32, cols []Column) *SegmentBuilder {
	return NewSegmentBuilderBuffer(nil, table, schemaVersion, cols)
}

// NewSegmentBuilderBuffer is NewSegmentBuilder writing into buf's storage
// (from its start, whatever it holds): a caller that builds page after page
// and is done with the previous page's bytes hands them back, so a stream
// of pages keeps one buffer instead of allocating one per page. A nil or
// small buf is replaced as the segment grows.
func NewSegmentBuilderBuffer(buf []byte, table string, schemaVersion int32, cols []Column) *SegmentBuilder {
	if cap(buf) < 4096 {
		buf = make([]byte, 0, 4096)
	}
	sb := &SegmentBuilder{codec: NewRowCodec(cols), blockStart: -1}
	sb.buf, sb.err = appendSegmentHeader(buf[:0], table, schemaVersion, cols)
	return sb
}

// AddRow encodes row with the segment's row codec and appends it. On error
// nothing is appended.
func (sb *SegmentBuilder) AddRow(serverVersion int64, row Row) error {
	if sb.err != nil {
		return sb.err
	}
	if serverVersion < 1 || serverVersion > MaxSafeInt {
		return encFail("serverVersion %d outside [1, 2^53-1]", serverVersion)
	}
	sb.dropOpenRow()
	sb.openBlock()
	mark := len(sb.buf)
	sb.buf = appendI64(sb.buf, serverVersion)
	b, err := sb.codec.Append(sb.buf, row)
	if err != nil {
		sb.buf = sb.buf[:mark]
		return err
	}
	sb.buf = b
	sb.rowAdded()
	return nil
}

// AddEncodedRow appends a row already in this segment's row-codec encoding.
// The caller guarantees rowBytes is valid for the columns and serverVersion
// is in [1, 2^53-1]; nothing is checked.
func (sb *SegmentBuilder) AddEncodedRow(serverVersion int64, rowBytes []byte) {
	if sb.err != nil {
		return
	}
	sb.dropOpenRow()
	sb.openBlock()
	sb.buf = appendI64(sb.buf, serverVersion)
	sb.buf = append(sb.buf, rowBytes...)
	sb.rowAdded()
}

func (sb *SegmentBuilder) openBlock() {
	if sb.blockStart < 0 {
		sb.blockStart = len(sb.buf)
		sb.buf = append(sb.buf, 0, 0, 0, 0, 0, 0, 0, 0)
		sb.blockRows = 0
	}
}

func (sb *SegmentBuilder) rowAdded() {
	sb.blockRows++
	sb.rows++
	if sb.blockRows == SegmentBlockRows {
		sb.closeBlock()
		if sb.expect > sb.rows {
			// Size the buffer once for the rows still to come, at the
			// first block's bytes per row plus a quarter, instead of
			// letting append regrow it (each regrowth holds the old and
			// the new buffer at once).
			perRow := (len(sb.buf) + sb.rows - 1) / sb.rows
			n := perRow * (sb.expect - sb.rows)
			sb.Grow(n + n/4 + 8*((sb.expect-sb.rows)/SegmentBlockRows+1) + 4)
			sb.expect = 0
		}
	}
}

// ExpectRows announces that about n rows will be added (the page size of
// a bootstrap page). Once the first block of SegmentBlockRows rows is
// complete, the buffer is grown once to hold n rows at that block's bytes
// per row, plus a quarter (rows vary): a page whose size is not known in advance then costs
// one large allocation, not a series of doublings. Fewer rows than
// announced just leave unused capacity. Use Grow instead when the size is
// known.
func (sb *SegmentBuilder) ExpectRows(n int) {
	if n > 0 {
		sb.expect = n
	}
}

func (sb *SegmentBuilder) closeBlock() {
	if sb.blockStart < 0 {
		return
	}
	if sb.blockRows == 0 { // its only rows were rejected: no empty block
		sb.buf = sb.buf[:sb.blockStart]
		sb.blockStart = -1
		return
	}
	binary.LittleEndian.PutUint32(sb.buf[sb.blockStart:], uint32(sb.blockRows))
	binary.LittleEndian.PutUint32(sb.buf[sb.blockStart+4:], uint32(len(sb.buf)-sb.blockStart-8))
	sb.blockStart = -1
	sb.blockRows = 0
}

// Grow reserves room for n more bytes (n <= 0 does nothing), so a builder
// whose size is roughly known (the previous page of the same table) does
// not regrow and copy its buffer while rows are added.
func (sb *SegmentBuilder) Grow(n int) {
	if n > 0 && sb.err == nil {
		sb.buf = slices.Grow(sb.buf, n)
	}
}

// Len reports the bytes written so far: right after AddEncodedRow it is
// where that row's bytes end in the finished segment.
func (sb *SegmentBuilder) Len() int { return len(sb.buf) }

// Rows reports how many rows were added.
func (sb *SegmentBuilder) Rows() int { return sb.rows }

// Err reports a construction error (bad table name or column table).
func (sb *SegmentBuilder) Err() error { return sb.err }

// Finish closes the last block, appends the end marker and returns the
// segment bytes (a zero-row segment is header plus end marker). It returns
// nil if the builder was constructed with invalid metadata (see Err). The
// builder must not be used afterwards.
func (sb *SegmentBuilder) Finish() []byte {
	if sb.err != nil {
		return nil
	}
	sb.dropOpenRow()
	sb.closeBlock()
	out := append(sb.buf, 0, 0, 0, 0)
	sb.buf = nil
	sb.err = fmt.Errorf("ssp2: SegmentBuilder used after Finish")
	return out
}
