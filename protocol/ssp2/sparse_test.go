package ssp2

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// pushCols is the table of the v3 push vectors (spec/vectors/push): nine
// columns, every §2.4 type but blob_ref, so the presence bitmap has seven
// padding bits.
var pushCols = []Column{
	{Name: "id", Type: TypeString}, {Name: "title", Type: TypeString, Nullable: true},
	{Name: "body", Type: TypeString}, {Name: "count", Type: TypeInteger, Nullable: true},
	{Name: "score", Type: TypeFloat}, {Name: "done", Type: TypeBoolean},
	{Name: "meta", Type: TypeJSON, Nullable: true}, {Name: "blob", Type: TypeBytes, Nullable: true},
	{Name: "doc", Type: TypeCRDT, Nullable: true},
}

// refCols has a blob_ref column; wideCols has 17 columns (three presence
// bytes, null bitmaps of one to three bytes), the first and the last not
// nullable.
var (
	refCols  = []Column{{Name: "id", Type: TypeString}, {Name: "att", Type: TypeBlobRef, Nullable: true}}
	wideCols = func() []Column {
		cols := make([]Column, 17)
		for i := range cols {
			cols[i] = Column{Name: fmt.Sprintf("c%d", i), Type: TypeString, Nullable: i != 0 && i != 16}
		}
		return cols
	}()
)

const testBlobRef = `{"blobId":"sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08","byteLength":4,"mediaType":"text/plain"}`

// sparseCase is one sparse payload of a table: a valid one with the row
// it decodes to, or an invalid one with the reason and offset of the
// first failing check.
type sparseCase struct {
	name   string
	cols   []Column
	pk     int
	in     []byte
	row    Row       // valid: the decoded row (table width, absent nil)
	pres   ColumnSet // valid: the decoded presence set
	reason string    // invalid: part of the DecodeError's reason
	off    int       // invalid: the DecodeError's offset
}

