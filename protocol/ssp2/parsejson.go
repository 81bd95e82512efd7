package ssp2

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
)

// fields is one parsed JSON object with strict accessors: every key must be
// consumed (unknown keys are an error) and the first problem is sticky.
type fields struct {
	where string
	// version is the wire version of the message rendering the object
	// belongs to (0 outside a message), for members that only some
	// versions carry.
	version uint16
	m       map[string]json.RawMessage
	used    map[string]bool
	err     error
}

func parseObject(where string, raw json.RawMessage) (*fields, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil || m == nil {
		return nil, fmt.Errorf("ssp2: %s: expected a JSON object", where)
	}
	return &fields{where: where, m: m, used: map[string]bool{}}, nil
}

func (f *fields) failf(format string, args ...any) {
	if f.err == nil {
		f.err = fmt.Errorf("ssp2: %s: %s", f.where, fmt.Sprintf(format, args...))
	}
}

func (f *fields) get(k string, required bool) (json.RawMessage, bool) {
	v, ok := f.m[k]
	f.used[k] = true
	if !ok {
		if required {
			f.failf("missing %q", k)
		}
		return nil, false
	}
	return v, true
}

func (f *fields) has(k string) bool { _, ok := f.m[k]; return ok }

func (f *fields) done() error {
	if f.err != nil {
		return f.err
	}
	var extra []string
	for k := range f.m {
		if !f.used[k] {
			extra = append(extra, k)
		}
	}
	if len(extra) > 0 {
		sort.Strings(extra)
		return fmt.Errorf("ssp2: %s: unexpected field(s) %s", f.where, strings.Join(extra, ", "))
	}
	return nil
}

func (f *fields) str(k string) string {
	v, ok := f.get(k, true)
	if !ok {
		return ""
	}
	var s string
	if json.Unmarshal(v, &s) != nil {
		f.failf("%q must be a string", k)
	}
	return s
}

func (f *fields) optStr(k string) *string {
	if !f.has(k) {
		f.used[k] = true
		return nil
	}
	s := f.str(k)
	return &s
}

func parseInt(v json.RawMessage) (int64, bool) {
	s := string(bytes.TrimSpace(v))
	x, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, false
	}
	return x, true
}

func (f *fields) int(k string, lo, hi int64) int64 {
	v, ok := f.get(k, true)
	if !ok {
		return 0
	}
	x, ok := parseInt(v)
	if !ok || x < lo || x > hi {
		f.failf("%q must be an integer in [%d, %d]", k, lo, hi)
	}
	return x
}

func (f *fields) i64(k string) int64 { return f.int(k, -MaxSafeInt, MaxSafeInt) }
func (f *fields) i32(k string) int32 { return int32(f.int(k, math.MinInt32, math.MaxInt32)) }

func (f *fields) optI64(k string) *int64 {
	if !f.has(k) {
		f.used[k] = true
		return nil
	}
	x := f.i64(k)
	return &x
}

func (f *fields) optI32(k string) *int32 {
	if !f.has(k) {
		f.used[k] = true
		return nil
	}
	x := f.i32(k)
	return &x
}

func (f *fields) boolean(k string) bool {
	v, ok := f.get(k, true)
	if !ok {
		return false
	}
	var x bool
	if json.Unmarshal(v, &x) != nil {
		f.failf("%q must be a boolean", k)
	}
	return x
}

func (f *fields) b64(k string, required bool) []byte {
	v, ok := f.get(k, required)
	if !ok {
		return nil
	}
	var s string
	if json.Unmarshal(v, &s) != nil {
		f.failf("%q must be a base64 string", k)
		return nil
	}
	out, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		f.failf("%q: %v", k, err)
		return nil
	}
	if out == nil {
		out = []byte{}
	}
	return out
}

