// Package rowjson shows the rows of an SSP2 message rendering (ssp2.RenderJSON)
// as JSON values per column, with the column types of a schema, and turns
// them back into row codec bytes:
//
//	PUSH_COMMIT operation  "payload": base64   <->  "values": {column: value}
//	COMMIT change          "row": base64       <->  "values": {column: value}
//	SEGMENT_INLINE         "payload": base64   <->  "segment": {segment rendering}
//
// The columns come from the schema's table of the operation (its "table")
// or of the change (its commit's "tables" at "tableIndex"); an inline
// segment names its own columns. Values take the JSON form of a segment
// rendering's row values (ssp2.RenderRowJSON). Collapse accepts either
// form of each field, so a rendering expanded or not both encode. Other
// members keep their order and text. The conflict record's "serverRow" of
// a PUSH_RESULT stays base64: the response does not name its table.
//
// The rendering's "wireVersion" decides the push payload's codec. From
// wire version 3 on a payload is a sparse row (SPEC §2.4): its "values"
// hold the present columns only (a column without a key is absent, a key
// with null is a present NULL, §11.1 rule 11), and the table's primary key
// must be among them. Before version 3 a payload is a full row and
// "values" has every column. COMMIT rows are full rows in every version.
package rowjson

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"slices"

	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
)

// Expand rewrites the message rendering so that its rows show as values
// per column. A row it cannot read with s (a table s lacks, bytes that are
// not a row of that table) is left as it is, and note (if not nil) is told
// why, in one sentence naming the frame.
func Expand(rendering []byte, s *schema.Schema, note func(msg string)) ([]byte, error) {
	m := &mapper{schema: s, note: func(format string, args ...any) {
		if note != nil {
			note(fmt.Sprintf(format, args...))
		}
	}}
	return m.mapMessage(rendering, true)
}

// Collapse is the inverse of Expand: every "values" and "segment" member
// is encoded with s's column types (the segment with its own) into the
// base64 field it stands for, giving a canonical rendering for
// ssp2.ParseJSON. A row that does not fit its table is an error naming
// the frame and the column.
func Collapse(rendering []byte, s *schema.Schema) ([]byte, error) {
	m := &mapper{schema: s}
	return m.mapMessage(rendering, false)
}

// CheckSegment returns a note when seg's column table is not its table's
// in s (a server on another schema version), or "" when it is.
func CheckSegment(s *schema.Schema, seg *ssp2.Segment) string {
	t := s.Table(seg.Table)
	switch {
	case t == nil:
		return fmt.Sprintf("segment table %q is not in the schema", seg.Table)
	case !slices.Equal(t.Columns, seg.Columns):
		return fmt.Sprintf("segment columns of table %q differ from the schema's (segment schemaVersion %d, schema version %d)",
			seg.Table, seg.SchemaVersion, s.Version)
	}
	return ""
}

// member is one member of a JSON object, in document order.
type member struct {
	key string
	val json.RawMessage
}

// object is a JSON object kept in document order, so that a rewritten
// rendering reads like the canonical one (type first, fields in layout
// order).
type object []member

func parseObject(where string, raw []byte) (object, error) {
	d := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := d.Token(); err != nil || tok != json.Delim('{') {
		return nil, fmt.Errorf("%s: expected a JSON object", where)
	}
	var o object
	for d.More() {
		tok, err := d.Token()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		var v json.RawMessage
		if err := d.Decode(&v); err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		o = append(o, member{key: tok.(string), val: v})
	}
	if _, err := d.Token(); err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	if _, err := d.Token(); err != io.EOF {
		return nil, fmt.Errorf("%s: data after the JSON object", where)
	}
	return o, nil
}

// get returns the value of key k and its index, or -1.
func (o object) get(k string) (json.RawMessage, int) {
	for i, m := range o {
		if m.key == k {
			return m.val, i
		}
	}
	return nil, -1
}

// str returns the string value of key k, or "" if it is absent or not a
// string.
func (o object) str(k string) string {
	v, _ := o.get(k)
	var s string
	_ = json.Unmarshal(v, &s)
	return s
}

