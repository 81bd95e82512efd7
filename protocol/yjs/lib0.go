package yjs

import (
	"errors"
	"fmt"
	"unicode/utf16"
	"unicode/utf8"
)

// The lib0 primitives Yjs update v1 is written in: unsigned varints (7 bits
// a byte, least significant group first, high bit = more), signed varints
// (first byte: more bit, sign bit, 6 value bits), and strings as a varint
// byte length plus UTF-8.

// maxSafe is the largest integer a JavaScript number holds exactly: lib0
// refuses larger varints, and so do we.
const maxSafe = 1<<53 - 1

// errTruncated reports input that ends inside a value.
var errTruncated = errors.New("yjs: unexpected end of update")

// reader decodes lib0 values from buf.
type reader struct {
	buf []byte
	pos int
}

func (r *reader) remaining() int { return len(r.buf) - r.pos }

func (r *reader) byte() (byte, error) {
	if r.pos >= len(r.buf) {
		return 0, errTruncated
	}
	b := r.buf[r.pos]
	r.pos++
	return b, nil
}

func (r *reader) uvarint() (uint64, error) {
	var n uint64
	for shift := uint(0); shift < 56; shift += 7 {
		b, err := r.byte()
		if err != nil {
			return 0, err
		}
		n |= uint64(b&0x7f) << shift
		if b < 0x80 {
			if n > maxSafe {
				break
			}
			return n, nil
		}
	}
	return 0, errors.New("yjs: varint exceeds 2^53")
}

// skipVarint skips a lib0 signed varint.
// count reads an element count, refusing one larger than the bytes left
// (every element takes at least one byte), so it can size an allocation.
func (r *reader) count() (uint64, error) {
	n, err := r.uvarint()
	if err != nil {
		return 0, err
	}
	if n > uint64(r.remaining()) {
		return 0, errTruncated
	}
	return n, nil
}

func (r *reader) skipVarint() error {
	for i := 0; ; i++ {
		b, err := r.byte()
		if err != nil {
			return err
		}
		if b < 0x80 {
			return nil
		}
		if i >= 8 {
			return errors.New("yjs: signed varint too long")
		}
	}
}

// bytes returns the next n bytes (aliasing buf).
func (r *reader) bytes(n uint64) ([]byte, error) {
	if n > uint64(r.remaining()) {
		return nil, errTruncated
	}
	b := r.buf[r.pos : r.pos+int(n)]
	r.pos += int(n)
	return b, nil
}

// varBytes reads a varint length and that many bytes.
func (r *reader) varBytes() ([]byte, error) {
	n, err := r.uvarint()
	if err != nil {
		return nil, err
	}
	return r.bytes(n)
}

// str reads a string, which must be valid UTF-8.
func (r *reader) str() (string, error) {
	b, err := r.varBytes()
	if err != nil {
		return "", err
	}
	if !utf8.Valid(b) {
		return "", errors.New("yjs: string is not valid UTF-8")
	}
	return string(b), nil
}

// maxAnyDepth bounds the nesting of lib0 "any" values (arrays, objects).
const maxAnyDepth = 64

// skipAny skips one lib0 "any" value, checking its tags.
func (r *reader) skipAny(depth int) error {
	if depth > maxAnyDepth {
		return fmt.Errorf("yjs: any value nested deeper than %d", maxAnyDepth)
	}
	tag, err := r.byte()
	if err != nil {
		return err
	}
	switch tag {
	case 127, 126, 121, 120: // undefined, null, false, true
		return nil
	case 125: // integer
		return r.skipVarint()
	case 124: // float32
		_, err = r.bytes(4)
	case 123, 122: // float64, bigint64
		_, err = r.bytes(8)
	case 119: // string
		_, err = r.str()
	case 118: // object
		n, err := r.uvarint()
		if err != nil {
			return err
		}
		for range n {
			if _, err := r.str(); err != nil {
				return err
			}
			if err := r.skipAny(depth + 1); err != nil {
				return err
			}
		}
		return nil
	case 117: // array
		n, err := r.uvarint()
		if err != nil {
			return err
		}
		for range n {
			if err := r.skipAny(depth + 1); err != nil {
				return err
			}
		}
		return nil
	case 116: // Uint8Array
		_, err = r.varBytes()
	default:
		return fmt.Errorf("yjs: unknown any tag %d", tag)
	}
	return err
}

// writer appends lib0 values.
type writer struct{ buf []byte }

func (w *writer) byte(b byte) { w.buf = append(w.buf, b) }

func (w *writer) uvarint(n uint64) {
	for n >= 0x80 {
		w.buf = append(w.buf, byte(n)|0x80)
		n >>= 7
	}
	w.buf = append(w.buf, byte(n))
}

func (w *writer) varBytes(b []byte) {
	w.uvarint(uint64(len(b)))
	w.buf = append(w.buf, b...)
}

func (w *writer) str(s string) {
	w.uvarint(uint64(len(s)))
	w.buf = append(w.buf, s...)
}

// utf16Str writes UTF-16 code units as a UTF-8 string; a lone surrogate
// becomes U+FFFD, as the JavaScript encoder writes it.
func (w *writer) utf16Str(u []uint16) {
	s := string(utf16.Decode(u))
	w.str(s)
}
