package ssp2

import (
	"encoding/base64"
	"encoding/json"
	"strconv"
)

// obj appends one JSON object member by member, in call order.
type obj struct {
	b *[]byte
	n int
}

func openObj(b *[]byte) *obj { *b = append(*b, '{'); return &obj{b: b} }

func (o *obj) key(k string) {
	if o.n > 0 {
		*o.b = append(*o.b, ',')
	}
	o.n++
	*o.b = appendJSONString(*o.b, k)
	*o.b = append(*o.b, ':')
}
func (o *obj) str(k, v string) { o.key(k); *o.b = appendJSONString(*o.b, v) }
func (o *obj) num(k string, v int64) {
	o.key(k)
	*o.b = strconv.AppendInt(*o.b, v, 10)
}
func (o *obj) boolean(k string, v bool) { o.key(k); *o.b = strconv.AppendBool(*o.b, v) }
func (o *obj) b64(k string, v []byte) {
	o.key(k)
	*o.b = append(*o.b, '"')
	*o.b = base64.StdEncoding.AppendEncode(*o.b, v)
	*o.b = append(*o.b, '"')
}
func (o *obj) raw(k string, v []byte) { o.key(k); *o.b = append(*o.b, v...) }
func (o *obj) close()                 { *o.b = append(*o.b, '}') }

// jsonField writes a json-typed member, refusing a value that is not JSON.
func (o *obj) jsonField(k string, v []byte) error {
	if !json.Valid(v) {
		return encFail("%s is not valid JSON", k)
	}
	o.raw(k, v)
	return nil
}

func (o *obj) strList(k string, l []string) { o.key(k); *o.b = appendStrList(*o.b, l) }

func (o *obj) listMap(k string, m map[string][]string) { o.key(k); *o.b = renderListMap(*o.b, m) }

func (o *obj) strMap(k string, m map[string]string) { o.key(k); *o.b = renderStrMap(*o.b, m) }

// objects writes an array member of n objects; each fills the i-th.
func (o *obj) objects(k string, n int, each func(e *obj, i int)) {
	o.key(k)
	*o.b = append(*o.b, '[')
	for i := 0; i < n; i++ {
		if i > 0 {
			*o.b = append(*o.b, ',')
		}
		e := openObj(o.b)
		each(e, i)
		e.close()
	}
	*o.b = append(*o.b, ']')
}

// enumName returns the rendering name of enum value v from its name list
// (indexed by value; "" for a value without a name).
func enumName(names []string, v int) string {
	if v < 0 || v >= len(names) {
		return ""
	}
	return names[v]
}

func appendStrList(b []byte, l []string) []byte {
	b = append(b, '[')
	for i, s := range l {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, s)
	}
	return append(b, ']')
}

func renderListMap(b []byte, m map[string][]string) []byte {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sortKeysUTF16(keys)
	o := openObj(&b)
	for _, k := range keys {
		o.key(k)
		b = appendStrList(b, m[k])
	}
	o.close()
	return b
}

func renderStrMap(b []byte, m map[string]string) []byte {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sortKeysUTF16(keys)
	o := openObj(&b)
	for _, k := range keys {
		o.str(k, m[k])
	}
	o.close()
	return b
}

// RenderJSON renders m as its canonical §11.1 JSON debug rendering: frames
// in wire order with fields in layout order, absent opts omitted, binary
// fields standard base64, enums by name, json-typed fields embedded
// verbatim (so parsed as JSON), unknown frames as
// {"type":"UNKNOWN","frameType":n,"payload":b64}. The message is not
// validated beyond what rendering needs.
func RenderJSON(m *Message) ([]byte, error) {
	if m == nil {
		return nil, encFail("nil message")
	}
	if err := checkEnvelope(m.WireVersion, m.Kind); err != nil {
		return nil, err
	}
	b := make([]byte, 0, 512)
	top := openObj(&b)
	top.str("magic", Magic)
	top.num("wireVersion", int64(m.WireVersion))
	top.str("msgKind", kindName(m.Kind))
	top.key("frames")
	b = append(b, '[')
	for i, f := range m.Frames {
		if i > 0 {
			b = append(b, ',')
		}
		var err error
		if b, err = renderFrame(b, f, m.WireVersion); err != nil {
			return nil, err
		}
	}
	b = append(b, ']')
	top.close()
	return b, nil
}