func (o object) marshal() []byte {
	b := []byte{'{'}
	for i, m := range o {
		if i > 0 {
			b = append(b, ',')
		}
		k, _ := json.Marshal(m.key)
		b = append(append(append(b, k...), ':'), m.val...)
	}
	return append(b, '}')
}

// rewriteList applies fn to each object of the array under key k of o;
// where is o's path in the message ("" for the top), for error messages.
func (o object) rewriteList(where, k string, fn func(where string, i int, e object) (object, error)) error {
	raw, at := o.get(k)
	if at < 0 {
		return nil
	}
	if where != "" {
		k = where + "." + k
	}
	var list []json.RawMessage
	if err := json.Unmarshal(raw, &list); err != nil {
		return fmt.Errorf("%s must be an array", k)
	}
	for i, r := range list {
		w := fmt.Sprintf("%s[%d]", k, i)
		e, err := parseObject(w, r)
		if err != nil {
			return err
		}
		if e, err = fn(w, i, e); err != nil {
			return err
		}
		list[i] = e.marshal()
	}
	o[at].val, _ = json.Marshal(list)
	return nil
}

// mapper turns the rows of a message rendering into JSON values per
// column (expand) or back (collapse).
type mapper struct {
	schema *schema.Schema
	// note receives what Expand could not show as values (it leaves the
	// base64 in place and says why); nil for Collapse, where that is an
	// error.
	note func(format string, args ...any)
}

// mapMessage rewrites the frames of a message rendering.
func (m *mapper) mapMessage(rendering []byte, expand bool) ([]byte, error) {
	top, err := parseObject("message", rendering)
	if err != nil {
		return nil, err
	}
	// A rendering without a readable wireVersion is refused by
	// ssp2.ParseJSON later; its payloads are read as full rows meanwhile.
	var version uint16
	if raw, at := top.get("wireVersion"); at >= 0 {
		_ = json.Unmarshal(raw, &version)
	}
	sparse := version >= ssp2.WireV3
	err = top.rewriteList("", "frames", func(where string, _ int, f object) (object, error) {
		switch f.str("type") {
		case "PUSH_COMMIT":
			return f, f.rewriteList(where, "operations", func(where string, _ int, op object) (object, error) {
				return m.mapRow(where, op, op.str("table"), "payload", expand, sparse)
			})
		case "COMMIT":
			var tables []string
			if raw, at := f.get("tables"); at >= 0 {
				_ = json.Unmarshal(raw, &tables)
			}
			return f, f.rewriteList(where, "changes", func(where string, _ int, ch object) (object, error) {
				if _, at := ch.get(map[bool]string{true: "row", false: "values"}[expand]); at < 0 {
					return ch, nil // a delete carries no row
				}
				var ti int
				raw, _ := ch.get("tableIndex")
				if json.Unmarshal(raw, &ti) != nil || ti < 0 || ti >= len(tables) {
					return ch, m.fail("%s: tableIndex does not name one of the commit's tables", where)
				}
				return m.mapRow(where, ch, tables[ti], "row", expand, false)
			})
		case "SEGMENT_INLINE":
			return m.mapSegment(where, f, expand)
		}
		return f, nil
	})
	if err != nil {
		return nil, err
	}
	return top.marshal(), nil
}

// fail is an error for encode; for decode it is a note, and the field
// stays as it is.
func (m *mapper) fail(format string, args ...any) error {
	if m.note != nil {
		m.note(format, args...)
		return nil
	}
	return fmt.Errorf(format, args...)
}