func sparseCases() []sparseCase {
	b := func(v []byte) []byte { return appendBytes(nil, v) }
	row9 := func(set map[int]any) Row {
		r := make(Row, 9)
		for i, v := range set {
			r[i] = v
		}
		return r
	}
	wide := func(set map[int]any) Row {
		r := make(Row, 17)
		for i, v := range set {
			r[i] = v
		}
		return r
	}
	return []sparseCase{
		// Valid payloads.
		{name: "the sparse-row vector: id, a present NULL title, meta", cols: pushCols,
			in:  cat([]byte{0x43, 0x00}, []byte{0x02}, s("n-1"), s(`{"tags":["a"]}`)),
			row: row9(map[int]any{0: "n-1", 6: json.RawMessage(`{"tags":["a"]}`)}), pres: ColumnSet{0x43, 0x00}},
		{name: "the primary key alone", cols: pushCols,
			in:  cat([]byte{0x01, 0x00}, []byte{0x00}, s("r")),
			row: row9(map[int]any{0: "r"}), pres: ColumnSet{0x01, 0x00}},
		{name: "the primary key and the column in the second presence byte", cols: pushCols,
			in:  cat([]byte{0x01, 0x01}, []byte{0x00}, s("r"), b([]byte{1, 2, 0xfe})),
			row: row9(map[int]any{0: "r", 8: []byte{1, 2, 0xfe}}), pres: ColumnSet{0x01, 0x01}},
		{name: "the full row: every presence bit, NULL title, all nine types", cols: pushCols,
			in: cat([]byte{0xff, 0x01}, []byte{0x02, 0x00}, s("n-2"), s("body"), i64(-7), appendF64(nil, 0.125), []byte{0},
				s(`{"k":true}`), b([]byte{0, 1, 0xfe, 0xff}), b([]byte{1, 2, 0xfe})),
			row:  Row{"n-2", nil, "body", int64(-7), 0.125, false, json.RawMessage(`{"k":true}`), []byte{0, 1, 0xfe, 0xff}, []byte{1, 2, 0xfe}},
			pres: ColumnSet{0xff, 0x01}},
		{name: "nine present columns: the ninth's null bit in the second null byte", cols: pushCols,
			in:   cat([]byte{0xff, 0x01}, []byte{0x00, 0x01}, s("n"), s(""), s("b"), i64(MaxSafeInt), appendF64(nil, -1), []byte{1}, s(`7`), b(nil)),
			row:  Row{"n", "", "b", int64(MaxSafeInt), -1.0, true, json.RawMessage(`7`), []byte{}, nil},
			pres: ColumnSet{0xff, 0x01}},
		{name: "a blob_ref value", cols: refCols,
			in:  cat([]byte{0x03}, []byte{0x00}, s("r"), s(testBlobRef)),
			row: Row{"r", testBlobRef}, pres: ColumnSet{0x03}},
		{name: "a primary key that is not the first column", cols: refCols, pk: 1,
			in:  cat([]byte{0x02}, []byte{0x00}, s(testBlobRef)),
			row: Row{nil, testBlobRef}, pres: ColumnSet{0x02}},
		{name: "17 columns, two present", cols: wideCols,
			in:  cat([]byte{0x01, 0x00, 0x01}, []byte{0x00}, s("k"), s("v")),
			row: wide(map[int]any{0: "k", 16: "v"}), pres: ColumnSet{0x01, 0x00, 0x01}},
		{name: "17 columns, all present, fifteen NULLs", cols: wideCols,
			in:  cat([]byte{0xff, 0xff, 0x01}, []byte{0xfe, 0xff, 0x00}, s("k"), s("z")),
			row: wide(map[int]any{0: "k", 16: "z"}), pres: ColumnSet{0xff, 0xff, 0x01}},

		// The four checks, in the SPEC's order: an input failing two of
		// them reports the earlier one.
		{name: "empty", cols: pushCols, in: nil, reason: "truncated presence bitmap", off: 0},
		{name: "half a presence bitmap", cols: pushCols, in: []byte{0x01}, reason: "truncated presence bitmap", off: 0},
		{name: "1: a presence padding bit", cols: pushCols, in: cat([]byte{0x43, 0x02}, []byte{0x02}, s("n-1"), s(`{}`)),
			reason: "presence bitmap padding bits set", off: 1},
		{name: "1 before 2: a padding bit and no primary key", cols: pushCols, in: cat([]byte{0x42, 0x80}, []byte{0x00}),
			reason: "presence bitmap padding bits set", off: 1},
		{name: "1: a padding bit in the third presence byte", cols: wideCols, in: cat([]byte{0x01, 0x00, 0x03}, []byte{0x00}, s("k"), s("v")),
			reason: "presence bitmap padding bits set", off: 2},
		{name: "2: the primary key absent", cols: pushCols, in: cat([]byte{0x42, 0x00}, []byte{0x01}, s(`{}`)),
			reason: `primary-key column "id" is not present`, off: 0},
		{name: "2 before 3: no primary key and a null padding bit", cols: pushCols, in: cat([]byte{0x42, 0x00}, []byte{0xfc}),
			reason: `primary-key column "id" is not present`, off: 0},
		{name: "2: a primary key in column 1 absent", cols: refCols, pk: 1, in: cat([]byte{0x01}, []byte{0x00}, s("r")),
			reason: `primary-key column "att" is not present`, off: 0},
		{name: "no null bitmap", cols: pushCols, in: []byte{0x43, 0x00}, reason: "truncated null bitmap", off: 2},
		{name: "3: a null bit for an absent column", cols: pushCols, in: cat([]byte{0x43, 0x00}, []byte{0x0a}, s("n-1"), s(`{}`)),
			reason: "null bitmap padding bits set (a null for an absent column)", off: 2},
		{name: "3 before 4: a null padding bit and a null primary key", cols: pushCols, in: cat([]byte{0x43, 0x00}, []byte{0x09}, s(`{}`)),
			reason: "null bitmap padding bits set", off: 2},
		{name: "3: a null padding bit in the second null byte", cols: wideCols, in: cat([]byte{0xff, 0x03, 0x00}, []byte{0x00, 0x04}),
			reason: "null bitmap padding bits set", off: 4},
		{name: "4: a null bit on the non-nullable primary key", cols: pushCols, in: cat([]byte{0x43, 0x00}, []byte{0x03}, s(`{}`)),
			reason: `null bit set on non-nullable column "id"`, off: 2},
		{name: "4 before values: a NULL body and a broken value", cols: pushCols, in: cat([]byte{0x45, 0x00}, []byte{0x02}, u32(99)),
			reason: `null bit set on non-nullable column "body"`, off: 2},
		{name: "4: the null bit of column 16 in the third null byte", cols: wideCols, in: cat([]byte{0xff, 0xff, 0x01}, []byte{0x00, 0x00, 0x01}),
			reason: `null bit set on non-nullable column "c16"`, off: 5},

		// The value checks, then exact consumption.
		{name: "invalid UTF-8", cols: pushCols, in: cat([]byte{0x01, 0x00}, []byte{0x00}, u32(2), []byte{0xff, 0xfe}),
			reason: "id: invalid UTF-8", off: 3},
		{name: "json that does not parse", cols: pushCols, in: cat([]byte{0x41, 0x00}, []byte{0x00}, s("r"), s(`{`)),
			reason: "meta: not a JSON document", off: 8},
		{name: "i64 outside ±(2^53-1)", cols: pushCols, in: cat([]byte{0x09, 0x00}, []byte{0x00}, s("r"), i64(MaxSafeInt+1)),
			reason: "count: i64 9007199254740992 outside", off: 8},
		{name: "bool byte 2", cols: pushCols, in: cat([]byte{0x21, 0x00}, []byte{0x00}, s("r"), []byte{2}),
			reason: "done: bool byte 0x02", off: 8},
		{name: "not a canonical BlobRef", cols: refCols, in: cat([]byte{0x03}, []byte{0x00}, s("r"), s(`{"blobId":"x"}`)),
			reason: `column "att": not a canonical BlobRef`, off: 7},
		{name: "a string longer than the payload", cols: pushCols, in: cat([]byte{0x01, 0x00}, []byte{0x00}, u32(10), []byte("ab")),
			reason: "id: length 10 exceeds remaining 2 bytes", off: 7},
		{name: "a value missing", cols: pushCols, in: cat([]byte{0x11, 0x00}, []byte{0x00}, s("r"), []byte{1, 2, 3}),
			reason: "truncated score", off: 8},
		{name: "a trailing byte", cols: pushCols, in: cat([]byte{0x01, 0x00}, []byte{0x00}, s("r"), []byte{0}),
			reason: "1 trailing bytes after sparse row", off: 8},
		{name: "a null column's value sent anyway", cols: pushCols, in: cat([]byte{0x03, 0x00}, []byte{0x02}, s("r"), s("title")),
			reason: "9 trailing bytes after sparse row", off: 8},
	}
}