// jsonVal returns a json-typed field compacted (member order and number
// literals preserved; insignificant whitespace cannot be recovered).
func (f *fields) jsonVal(k string) json.RawMessage {
	v, ok := f.get(k, false)
	if !ok {
		return nil
	}
	c, err := compactJSON(v)
	if err != nil {
		f.failf("%q: %v", k, err)
	}
	return c
}

func (f *fields) enum(k string, names []string) int {
	s := f.str(k)
	for i, n := range names {
		if n != "" && n == s {
			return i
		}
	}
	if f.err == nil {
		f.failf("%q: unknown value %q", k, s)
	}
	return 0
}

func (f *fields) listMap(k string) map[string][]string {
	v, ok := f.get(k, true)
	if !ok {
		return nil
	}
	var m map[string][]string
	if json.Unmarshal(v, &m) != nil || m == nil {
		f.failf("%q must be an object of string lists", k)
	}
	for key, l := range m {
		if l == nil {
			m[key] = []string{}
		}
	}
	return m
}

func (f *fields) strMap(k string) map[string]string {
	v, ok := f.get(k, true)
	if !ok {
		return nil
	}
	var m map[string]string
	if json.Unmarshal(v, &m) != nil || m == nil {
		f.failf("%q must be an object of strings", k)
	}
	return m
}

func (f *fields) list(k string) []json.RawMessage {
	v, ok := f.get(k, true)
	if !ok {
		return nil
	}
	var l []json.RawMessage
	if json.Unmarshal(v, &l) != nil || l == nil {
		f.failf("%q must be an array", k)
	}
	return l
}

func (f *fields) strList(k string) []string {
	v, ok := f.get(k, true)
	if !ok {
		return nil
	}
	var l []string
	if json.Unmarshal(v, &l) != nil || l == nil {
		f.failf("%q must be an array of strings", k)
	}
	return l
}

// ParseJSON parses a §11.1 message rendering (the inverse of RenderJSON).
// Unknown fields are errors. json-typed fields are re-serialized compactly
// (member order and number text kept), so a message whose JSON fields had
// insignificant whitespace re-encodes with that whitespace removed. The
// result is not validated; Encode does that.
func ParseJSON(b []byte) (*Message, error) {
	top, err := parseObject("message", b)
	if err != nil {
		return nil, err
	}
	if m := top.str("magic"); top.err == nil && m != Magic {
		top.failf("magic %q is not %q", m, Magic)
	}
	m := &Message{WireVersion: uint16(top.int("wireVersion", 0, math.MaxUint16))}
	switch k := top.str("msgKind"); k {
	case "request":
		m.Kind = KindRequest
	case "response":
		m.Kind = KindResponse
	default:
		top.failf("unknown msgKind %q", k)
	}
	frames := top.list("frames")
	if err := top.done(); err != nil {
		return nil, err
	}
	for i, raw := range frames {
		f, err := parseObject(fmt.Sprintf("frames[%d]", i), raw)
		if err != nil {
			return nil, err
		}
		f.version = m.WireVersion
		fr := parseFrame(f)
		if err := f.done(); err != nil {
			return nil, err
		}
		m.Frames = append(m.Frames, fr)
	}
	return m, nil
}

func subObjects(f *fields, k string) []*fields {
	var out []*fields
	for i, raw := range f.list(k) {
		sub, err := parseObject(fmt.Sprintf("%s.%s[%d]", f.where, k, i), raw)
		if err != nil {
			f.failf("%v", err)
			return nil
		}
		sub.version = f.version
		out = append(out, sub)
	}
	return out
}

func finishSub(f *fields, sub *fields) {
	if err := sub.done(); err != nil && f.err == nil {
		f.err = err
	}
}

