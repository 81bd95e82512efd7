package yjs

import (
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf16"
)

// Limits of the decoder. Every allocation it makes is bounded by them: an
// update larger than MaxUpdateBytes, or holding more than MaxStructs
// structs or MaxDeleteRanges delete ranges, is refused before its content
// is read further; every length and count inside an update is checked
// against the bytes that remain before anything is allocated for it.
const (
	// MaxUpdateBytes bounds one update (an input or a merge result).
	MaxUpdateBytes = 8 << 20
	// MaxStructs bounds the structs of one update, and of a merge result.
	MaxStructs = 1 << 18
	// MaxDeleteRanges bounds the delete-set ranges of one update.
	MaxDeleteRanges = 1 << 18
)

// Struct info bits (the low five bits are the content ref).
const (
	bitOrigin      = 0x80
	bitRightOrigin = 0x40
	bitParentSub   = 0x20
	refMask        = 0x1f
)

// Content refs of update v1.
const (
	refGC      = 0
	refDeleted = 1
	refJSON    = 2
	refBinary  = 3
	refString  = 4
	refEmbed   = 5
	refFormat  = 6
	refType    = 7
	refAny     = 8
	refDoc     = 9
	refSkip    = 10
)

// id is a Yjs struct id: a client and the clock of its first unit.
type id struct{ client, clock uint64 }

// item is one decoded Item struct. Splittable contents (deleted, JSON, any,
// string) keep their elements; the others have length 1 and keep their
// encoded bytes in raw.
type item struct {
	id     id
	length uint64
	ref    byte // content ref
	// parentSubFlag is the info byte's parentSub bit, kept as written.
	parentSubFlag bool

	origin, rightOrigin       id
	hasOrigin, hasRightOrigin bool
	// parent is written only when the item has neither origin: a root
	// type name (parentIsName) or the id of the parent type's item.
	parentIsName bool
	parentName   string
	parentID     id
	parentSub    string // only when parentSubFlag and no origin

	elems [][]byte // JSON (string text) or any (encoded value) elements
	str   []uint16 // string content, UTF-16 code units
	raw   []byte   // binary, embed, format, type or doc content, encoded
}

// end is the clock after the item's last unit.
func (it *item) end() uint64 { return it.id.clock + it.length }

// span is a run of clocks of one client: a GC struct, a skip, or a delete
// range.
type span struct{ clock, length uint64 }

// update is a decoded update: per client its items and GC spans (skips are
// dropped: they only say "not in this update"), and its delete set.
type update struct {
	items   map[uint64][]*item
	gcs     map[uint64][]span
	deletes map[uint64][]span
}

// decode parses a Yjs update v1, refusing anything Yjs would not apply and
// anything past the package limits.
func decode(b []byte) (*update, error) {
	if len(b) > MaxUpdateBytes {
		return nil, fmt.Errorf("yjs: update of %d bytes exceeds %d", len(b), MaxUpdateBytes)
	}
	r := &reader{buf: b}
	u := &update{items: map[uint64][]*item{}, gcs: map[uint64][]span{}, deletes: map[uint64][]span{}}
	nclients, err := r.uvarint()
	if err != nil {
		return nil, err
	}
	structs := 0
	for range nclients {
		n, err := r.uvarint()
		if err != nil {
			return nil, err
		}
		if n > uint64(MaxStructs-structs) || n > uint64(r.remaining()) {
			return nil, fmt.Errorf("yjs: %d structs exceed the limit or the update", n)
		}
		structs += int(n)
		client, err := r.uvarint()
		if err != nil {
			return nil, err
		}
		clock, err := r.uvarint()
		if err != nil {
			return nil, err
		}
		for range n {
			next, err := u.readStruct(r, id{client, clock})
			if err != nil {
				return nil, err
			}
			clock = next
		}
	}
	ranges := 0
	nclients, err = r.uvarint()
	if err != nil {
		return nil, err
	}
	for range nclients {
		client, err := r.uvarint()
		if err != nil {
			return nil, err
		}
		n, err := r.uvarint()
		if err != nil {
			return nil, err
		}
		if n > uint64(MaxDeleteRanges-ranges) || n > uint64(r.remaining()) {
			return nil, fmt.Errorf("yjs: %d delete ranges exceed the limit or the update", n)
		}
		ranges += int(n)
		for range n {
			clock, err := r.uvarint()
			if err != nil {
				return nil, err
			}
			length, err := r.uvarint()
			if err != nil {
				return nil, err
			}
			if clock+length > maxSafe {
				return nil, errors.New("yjs: delete range past 2^53")
			}
			if length > 0 {
				u.deletes[client] = append(u.deletes[client], span{clock, length})
			}
		}
	}
	if r.remaining() != 0 {
		return nil, fmt.Errorf("yjs: %d bytes after the delete set", r.remaining())
	}
	return u, nil
}

