// Package opwire is the wire format of remote operations (REMOTE.md
// revision 1, content type application/vnd.syncular.operations.v1+json):
// a recursively tagged JSON value encoding and the request and response
// messages built from it.
//
// Decoded values are Go values of exactly these types: nil, bool, float64
// ("number", always finite), string, int64 ("integer"), []byte ("bytes"),
// []any ("array") and Object ("object", keys in wire order, unique).
// Decoding is strict: unknown tags, extra or missing keys, non-canonical
// integers (leading zeros, "-0", "+1", outside int64) or base64 (unpadded,
// non-canonical trailing bits), duplicate object keys and nesting deeper
// than MaxDepth are all errors. Every decoding error is an *syncerr.Error
// with code operation.invalid_request.
package opwire

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/synclane/synclane/protocol/syncerr"
)

// ContentType is the HTTP content type of requests and responses.
const ContentType = "application/vnd.syncular.operations.v1+json"

// MaxDepth bounds the nesting of arrays and objects in one value (the
// message object itself is depth 1).
const MaxDepth = 32

// Field is one key of an Object.
type Field struct {
	Key   string
	Value any
}

// Object is a decoded object value: its fields in wire order, keys unique.
type Object []Field

// Get returns the value of key and whether it is present.
func (o Object) Get(key string) (any, bool) {
	for _, f := range o {
		if f.Key == key {
			return f.Value, true
		}
	}
	return nil, false
}

// invalid returns an operation.invalid_request error.
func invalid(format string, args ...any) *syncerr.Error {
	return syncerr.New(syncerr.OperationInvalidRequest, format, args...)
}

// Decode decodes one tagged value from JSON text.
func Decode(data []byte) (any, error) {
	if !utf8.Valid(data) {
		return nil, invalid("the message is not valid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var raw any
	if err := dec.Decode(&raw); err != nil {
		return nil, invalid("the message is not JSON: %v", err)
	}
	if _, err := dec.Token(); err == nil {
		return nil, invalid("the message has data after its value")
	}
	return fromJSON(raw, 1, "$")
}

func fromJSON(raw any, depth int, path string) (any, error) {
	if depth > MaxDepth {
		return nil, invalid("%s: values nest deeper than %d", path, MaxDepth)
	}
	m, ok := raw.(map[string]any)
	if !ok {
		return nil, invalid("%s: a tagged value must be a JSON object", path)
	}
	t, ok := m["t"].(string)
	if !ok {
		return nil, invalid("%s: the tag \"t\" is missing or not a string", path)
	}
	v, hasV := m["v"]
	want := 2
	if t == "null" {
		want = 1
	}
	if len(m) != want || (want == 2 && !hasV) {
		return nil, invalid("%s: a %q value has keys other than \"t\"%s", path, t, map[bool]string{true: " and \"v\""}[want == 2])
	}
	switch t {
	case "null":
		return nil, nil
	case "boolean":
		b, ok := v.(bool)
		if !ok {
			return nil, invalid("%s: boolean value is not true or false", path)
		}
		return b, nil
	case "number":
		n, ok := v.(json.Number)
		if !ok {
			return nil, invalid("%s: number value is not a JSON number", path)
		}
		f, err := strconv.ParseFloat(string(n), 64)
		if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
			return nil, invalid("%s: number %s is not a finite double", path, n)
		}
		return f, nil
	case "string":
		s, ok := v.(string)
		if !ok {
			return nil, invalid("%s: string value is not a JSON string", path)
		}
		return s, nil
	case "integer":
		s, ok := v.(string)
		if !ok {
			return nil, invalid("%s: integer value is not a decimal string", path)
		}
		i, err := ParseInteger(s)
		if err != nil {
			return nil, invalid("%s: %v", path, err)
		}
		return i, nil
	case "bytes":
		s, ok := v.(string)
		if !ok {
			return nil, invalid("%s: bytes value is not a base64 string", path)
		}
		b, err := base64.StdEncoding.Strict().DecodeString(s)
		if err != nil || base64.StdEncoding.EncodeToString(b) != s {
			return nil, invalid("%s: bytes value is not canonical padded base64", path)
		}
		return b, nil
	case "array":
		a, ok := v.([]any)
		if !ok {
			return nil, invalid("%s: array value is not a JSON array", path)
		}
		out := make([]any, len(a))
		for i, e := range a {
			d, err := fromJSON(e, depth+1, path+"["+strconv.Itoa(i)+"]")
			if err != nil {
				return nil, err
			}
			out[i] = d
		}
		return out, nil
	case "object":
		a, ok := v.([]any)
		if !ok {
			return nil, invalid("%s: object value is not a JSON array of [key, value] pairs", path)
		}
		out := make(Object, 0, len(a))
		seen := make(map[string]bool, len(a))
		for i, e := range a {
			pair, ok := e.([]any)
			if !ok || len(pair) != 2 {
				return nil, invalid("%s: object entry %d is not a [key, value] pair", path, i)
			}
			k, ok := pair[0].(string)
			if !ok {
				return nil, invalid("%s: object entry %d has a key that is not a string", path, i)
			}
			if seen[k] {
				return nil, invalid("%s: object key %q repeats", path, k)
			}
			seen[k] = true
			d, err := fromJSON(pair[1], depth+1, path+"."+k)
			if err != nil {
				return nil, err
			}
			out = append(out, Field{Key: k, Value: d})
		}
		return out, nil
	}
	return nil, invalid("%s: unknown tag %q", path, t)
}

// ParseInteger parses the canonical decimal form of a signed 64-bit
// integer: no sign but a leading "-", no leading zeros, no "-0".
func ParseInteger(s string) (int64, error) {
	if s == "" || s == "-" || s == "-0" || s[0] == '+' ||
		(s[0] == '0' && len(s) > 1) || (s[0] == '-' && len(s) > 1 && s[1] == '0') {
		return 0, fmt.Errorf("integer %q is not in canonical decimal form", s)
	}
	i, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("integer %q is not a signed 64-bit decimal", s)
	}
	return i, nil
}