func TestDecodeSparse(t *testing.T) {
	for _, c := range sparseCases() {
		t.Run(c.name, func(t *testing.T) {
			codec := NewRowCodec(c.cols)
			in := bytes.Clone(c.in)
			sr, err := codec.DecodeSparse(in, c.pk)
			verr := codec.ValidateSparse(in, c.pk)
			if fmt.Sprint(err) != fmt.Sprint(verr) {
				t.Fatalf("DecodeSparse (%v) and ValidateSparse (%v) disagree", err, verr)
			}
			if c.reason != "" {
				wantDecodeErr(t, err, c.reason)
				var de *DecodeError
				errors.As(err, &de)
				if de.Offset != c.off {
					t.Fatalf("offset %d, want %d (%v)", de.Offset, c.off, err)
				}
				if sr.Row != nil || sr.Present != nil {
					t.Fatalf("a refused payload gave %#v", sr)
				}
				return
			}
			if err != nil {
				t.Fatalf("DecodeSparse: %v", err)
			}
			if !reflect.DeepEqual(sr.Row, c.row) || !bytes.Equal(sr.Present, c.pres) {
				t.Fatalf("decoded\n%#v %x\nwant\n%#v %x", sr.Row, sr.Present, c.row, c.pres)
			}
			for i := range c.cols {
				if !sr.Present.Has(i) && sr.Row[i] != nil {
					t.Fatalf("absent column %d has value %#v", i, sr.Row[i])
				}
			}
			// Nothing aliases the input.
			for i := range in {
				in[i] = 0xEE
			}
			if !reflect.DeepEqual(sr.Row, c.row) || !bytes.Equal(sr.Present, c.pres) {
				t.Fatal("the decoded row or presence set aliases the input")
			}
			// Exact consumption: every strict prefix and one byte more fail.
			for n := range len(c.in) {
				if _, err := codec.DecodeSparse(c.in[:n], c.pk); err == nil {
					t.Fatalf("the %d-byte prefix decodes", n)
				}
			}
			wantDecodeErr(t, codec.ValidateSparse(append(bytes.Clone(c.in), 0), c.pk), "1 trailing bytes after sparse row")
			// The encoder writes the same bytes back, after what dst held.
			out, err := codec.AppendSparse([]byte{0xAA}, sr.Row, sr.Present, c.pk)
			if err != nil || !bytes.Equal(out, append([]byte{0xAA}, c.in...)) {
				t.Fatalf("AppendSparse = %x, %v\nwant aa%x", out, err, c.in)
			}
		})
	}
}