// readStruct reads one struct starting at at and returns the clock after it.
func (u *update) readStruct(r *reader, at id) (uint64, error) {
	info, err := r.byte()
	if err != nil {
		return 0, err
	}
	ref := info & refMask
	if info == refSkip || ref == refGC {
		if info != refSkip && info != refGC {
			return 0, fmt.Errorf("yjs: GC struct with info %#x", info)
		}
		n, err := r.uvarint()
		if err != nil {
			return 0, err
		}
		if n == 0 || at.clock+n > maxSafe {
			return 0, fmt.Errorf("yjs: struct length %d at clock %d", n, at.clock)
		}
		if info == refGC {
			u.gcs[at.client] = append(u.gcs[at.client], span{at.clock, n})
		}
		return at.clock + n, nil
	}
	it := &item{id: at, ref: ref, parentSubFlag: info&bitParentSub != 0}
	if info&bitOrigin != 0 {
		if it.origin, err = readID(r); err != nil {
			return 0, err
		}
		it.hasOrigin = true
	}
	if info&bitRightOrigin != 0 {
		if it.rightOrigin, err = readID(r); err != nil {
			return 0, err
		}
		it.hasRightOrigin = true
	}
	if !it.hasOrigin && !it.hasRightOrigin {
		isName, err := r.uvarint()
		if err != nil {
			return 0, err
		}
		switch isName {
		case 1:
			it.parentIsName = true
			if it.parentName, err = r.str(); err != nil {
				return 0, err
			}
		case 0:
			if it.parentID, err = readID(r); err != nil {
				return 0, err
			}
		default:
			return 0, fmt.Errorf("yjs: parent info %d", isName)
		}
		if it.parentSubFlag {
			if it.parentSub, err = r.str(); err != nil {
				return 0, err
			}
		}
	}
	if err := it.readContent(r); err != nil {
		return 0, err
	}
	if it.length == 0 || at.clock+it.length > maxSafe {
		return 0, fmt.Errorf("yjs: item length %d at clock %d", it.length, at.clock)
	}
	u.items[at.client] = append(u.items[at.client], it)
	return it.end(), nil
}

func readID(r *reader) (id, error) {
	c, err := r.uvarint()
	if err != nil {
		return id{}, err
	}
	k, err := r.uvarint()
	return id{c, k}, err
}