// RenderSegmentJSON renders s as its §11.1 rule-8 JSON: columns with type
// names, blocks of {"serverVersion","values":{name: value}}; NULL as null,
// bytes and crdt as base64, json values embedded verbatim, blob_ref values
// as strings, non-finite floats as null.
func RenderSegmentJSON(s *Segment) ([]byte, error) {
	if s == nil {
		return nil, encFail("nil segment")
	}
	b := make([]byte, 0, 512)
	top := openObj(&b)
	top.str("magic", SegmentMagic)
	top.num("formatVersion", int64(s.FormatVersion))
	top.str("table", s.Table)
	top.num("schemaVersion", int64(s.SchemaVersion))
	top.key("columns")
	b = appendColumnsJSON(b, s.Columns)
	top.key("blocks")
	b = append(b, '[')
	for i, block := range s.Blocks {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '[')
		for j, row := range block {
			if j > 0 {
				b = append(b, ',')
			}
			ro := openObj(&b)
			ro.num("serverVersion", row.ServerVersion)
			ro.key("values")
			var err error
			if b, err = renderRowValues(b, s.Columns, row.Values); err != nil {
				return nil, err
			}
			ro.close()
		}
		b = append(b, ']')
	}
	b = append(b, ']')
	top.close()
	return b, nil
}

// appendColumnsJSON appends the §11.1 rule-8 column table: an array of
// {"name","type","nullable"} objects, the type by name.
func appendColumnsJSON(b []byte, cols []Column) []byte {
	b = append(b, '[')
	for i, c := range cols {
		if i > 0 {
			b = append(b, ',')
		}
		co := openObj(&b)
		co.str("name", c.Name)
		co.str("type", ColumnTypeName(c.Type))
		co.boolean("nullable", c.Nullable)
		co.close()
	}
	return append(b, ']')
}

// renderRowValues appends the rule-8 values object of a full row.
func renderRowValues(b []byte, cols []Column, row Row) ([]byte, error) {
	return renderValues(b, cols, row, nil, false)
}

// renderValues appends a values object {name: value} in column order: of
// every column, or (sparse) of the columns present holds, which must then
// be a presence set over cols (rule 11).
func renderValues(b []byte, cols []Column, row Row, present ColumnSet, sparse bool) ([]byte, error) {
	if len(row) != len(cols) {
		return b, encFail("row has %d values for %d columns", len(row), len(cols))
	}
	if sparse && !fitsColumns(present, len(cols)) {
		return b, encFail("presence set does not fit %d columns", len(cols))
	}
	o := openObj(&b)
	for i, c := range cols {
		if sparse && !present.Has(i) {
			continue
		}
		o.key(c.Name)
		switch v := row[i].(type) {
		case nil:
			b = append(b, "null"...)
		case string:
			b = appendJSONString(b, v)
		case int64:
			b = strconv.AppendInt(b, v, 10)
		case float64:
			b = appendJSONFloat(b, v)
		case bool:
			b = strconv.AppendBool(b, v)
		case json.RawMessage:
			if !json.Valid(v) {
				return b, encFail("column %q: invalid JSON", c.Name)
			}
			b = append(b, v...)
		case []byte:
			b = append(b, '"')
			b = base64.StdEncoding.AppendEncode(b, v)
			b = append(b, '"')
		default:
			return b, encFail("column %q: unsupported value type %T", c.Name, v)
		}
	}
	o.close()
	return b, nil
}