// A primary-key index outside the columns is the caller's mistake; it is
// refused before anything is read.
func TestDecodeSparseBadPK(t *testing.T) {
	codec := NewRowCodec(pushCols)
	in := cat([]byte{0x01, 0x00}, []byte{0x00}, s("r"))
	for _, pk := range []int{-1, 9, 100} {
		wantDecodeErr(t, codec.ValidateSparse(in, pk), "primary-key column index")
		if _, err := codec.AppendSparse(nil, make(Row, 9), ColumnSet{0x01, 0x00}, pk); err == nil {
			t.Fatalf("AppendSparse with pk %d", pk)
		}
	}
	if _, err := NewRowCodec(nil).DecodeSparse(nil, 0); err == nil {
		t.Fatal("a table without columns decoded a sparse row")
	}
}

// A full sparse row is a presence bitmap of ones and then exactly the
// full-row encoding; a nil presence set means every column.
func TestAppendSparseFullRow(t *testing.T) {
	for _, c := range sparseCases() {
		if c.reason != "" || !c.pres.Full(len(c.cols)) {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			codec := NewRowCodec(c.cols)
			full, err := codec.Append(nil, c.row)
			if err != nil {
				t.Fatal(err)
			}
			got, err := codec.AppendSparse(nil, c.row, nil, c.pk)
			if err != nil || !bytes.Equal(got, cat(FullColumnSet(len(c.cols)), full)) || !bytes.Equal(got, c.in) {
				t.Fatalf("AppendSparse(nil presence) = %x, %v\nfull row %x", got, err, full)
			}
		})
	}
}

