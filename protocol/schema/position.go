package schema

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// PositionError is a Parse error located in the schema text: Line and
// Column (1-based; the column counts bytes) of the byte at Offset. Parse
// locates JSON syntax errors, values of the wrong type, unknown fields,
// trailing data, and compile errors of one table (at the start of that
// table's object).
type PositionError struct {
	Offset       int64
	Line, Column int
	Err          error
}

// Error returns "line L, column C: " and the cause.
func (e *PositionError) Error() string {
	return fmt.Sprintf("line %d, column %d: %v", e.Line, e.Column, e.Err)
}

// Unwrap returns the cause.
func (e *PositionError) Unwrap() error { return e.Err }

// tableError is a compile error of src.Tables[index].
type tableError struct {
	index int
	err   error
}

func (e *tableError) Error() string { return e.err.Error() }
func (e *tableError) Unwrap() error { return e.err }

// positioned wraps err in a PositionError at offset of data.
func positioned(data []byte, offset int64, err error) error {
	if offset < 0 || offset > int64(len(data)) {
		return err
	}
	before := data[:offset]
	line := bytes.Count(before, []byte{'\n'}) + 1
	col := int(offset) - (bytes.LastIndexByte(before, '\n') + 1) + 1
	return &PositionError{Offset: offset, Line: line, Column: col, Err: err}
}

// locate returns err located in data where it can be, else err.
func locate(data []byte, err error) error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	var tab *tableError
	switch {
	case errors.As(err, &syn):
		return positioned(data, max(syn.Offset-1, 0), err)
	case errors.As(err, &typ):
		return positioned(data, valueStart(data, typ.Offset), err)
	case errors.As(err, &tab):
		if off, ok := tableOffset(data, tab.index); ok {
			return positioned(data, off, err)
		}
	default:
		// encoding/json's unknown-field error names the field but carries
		// no offset: find the first object key of that name.
		const prefix = `json: unknown field "`
		msg := err.Error()
		if i := strings.Index(msg, prefix); i >= 0 {
			name := strings.TrimSuffix(msg[i+len(prefix):], `"`)
			if off, ok := keyOffset(data, name); ok {
				return positioned(data, off, err)
			}
		}
	}
	return err
}

// tableOffset returns the offset of the '{' of tables[index] in data.
func tableOffset(data []byte, index int) (int64, bool) {
	dec := json.NewDecoder(bytes.NewReader(data))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return 0, false
	}
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return 0, false
		}
		if k != "tables" {
			var skip json.RawMessage
			if dec.Decode(&skip) != nil {
				return 0, false
			}
			continue
		}
		if t, err := dec.Token(); err != nil || t != json.Delim('[') {
			return 0, false
		}
		for i := 0; dec.More(); i++ {
			if i == index {
				// InputOffset is past the previous value (and its comma):
				// skip white space and commas to the element's first byte.
				off := dec.InputOffset()
				for off < int64(len(data)) && strings.IndexByte(" \t\r\n,", data[off]) >= 0 {
					off++
				}
				return off, true
			}
			var skip json.RawMessage
			if dec.Decode(&skip) != nil {
				return 0, false
			}
		}
		return 0, false
	}
	return 0, false
}

// keyOffset returns the offset of the first object key equal to name.
func keyOffset(data []byte, name string) (int64, bool) {
	dec := json.NewDecoder(bytes.NewReader(data))
	// A stack of "the next string token in this object is a key".
	var inObject []bool
	expectKey := false
	for {
		start := dec.InputOffset()
		t, err := dec.Token()
		if err != nil {
			return 0, false
		}
		switch v := t.(type) {
		case json.Delim:
			switch v {
			case '{':
				inObject = append(inObject, true)
				expectKey = true
				continue
			case '[':
				inObject = append(inObject, false)
				expectKey = false
				continue
			default:
				inObject = inObject[:len(inObject)-1]
			}
		case string:
			if expectKey {
				if v == name {
					for start < int64(len(data)) && data[start] != '"' {
						start++
					}
					return start, true
				}
				expectKey = false
				continue
			}
		}
		// a value ended: in an object the next token is a key
		expectKey = len(inObject) > 0 && inObject[len(inObject)-1]
	}
}

// valueStart returns the offset of the first byte of the scalar JSON value
// ending at end (encoding/json reports a type error's offset past the
// value); an object or array is located at its end.
func valueStart(data []byte, end int64) int64 {
	o := min(end, int64(len(data))) - 1
	for o > 0 && strings.IndexByte(" \t\r\n", data[o]) >= 0 {
		o--
	}
	if o < 0 {
		return 0
	}
	if data[o] == '"' {
		for o--; o > 0; o-- {
			if data[o] == '"' && data[o-1] != '\\' {
				return o
			}
		}
		return max(o, 0)
	}
	for o > 0 && strings.IndexByte("0123456789+-.eEtruefalsn", data[o-1]) >= 0 {
		o--
	}
	return o
}
