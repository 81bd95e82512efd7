package ssp2

// SegmentRowSpan is one row of an SSG2 rows segment as its encoded bytes:
// Row is the row-codec encoding (without the serverVersion), aliasing the
// segment it was read from, and Key the decoded value of one column (the
// primary key, in Row's Go type).
type SegmentRowSpan struct {
	ServerVersion int64
	Key           any
	Row           []byte
}

// SegmentRowSpans returns the rows of the SSG2 rows segment b in order,
// each as its bytes within b (SegmentRowBuilder.AddEncodedRow takes them
// back unchanged) with the value of column keyCol decoded. It checks the
// segment's structure as DecodeSegment does (errors are
// sync.invalid_request wrapping a *DecodeError) but builds no value other
// than the key's; b must not be modified while the spans are in use.
func SegmentRowSpans(b []byte, keyCol int) ([]SegmentRowSpan, error) {
	r := &rd{b: b}
	if !r.need(8, "SSG2 header") {
		return nil, r.err
	}
	if string(b[:4]) != SegmentMagic {
		r.fail("bad SSG2 magic %q", b[:4])
		return nil, r.err
	}
	r.off = 4
	if v := r.u16("formatVersion"); r.err == nil && v != SegmentFormatV1 {
		r.fail("unsupported SSG2 formatVersion %d", v)
	}
	if fl := r.u16("flags"); r.err == nil && fl != 0 {
		r.fail("SSG2 flags 0x%04x must be 0", fl)
	}
	r.str("table")
	r.i32("schemaVersion")
	nc := int(r.u16("columns"))
	if r.err == nil && nc*6 > r.remaining() {
		r.fail("column count %d cannot fit", nc)
	}
	if r.err != nil {
		return nil, r.err
	}
	cols := make([]Column, nc)
	for i := range cols {
		cols[i].Name = r.str("column name")
		cols[i].Type = ColumnType(r.u8("column type"))
		cols[i].Nullable = r.u8("column flags")&1 != 0
		if r.err == nil && ColumnTypeName(cols[i].Type) == "" {
			r.fail("unknown column type tag %d", cols[i].Type)
		}
		if r.err != nil {
			return nil, r.err
		}
	}
	if keyCol < 0 || keyCol >= nc {
		r.fail("key column %d outside the segment's %d columns", keyCol, nc)
		return nil, r.err
	}
	codec := NewRowCodec(cols)
	var out []SegmentRowSpan
	for {
		n := r.u32("block rowCount")
		if r.err != nil {
			return nil, r.err
		}
		if n == 0 {
			break
		}
		bl := r.u32("block byteLength")
		if r.err == nil && uint64(bl) > uint64(r.remaining()) {
			r.fail("block byteLength %d exceeds remaining %d bytes", bl, r.remaining())
		}
		if r.err != nil {
			return nil, r.err
		}
		if out == nil {
			out = make([]SegmentRowSpan, 0, n)
		}
		br := &rd{b: b[r.off : r.off+int(bl)], base: r.off}
		for i := 0; i < int(n) && br.err == nil; i++ {
			sv := br.i64("serverVersion")
			if br.err == nil && sv < 1 {
				br.fail("row serverVersion %d < 1", sv)
			}
			st := br.off
			key := codec.readKey(br, keyCol)
			if br.err == nil {
				out = append(out, SegmentRowSpan{ServerVersion: sv, Key: key, Row: br.b[st:br.off:br.off]})
			}
		}
		if br.err == nil && br.off != len(br.b) {
			br.fail("block byteLength mismatch: %d bytes left after %d rows", len(br.b)-br.off, n)
		}
		if br.err != nil {
			return nil, br.err
		}
		r.off += int(bl)
	}
	if r.off != len(b) {
		r.fail("%d bytes after the SSG2 end marker", len(b)-r.off)
		return nil, r.err
	}
	return out, nil
}

// readKey reads one row at r's position, building only column keyCol's
// value (nil when NULL or on error).
func (c *RowCodec) readKey(r *rd, keyCol int) any {
	if !r.need(c.bitmapLen, "row null bitmap") {
		return nil
	}
	bm := r.b[r.off : r.off+c.bitmapLen]
	r.off += c.bitmapLen
	var key any
	for i, col := range c.cols {
		if bm[i/8]&(1<<uint(i%8)) != 0 {
			continue
		}
		v := readValue(r, col, i == keyCol)
		if r.err != nil {
			return nil
		}
		if i == keyCol {
			key = v
		}
	}
	return key
}