func TestAppendSparseRefusals(t *testing.T) {
	ok := Row{"r", nil, "b", int64(1), 1.5, true, json.RawMessage(`{}`), []byte{1}, []byte{2}}
	with := func(i int, v any) Row { r := append(Row(nil), ok...); r[i] = v; return r }
	for _, c := range []struct {
		name string
		cols []Column
		row  Row
		pres ColumnSet
		want string
	}{
		{"a row too short", pushCols, ok[:8], nil, "row has 8 values, table has 9 columns"},
		{"a row too long", pushCols, append(append(Row(nil), ok...), "x"), nil, "row has 10 values, table has 9 columns"},
		{"a presence set too short", pushCols, ok, ColumnSet{0xff}, "presence set does not fit 9 columns"},
		{"a presence set too long", pushCols, ok, ColumnSet{0xff, 0x01, 0x00}, "presence set does not fit 9 columns"},
		{"a presence padding bit", pushCols, ok, ColumnSet{0x01, 0x02}, "presence set does not fit 9 columns"},
		{"the primary key absent", pushCols, ok, ColumnSet{0xfe, 0x01}, "the primary-key column must be present"},
		{"an empty presence set", pushCols, ok, NewColumnSet(9), "the primary-key column must be present"},
		{"a present NULL in a non-nullable column", pushCols, with(2, nil), ColumnSet{0x05, 0x00}, `column "body" is not nullable`},
		{"a present NULL primary key", pushCols, with(0, nil), ColumnSet{0x01, 0x00}, `column "id" is not nullable`},
		{"a value of the wrong Go type", pushCols, with(3, "7"), ColumnSet{0x09, 0x00}, `column "count" (integer): unexpected value type string`},
		{"an i64 out of range", pushCols, with(3, int64(MaxSafeInt+1)), ColumnSet{0x09, 0x00}, "outside ±(2^53-1)"},
		{"json that does not parse", pushCols, with(6, json.RawMessage(`{`)), ColumnSet{0x41, 0x00}, `column "meta": not a JSON document`},
		{"invalid UTF-8", pushCols, with(2, "\xff"), ColumnSet{0x05, 0x00}, `column "body": invalid UTF-8`},
		{"not a canonical BlobRef", refCols, Row{"r", `{"blobId":"x"}`}, ColumnSet{0x03}, `column "att": not a canonical BlobRef`},
	} {
		t.Run(c.name, func(t *testing.T) {
			dst := []byte{0xAA, 0xBB}
			got, err := NewRowCodec(c.cols).AppendSparse(dst, c.row, c.pres, 0)
			var ee *EncodeError
			if !errors.As(err, &ee) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("AppendSparse: %v, want an *EncodeError with %q", err, c.want)
			}
			if !bytes.Equal(got, []byte{0xAA, 0xBB}) {
				t.Fatalf("dst changed to %x", got)
			}
		})
	}
	// Absent columns' values are ignored, even ones that would not encode.
	got, err := NewRowCodec(pushCols).AppendSparse(nil, Row{"r", 1, nil, "x", nil, nil, json.RawMessage(`{`), 7, nil}, ColumnSet{0x01, 0x00}, 0)
	if err != nil || !bytes.Equal(got, cat([]byte{0x01, 0x00, 0x00}, s("r"))) {
		t.Fatalf("AppendSparse of the primary key alone = %x, %v", got, err)
	}
}

func TestColumnSet(t *testing.T) {
	for _, c := range []struct {
		n    int
		full ColumnSet
	}{{0, ColumnSet{}}, {1, ColumnSet{0x01}}, {8, ColumnSet{0xff}}, {9, ColumnSet{0xff, 0x01}}, {17, ColumnSet{0xff, 0xff, 0x01}}} {
		if got := FullColumnSet(c.n); !bytes.Equal(got, c.full) || !got.Full(c.n) || got.Len() != c.n {
			t.Errorf("FullColumnSet(%d) = %x (Full %v, Len %d), want %x", c.n, got, got.Full(c.n), got.Len(), c.full)
		}
		if e := NewColumnSet(c.n); len(e) != len(c.full) || e.Len() != 0 || (c.n > 0 && e.Full(c.n)) {
			t.Errorf("NewColumnSet(%d) = %x", c.n, e)
		}
	}
	s := NewColumnSet(9)
	s.Add(1)
	s.Add(8)
	s.Add(1)
	if !bytes.Equal(s, ColumnSet{0x02, 0x01}) || s.Len() != 2 || !s.Has(1) || !s.Has(8) || s.Has(0) || s.Has(9) || s.Has(16) || s.Has(-1) {
		t.Fatalf("set %x: Len %d", s, s.Len())
	}
	var none ColumnSet
	if none.Has(0) || none.Len() != 0 || none.Full(1) || !none.Full(0) {
		t.Fatal("a nil set is empty")
	}
	for _, c := range []struct {
		s    ColumnSet
		n    int
		full bool
	}{
		{ColumnSet{0xff, 0x01}, 9, true},
		{ColumnSet{0xff, 0x02}, 9, false}, // nine bits, but a padding bit instead of column 8
		{ColumnSet{0xff, 0x03}, 9, false},
		{ColumnSet{0xfe, 0x01}, 9, false},
		{ColumnSet{0xff}, 9, false},
		{ColumnSet{0xff, 0x01, 0x00}, 9, false},
		{ColumnSet{0xff}, 8, true},
		{ColumnSet{0x7f}, 7, true},
		{ColumnSet{0xff}, 7, false},
		{ColumnSet{0xff}, -1, false},
	} {
		if got := c.s.Full(c.n); got != c.full {
			t.Errorf("%x.Full(%d) = %v, want %v", []byte(c.s), c.n, got, c.full)
		}
	}
}
