package ssp2

import (
	"encoding/json"
	"unicode/utf8"
)

// ColumnTypeName returns the rendering name of a type tag ("string",
// "integer", "float", "boolean", "json", "bytes", "blob_ref", "crdt"), or ""
// for an unknown tag.
func ColumnTypeName(t ColumnType) string {
	switch t {
	case TypeString:
		return "string"
	case TypeInteger:
		return "integer"
	case TypeFloat:
		return "float"
	case TypeBoolean:
		return "boolean"
	case TypeJSON:
		return "json"
	case TypeBytes:
		return "bytes"
	case TypeBlobRef:
		return "blob_ref"
	case TypeCRDT:
		return "crdt"
	}
	return ""
}

func columnTypeByName(s string) (ColumnType, bool) {
	for t := TypeString; t <= TypeCRDT; t++ {
		if ColumnTypeName(t) == s {
			return t, true
		}
	}
	return 0, false
}

// RowCodec encodes and decodes rows of one table in the positional row
// codec (notes §7): a null bitmap of ceil(n/8) bytes (bit i LSB-first means
// column i is NULL; padding bits must be zero) then the non-null values in
// column order. A RowCodec is immutable and safe for concurrent use.
type RowCodec struct {
	cols      []Column
	bitmapLen int
}

// NewRowCodec returns a codec for cols (copied).
func NewRowCodec(cols []Column) *RowCodec {
	c := &RowCodec{cols: append([]Column(nil), cols...), bitmapLen: (len(cols) + 7) / 8}
	return c
}

// Columns returns the codec's columns (do not modify).
func (c *RowCodec) Columns() []Column { return c.cols }

// Decode decodes one row occupying all of b. Values are copies (they do not
// alias b). Errors are sync.invalid_request wrapping a *DecodeError.
func (c *RowCodec) Decode(b []byte) (Row, error) {
	r := &rd{b: b}
	row := c.read(r, make(Row, len(c.cols)))
	if r.err == nil && r.off != len(b) {
		r.fail("%d trailing bytes after row", len(b)-r.off)
	}
	if r.err != nil {
		return nil, r.err
	}
	return row, nil
}

// Validate checks that b is exactly one well-formed row, without building
// values.
func (c *RowCodec) Validate(b []byte) error {
	r := &rd{b: b}
	c.read(r, nil)
	if r.err == nil && r.off != len(b) {
		r.fail("%d trailing bytes after row", len(b)-r.off)
	}
	return r.err
}

// read decodes one row at r's position into row (len(c.cols) values),
// which it returns; a nil row only validates.
func (c *RowCodec) read(r *rd, row Row) Row {
	build := row != nil
	if !r.need(c.bitmapLen, "row null bitmap") {
		return nil
	}
	bm := r.b[r.off : r.off+c.bitmapLen]
	n := len(c.cols)
	if n%8 != 0 {
		if pad := bm[len(bm)-1] >> uint(n%8); pad != 0 {
			r.fail("row null bitmap padding bits set")
			return nil
		}
	}
	for i, col := range c.cols {
		if bm[i/8]&(1<<uint(i%8)) != 0 && !col.Nullable {
			r.fail("null bit set on non-nullable column %q", col.Name)
			return nil
		}
	}
	r.off += c.bitmapLen
	for i, col := range c.cols {
		if bm[i/8]&(1<<uint(i%8)) != 0 {
			continue
		}
		v := readValue(r, col, build)
		if r.err != nil {
			return nil
		}
		if build {
			row[i] = v
		}
	}
	return row
}