// mapRow swaps field (base64 row codec bytes) of e for "values" (expand)
// or back: a full row, or (sparse) a sparse row whose "values" hold its
// present columns only.
func (m *mapper) mapRow(where string, e object, table, field string, expand, sparse bool) (object, error) {
	raw, at := e.get(field)
	vraw, vat := e.get("values")
	if expand && at < 0 || !expand && vat < 0 {
		return e, nil // a delete carries no row
	}
	if !expand && at >= 0 {
		return e, fmt.Errorf("%s: give either %q or \"values\", not both", where, field)
	}
	t := m.schema.Table(table)
	if t == nil {
		return e, m.fail("%s: table %q is not in the schema", where, table)
	}
	codec := ssp2.NewRowCodec(t.Columns)
	if expand {
		var b []byte
		if err := json.Unmarshal(raw, &b); err != nil {
			return e, m.fail("%s.%s: not base64", where, field)
		}
		var v []byte
		if sparse {
			sr, err := codec.DecodeSparse(b, t.PK)
			if err != nil {
				return e, m.fail("%s.%s is not a sparse row of table %q in the schema: %v", where, field, table, err)
			}
			v, err = ssp2.RenderSparseValuesJSON(t.Columns, sr)
			if err != nil {
				return e, m.fail("%s.%s: %v", where, field, err)
			}
		} else {
			row, err := codec.Decode(b)
			if err != nil {
				return e, m.fail("%s.%s is not a row of table %q in the schema: %v", where, field, table, err)
			}
			v, err = ssp2.RenderRowJSON(t.Columns, row)
			if err != nil {
				return e, m.fail("%s.%s: %v", where, field, err)
			}
		}
		e[at] = member{key: "values", val: v}
		return e, nil
	}
	var b []byte
	if sparse {
		sr, err := ssp2.ParseSparseValuesJSON(where, t.Columns, vraw)
		if err != nil {
			return e, err
		}
		if b, err = codec.AppendSparse(nil, sr.Row, sr.Present, t.PK); err != nil {
			return e, fmt.Errorf("%s.values (table %q, a sparse row): %w", where, table, err)
		}
	} else {
		row, err := ssp2.ParseRowJSON(where, t.Columns, vraw)
		if err != nil {
			return e, err
		}
		if b, err = codec.Append(nil, row); err != nil {
			return e, fmt.Errorf("%s.values (table %q): %w", where, table, err)
		}
	}
	e[vat] = member{key: field, val: b64JSON(b)}
	return e, nil
}

// mapSegment swaps SEGMENT_INLINE's "payload" for "segment" (expand) or
// back. The segment names its own columns; decode notes where they differ
// from the schema's table.
func (m *mapper) mapSegment(where string, f object, expand bool) (object, error) {
	raw, at := f.get("payload")
	sraw, sat := f.get("segment")
	if expand && at < 0 || !expand && sat < 0 {
		return f, nil
	}
	if !expand && at >= 0 {
		return f, fmt.Errorf("%s: give either \"payload\" or \"segment\", not both", where)
	}
	if expand {
		var b []byte
		if err := json.Unmarshal(raw, &b); err != nil {
			return f, m.fail("%s.payload: not base64", where)
		}
		seg, err := ssp2.DecodeSegment(b)
		if err != nil {
			return f, m.fail("%s.payload: %v", where, err)
		}
		m.checkSegmentColumns(where, seg)
		r, err := ssp2.RenderSegmentJSON(seg)
		if err != nil {
			return f, m.fail("%s.payload: %v", where, err)
		}
		f[at] = member{key: "segment", val: r}
		return f, nil
	}
	seg, err := ssp2.ParseSegmentJSON(sraw)
	if err != nil {
		return f, fmt.Errorf("%s.segment: %w", where, err)
	}
	b, err := ssp2.EncodeSegment(seg)
	if err != nil {
		return f, fmt.Errorf("%s.segment: %w", where, err)
	}
	f[sat] = member{key: "payload", val: b64JSON(b)}
	return f, nil
}

// checkSegmentColumns notes (expand only) a segment whose column table
// is not its table's in the schema.
func (m *mapper) checkSegmentColumns(where string, seg *ssp2.Segment) {
	if m.note == nil {
		return
	}
	if n := CheckSegment(m.schema, seg); n != "" {
		m.note("%s: %s", where, n)
	}
}

func b64JSON(b []byte) json.RawMessage {
	out := make([]byte, 0, base64.StdEncoding.EncodedLen(len(b))+2)
	out = append(out, '"')
	out = base64.StdEncoding.AppendEncode(out, b)
	return append(out, '"')
}