// ParseSegmentJSON parses a §11.1 rule-8 segment rendering (the inverse of
// RenderSegmentJSON). json column values are re-serialized compactly
// (member order and number text kept); insignificant whitespace of the
// original text cannot be recovered from a rendering. A null float cannot
// be told apart from NULL and is read as NULL.
func ParseSegmentJSON(b []byte) (*Segment, error) {
	top, err := parseObject("segment", b)
	if err != nil {
		return nil, err
	}
	if m := top.str("magic"); top.err == nil && m != SegmentMagic {
		top.failf("magic %q is not %q", m, SegmentMagic)
	}
	s := &Segment{FormatVersion: uint16(top.int("formatVersion", 0, math.MaxUint16)), Table: top.str("table"), SchemaVersion: top.i32("schemaVersion")}
	s.Columns = parseColumns(top, "columns")
	blocks := top.list("blocks")
	if err := top.done(); err != nil {
		return nil, err
	}
	for bi, raw := range blocks {
		var rows []json.RawMessage
		if json.Unmarshal(raw, &rows) != nil {
			return nil, fmt.Errorf("ssp2: blocks[%d] must be an array", bi)
		}
		block := make([]SegmentRow, 0, len(rows))
		for ri, rr := range rows {
			f, err := parseObject(fmt.Sprintf("blocks[%d][%d]", bi, ri), rr)
			if err != nil {
				return nil, err
			}
			row := SegmentRow{ServerVersion: f.i64("serverVersion")}
			vraw, _ := f.get("values", true)
			if err := f.done(); err != nil {
				return nil, err
			}
			if row.Values, err = parseRowValues(f.where, s.Columns, vraw); err != nil {
				return nil, err
			}
			block = append(block, row)
		}
		s.Blocks = append(s.Blocks, block)
	}
	return s, nil
}

// parseColumns reads the rule-8 column table under key k of f.
func parseColumns(f *fields, k string) []Column {
	var cols []Column
	for _, c := range subObjects(f, k) {
		col := Column{Name: c.str("name"), Nullable: c.boolean("nullable")}
		tn := c.str("type")
		t, ok := columnTypeByName(tn)
		if !ok && c.err == nil {
			c.failf("unknown column type %q", tn)
		}
		col.Type = t
		finishSub(f, c)
		cols = append(cols, col)
	}
	return cols
}

// parseRowValues reads the rule-8 values object of a full row: every
// column has its key.
func parseRowValues(where string, cols []Column, raw json.RawMessage) (Row, error) {
	row, _, err := parseValues(where, cols, raw, false)
	return row, err
}

// parseValues reads a values object of cols. A full row (sparse false)
// needs every column's key; a sparse row (rule 11) has the keys of its
// present columns only, and their set is returned. Either way a key that
// names no column is an error.
func parseValues(where string, cols []Column, raw json.RawMessage, sparse bool) (Row, ColumnSet, error) {
	f, err := parseObject(where+".values", raw)
	if err != nil {
		return nil, nil, err
	}
	row := make(Row, len(cols))
	var present ColumnSet
	if sparse {
		present = NewColumnSet(len(cols))
	}
	for i, c := range cols {
		v, ok := f.get(c.Name, !sparse)
		if !ok {
			if sparse {
				continue
			}
			break
		}
		if sparse {
			present.Add(i)
		}
		if string(bytes.TrimSpace(v)) == "null" {
			continue
		}
		switch c.Type {
		case TypeString, TypeBlobRef:
			row[i] = f.str(c.Name)
		case TypeInteger:
			row[i] = f.i64(c.Name)
		case TypeFloat:
			var x float64
			if json.Unmarshal(v, &x) != nil {
				f.failf("%q must be a number", c.Name)
			}
			row[i] = x
		case TypeBoolean:
			row[i] = f.boolean(c.Name)
		case TypeJSON:
			cj, err := compactJSON(v)
			if err != nil {
				f.failf("%q: %v", c.Name, err)
			}
			row[i] = json.RawMessage(cj)
		case TypeBytes, TypeCRDT:
			row[i] = f.b64(c.Name, true)
		default:
			f.failf("column %q has unknown type", c.Name)
		}
	}
	if err := f.done(); err != nil {
		return nil, nil, err
	}
	return row, present, nil
}