// Encode encodes v as a tagged value. Besides the decoded types it accepts
// int, int32, uint32 and float32 (as integer or number), map[string]any
// (an object with sorted keys), []string and []Object. NaN and infinities
// fail, like any other type.
func Encode(v any) ([]byte, error) {
	return appendValue(nil, v, 1)
}

func appendValue(b []byte, v any, depth int) ([]byte, error) {
	if depth > MaxDepth {
		return nil, fmt.Errorf("opwire: values nest deeper than %d", MaxDepth)
	}
	switch x := v.(type) {
	case nil:
		return append(b, `{"t":"null"}`...), nil
	case bool:
		b = strconv.AppendBool(append(b, `{"t":"boolean","v":`...), x)
		return append(b, '}'), nil
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return nil, fmt.Errorf("opwire: %v is not a finite number", x)
		}
		b = append(b, `{"t":"number","v":`...)
		b = strconv.AppendFloat(b, x, 'g', -1, 64)
		return append(b, '}'), nil
	case float32:
		return appendValue(b, float64(x), depth)
	case int64:
		b = append(b, `{"t":"integer","v":"`...)
		b = strconv.AppendInt(b, x, 10)
		return append(b, `"}`...), nil
	case int:
		return appendValue(b, int64(x), depth)
	case int32:
		return appendValue(b, int64(x), depth)
	case uint32:
		return appendValue(b, int64(x), depth)
	case string:
		b = append(b, `{"t":"string","v":`...)
		b = appendJSONString(b, x)
		return append(b, '}'), nil
	case []byte:
		b = append(b, `{"t":"bytes","v":"`...)
		b = base64.StdEncoding.AppendEncode(b, x)
		return append(b, `"}`...), nil
	case []any:
		b = append(b, `{"t":"array","v":[`...)
		for i, e := range x {
			if i > 0 {
				b = append(b, ',')
			}
			var err error
			if b, err = appendValue(b, e, depth+1); err != nil {
				return nil, err
			}
		}
		return append(b, "]}"...), nil
	case []string:
		a := make([]any, len(x))
		for i, s := range x {
			a[i] = s
		}
		return appendValue(b, a, depth)
	case []Object:
		a := make([]any, len(x))
		for i, o := range x {
			a[i] = o
		}
		return appendValue(b, a, depth)
	case Object:
		b = append(b, `{"t":"object","v":[`...)
		for i, f := range x {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, '[')
			b = appendJSONString(b, f.Key)
			b = append(b, ',')
			var err error
			if b, err = appendValue(b, f.Value, depth+1); err != nil {
				return nil, err
			}
			b = append(b, ']')
		}
		return append(b, "]}"...), nil
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		o := make(Object, len(keys))
		for i, k := range keys {
			o[i] = Field{k, x[k]}
		}
		return appendValue(b, o, depth)
	}
	return nil, fmt.Errorf("opwire: cannot encode a value of Go type %T", v)
}

// appendJSONString appends s as a JSON string (invalid UTF-8 becomes
// U+FFFD, as encoding/json does).
func appendJSONString(b []byte, s string) []byte {
	q, _ := json.Marshal(s)
	return append(b, q...)
}