// readContent reads the item's content and sets its length.
func (it *item) readContent(r *reader) error {
	start := r.pos
	switch it.ref {
	case refDeleted:
		n, err := r.uvarint()
		if err != nil {
			return err
		}
		it.length = n
		return nil
	case refJSON:
		n, err := r.count()
		if err != nil {
			return err
		}
		it.elems = make([][]byte, 0, n)
		for range n {
			s, err := r.varBytes()
			if err != nil {
				return err
			}
			if string(s) != "undefined" && !json.Valid(s) {
				return errors.New("yjs: JSON content element is not JSON")
			}
			it.elems = append(it.elems, s)
		}
		it.length = n
		return nil
	case refAny:
		n, err := r.count()
		if err != nil {
			return err
		}
		it.elems = make([][]byte, 0, n)
		for range n {
			p := r.pos
			if err := r.skipAny(0); err != nil {
				return err
			}
			it.elems = append(it.elems, r.buf[p:r.pos])
		}
		it.length = n
		return nil
	case refString:
		s, err := r.str()
		if err != nil {
			return err
		}
		it.str = utf16.Encode([]rune(s))
		it.length = uint64(len(it.str))
		return nil
	case refBinary:
		if _, err := r.varBytes(); err != nil {
			return err
		}
	case refEmbed:
		if err := readJSON(r); err != nil {
			return err
		}
	case refFormat:
		if _, err := r.str(); err != nil {
			return err
		}
		if err := readJSON(r); err != nil {
			return err
		}
	case refType:
		t, err := r.uvarint()
		if err != nil {
			return err
		}
		switch t {
		case 0, 1, 2, 4, 6: // array, map, text, xml fragment, xml text
		case 3, 5: // xml element, xml hook: a name
			if _, err := r.str(); err != nil {
				return err
			}
		default:
			return fmt.Errorf("yjs: unknown type ref %d", t)
		}
	case refDoc:
		if _, err := r.str(); err != nil {
			return err
		}
		if err := r.skipAny(0); err != nil {
			return err
		}
	default:
		return fmt.Errorf("yjs: unknown content ref %d", it.ref)
	}
	it.raw = r.buf[start:r.pos]
	it.length = 1
	return nil
}

func readJSON(r *reader) error {
	s, err := r.varBytes()
	if err != nil {
		return err
	}
	if !json.Valid(s) {
		return errors.New("yjs: JSON content is not JSON")
	}
	return nil
}

// deleted reports whether the item's content says it is deleted.
func (it *item) deleted() bool { return it.ref == refDeleted }

// slice returns the units [from, to) of the item as an item of their own
// (0 <= from < to <= length; only splittable contents are sliced). A
// slice not starting at 0 has the previous unit as its origin, and a
// string cut inside a surrogate pair gets U+FFFD on both sides, as Yjs
// splits items.
func (it *item) slice(from, to uint64) *item {
	if from == 0 && to == it.length {
		return it
	}
	s := *it
	s.id.clock += from
	s.length = to - from
	if from > 0 {
		s.hasOrigin, s.origin = true, id{it.id.client, it.id.clock + from - 1}
		s.parentIsName, s.parentName, s.parentID, s.parentSub = false, "", id{}, ""
	}
	switch it.ref {
	case refJSON, refAny:
		s.elems = it.elems[from:to]
	case refString:
		s.str = append([]uint16(nil), it.str[from:to]...)
		if from > 0 && utf16.IsSurrogate(rune(it.str[from-1])) && it.str[from-1] < 0xdc00 {
			s.str[0] = 0xfffd
		}
		if to < it.length && utf16.IsSurrogate(rune(it.str[to-1])) && it.str[to-1] < 0xdc00 {
			s.str[len(s.str)-1] = 0xfffd
		}
	}
	return &s
}

// write appends the item's struct encoding.
func (it *item) write(w *writer) {
	info := it.ref
	if it.hasOrigin {
		info |= bitOrigin
	}
	if it.hasRightOrigin {
		info |= bitRightOrigin
	}
	if it.parentSubFlag {
		info |= bitParentSub
	}
	w.byte(info)
	if it.hasOrigin {
		w.uvarint(it.origin.client)
		w.uvarint(it.origin.clock)
	}
	if it.hasRightOrigin {
		w.uvarint(it.rightOrigin.client)
		w.uvarint(it.rightOrigin.clock)
	}
	if !it.hasOrigin && !it.hasRightOrigin {
		if it.parentIsName {
			w.uvarint(1)
			w.str(it.parentName)
		} else {
			w.uvarint(0)
			w.uvarint(it.parentID.client)
			w.uvarint(it.parentID.clock)
		}
		if it.parentSubFlag {
			w.str(it.parentSub)
		}
	}
	switch it.ref {
	case refDeleted:
		w.uvarint(it.length)
	case refJSON:
		w.uvarint(uint64(len(it.elems)))
		for _, e := range it.elems {
			w.varBytes(e)
		}
	case refAny:
		w.uvarint(uint64(len(it.elems)))
		for _, e := range it.elems {
			w.buf = append(w.buf, e...)
		}
	case refString:
		w.utf16Str(it.str)
	default:
		w.buf = append(w.buf, it.raw...)
	}
}