// readValue reads one non-null value of col at r's position; it builds the
// Go value only when build is set (nil otherwise, and on error).
func readValue(r *rd, col Column, build bool) any {
	var v any
	switch col.Type {
	case TypeString:
		s := r.strBytes(col.Name)
		if build {
			v = string(s)
		}
	case TypeInteger:
		x := r.i64(col.Name)
		if build {
			v = x
		}
	case TypeFloat:
		x := r.f64(col.Name)
		if build {
			v = x
		}
	case TypeBoolean:
		x := r.boolean(col.Name)
		if build {
			v = x
		}
	case TypeJSON:
		x := r.jsonText(col.Name)
		if build && r.err == nil {
			v = json.RawMessage(append([]byte{}, x...))
		}
	case TypeBytes, TypeCRDT:
		x := r.rawBytes(col.Name)
		if build && r.err == nil {
			v = append([]byte{}, x...)
		}
	case TypeBlobRef:
		st := r.off
		x := r.strBytes(col.Name)
		if r.err == nil && !validBlobRef(x) {
			r.off = st
			r.fail("column %q: not a canonical BlobRef", col.Name)
		}
		if build {
			v = string(x)
		}
	default:
		r.fail("column %q has unknown type tag %d", col.Name, col.Type)
	}
	if r.err != nil {
		return nil
	}
	return v
}

// Append appends the encoding of row to dst. It checks the row length,
// nullability, and that each value has the Go type documented on Row for
// its column type; json values must be valid JSON (written verbatim),
// strings valid UTF-8, integers within ±(2^53-1), blob_ref values canonical
// BlobRef JSON. On error dst is returned unchanged.
func (c *RowCodec) Append(dst []byte, row Row) ([]byte, error) {
	if len(row) != len(c.cols) {
		return dst, encFail("row has %d values, table has %d columns", len(row), len(c.cols))
	}
	start := len(dst)
	for i := 0; i < c.bitmapLen; i++ {
		dst = append(dst, 0)
	}
	for i, col := range c.cols {
		v := row[i]
		if v == nil {
			if !col.Nullable {
				return dst[:start], encFail("column %q is not nullable", col.Name)
			}
			dst[start+i/8] |= 1 << uint(i%8)
			continue
		}
		var err error
		dst, err = appendValue(dst, col, v)
		if err != nil {
			return dst[:start], err
		}
	}
	return dst, nil
}

func appendValue(dst []byte, col Column, v any) ([]byte, error) {
	bad := func() error {
		return encFail("column %q (%s): unexpected value type %T", col.Name, ColumnTypeName(col.Type), v)
	}
	switch col.Type {
	case TypeString:
		s, ok := v.(string)
		if !ok {
			return dst, bad()
		}
		if !utf8.ValidString(s) {
			return dst, encFail("column %q: invalid UTF-8", col.Name)
		}
		return appendStr(dst, s), nil
	case TypeInteger:
		x, ok := v.(int64)
		if !ok {
			return dst, bad()
		}
		if !safeInt(x) {
			return dst, encFail("column %q: integer %d outside ±(2^53-1)", col.Name, x)
		}
		return appendI64(dst, x), nil
	case TypeFloat:
		x, ok := v.(float64)
		if !ok {
			return dst, bad()
		}
		return appendF64(dst, x), nil
	case TypeBoolean:
		x, ok := v.(bool)
		if !ok {
			return dst, bad()
		}
		return appendBool(dst, x), nil
	case TypeJSON:
		x, ok := v.(json.RawMessage)
		if !ok {
			return dst, bad()
		}
		if !utf8.Valid(x) || !json.Valid(x) {
			return dst, encFail("column %q: not a JSON document", col.Name)
		}
		return appendBytes(dst, x), nil
	case TypeBytes, TypeCRDT:
		x, ok := v.([]byte)
		if !ok {
			return dst, bad()
		}
		return appendBytes(dst, x), nil
	case TypeBlobRef:
		s, ok := v.(string)
		if !ok {
			return dst, bad()
		}
		if !validBlobRef([]byte(s)) {
			return dst, encFail("column %q: not a canonical BlobRef", col.Name)
		}
		return appendStr(dst, s), nil
	}
	return dst, encFail("column %q has unknown type tag %d", col.Name, col.Type)
}
