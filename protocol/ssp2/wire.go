package ssp2

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"unicode/utf8"
)

// MaxSafeInt is 2^53-1, the bound of every i64 on the wire.
const MaxSafeInt = 1<<53 - 1

// rd is a bounds-checked little-endian reader with a sticky error. After
// the first failure every method returns zero values and stops advancing.
type rd struct {
	b    []byte
	off  int
	base int // absolute offset of b[0], for error reporting
	err  error
}

func (r *rd) fail(format string, args ...any) {
	if r.err == nil {
		r.err = decodeFail(r.base+r.off, fmt.Sprintf(format, args...))
		r.off = len(r.b)
	}
}

func (r *rd) remaining() int { return len(r.b) - r.off }

func (r *rd) need(n int, what string) bool {
	if r.err != nil {
		return false
	}
	if n < 0 || r.remaining() < n {
		r.fail("truncated %s: need %d bytes, have %d", what, n, r.remaining())
		return false
	}
	return true
}

func (r *rd) u8(what string) uint8 {
	if !r.need(1, what) {
		return 0
	}
	v := r.b[r.off]
	r.off++
	return v
}

func (r *rd) u16(what string) uint16 {
	if !r.need(2, what) {
		return 0
	}
	v := binary.LittleEndian.Uint16(r.b[r.off:])
	r.off += 2
	return v
}

func (r *rd) u32(what string) uint32 {
	if !r.need(4, what) {
		return 0
	}
	v := binary.LittleEndian.Uint32(r.b[r.off:])
	r.off += 4
	return v
}

func (r *rd) i32(what string) int32 { return int32(r.u32(what)) }

func (r *rd) i64(what string) int64 {
	if !r.need(8, what) {
		return 0
	}
	v := int64(binary.LittleEndian.Uint64(r.b[r.off:]))
	if v > MaxSafeInt || v < -MaxSafeInt {
		r.fail("%s: i64 %d outside ±(2^53-1)", what, v)
		return 0
	}
	r.off += 8
	return v
}

func (r *rd) f64(what string) float64 {
	if !r.need(8, what) {
		return 0
	}
	v := math.Float64frombits(binary.LittleEndian.Uint64(r.b[r.off:]))
	r.off += 8
	return v
}

func (r *rd) boolean(what string) bool { return r.zeroOne(what, "bool") }

// opt reads a presence byte.
func (r *rd) opt(what string) bool { return r.zeroOne(what, "presence") }

// zeroOne reads a byte that must be 0x00 or 0x01 (a bool or an opt
// presence byte); anything else is a decode error.
func (r *rd) zeroOne(what, kind string) bool {
	if !r.need(1, what) {
		return false
	}
	switch r.b[r.off] {
	case 0:
		r.off++
		return false
	case 1:
		r.off++
		return true
	}
	r.fail("%s: %s byte 0x%02x", what, kind, r.b[r.off])
	return false
}

// rawBytes reads a u32 length and returns that many bytes, aliasing the input.
func (r *rd) rawBytes(what string) []byte {
	n := r.u32(what)
	if r.err != nil {
		return nil
	}
	if uint64(n) > uint64(r.remaining()) {
		r.fail("%s: length %d exceeds remaining %d bytes", what, n, r.remaining())
		return nil
	}
	v := r.b[r.off : r.off+int(n) : r.off+int(n)]
	r.off += int(n)
	return v
}

// strBytes reads a str and returns its validated UTF-8 bytes (aliasing).
func (r *rd) strBytes(what string) []byte {
	start := r.off
	v := r.rawBytes(what)
	if r.err != nil {
		return nil
	}
	if !utf8.Valid(v) {
		r.off = start
		r.fail("%s: invalid UTF-8", what)
		return nil
	}
	return v
}

func (r *rd) str(what string) string {
	v := r.strBytes(what)
	if r.err != nil || len(v) == 0 {
		return ""
	}
	return string(v)
}

func (r *rd) strNonEmpty(what string) string {
	start := r.off
	s := r.str(what)
	if r.err == nil && s == "" {
		r.off = start
		r.fail("%s must be non-empty", what)
	}
	return s
}

// jsonText reads a json value (str that parses as JSON), aliasing the input.
func (r *rd) jsonText(what string) json.RawMessage {
	start := r.off
	v := r.strBytes(what)
	if r.err != nil {
		return nil
	}
	if !json.Valid(v) {
		r.off = start
		r.fail("%s: not a JSON document", what)
		return nil
	}
	if v == nil {
		v = r.b[r.off:r.off]
	}
	return json.RawMessage(v)
}

// count reads a u32 item count and caps it by the bytes remaining, given the
// minimum encoded size of one item.
func (r *rd) count(what string, minItem int) int {
	start := r.off
	n := r.u32(what)
	if r.err != nil {
		return 0
	}
	if minItem < 1 {
		minItem = 1
	}
	if uint64(n)*uint64(minItem) > uint64(r.remaining()) {
		r.off = start
		r.fail("%s: count %d cannot fit in %d remaining bytes", what, n, r.remaining())
		return 0
	}
	return int(n)
}

// --- append helpers ---

func appendU16(b []byte, v uint16) []byte { return binary.LittleEndian.AppendUint16(b, v) }
func appendU32(b []byte, v uint32) []byte { return binary.LittleEndian.AppendUint32(b, v) }
func appendI32(b []byte, v int32) []byte  { return binary.LittleEndian.AppendUint32(b, uint32(v)) }
func appendI64(b []byte, v int64) []byte  { return binary.LittleEndian.AppendUint64(b, uint64(v)) }
func appendF64(b []byte, v float64) []byte {
	return binary.LittleEndian.AppendUint64(b, math.Float64bits(v))
}
func appendBool(b []byte, v bool) []byte {
	if v {
		return append(b, 1)
	}
	return append(b, 0)
}
func appendStr(b []byte, s string) []byte {
	b = appendU32(b, uint32(len(s)))
	return append(b, s...)
}
func appendBytes(b []byte, v []byte) []byte {
	b = appendU32(b, uint32(len(v)))
	return append(b, v...)
}

func safeInt(v int64) bool { return v <= MaxSafeInt && v >= -MaxSafeInt }

func checkI64(what string, v int64) error {
	if !safeInt(v) {
		return encFail("%s: i64 %d outside ±(2^53-1)", what, v)
	}
	return nil
}

func checkStr(what, s string) error {
	if !utf8.ValidString(s) {
		return encFail("%s: invalid UTF-8", what)
	}
	if uint64(len(s)) > math.MaxUint32 {
		return encFail("%s: too long", what)
	}
	return nil
}

func checkJSON(what string, v []byte) error {
	if !utf8.Valid(v) || !json.Valid(v) {
		return encFail("%s: not a JSON document", what)
	}
	return nil
}

func appendOptI32(b []byte, v *int32) []byte {
	if v == nil {
		return append(b, 0)
	}
	b = append(b, 1)
	return appendI32(b, *v)
}

func appendOptStr(b []byte, what string, v *string) ([]byte, error) {
	if v == nil {
		return append(b, 0), nil
	}
	if err := checkStr(what, *v); err != nil {
		return b, err
	}
	b = append(b, 1)
	return appendStr(b, *v), nil
}

func appendOptJSON(b []byte, what string, v []byte) ([]byte, error) {
	if v == nil {
		return append(b, 0), nil
	}
	if err := checkJSON(what, v); err != nil {
		return b, err
	}
	b = append(b, 1)
	return appendBytes(b, v), nil
}
