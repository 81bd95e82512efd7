package ssp2

import (
	"bytes"
	"encoding/json"
	"math"
	"strings"
	"testing"
)

// putCells feeds row to sb cell by cell, as a raw-bytes store would.
func putCells(sb *SegmentBuilder, version int64, row Row) error {
	sb.BeginRow(version)
	for _, v := range row {
		switch x := v.(type) {
		case nil:
			sb.PutNull()
		case string:
			sb.PutText([]byte(x))
		case json.RawMessage:
			sb.PutText(x)
		case []byte:
			sb.PutText(x)
		case int64:
			sb.PutInt(x)
		case float64:
			sb.PutFloat(x)
		case bool:
			sb.PutBool(x)
		}
	}
	return sb.EndRow()
}

var cellCols = []Column{
	{Name: "id", Type: TypeString},
	{Name: "n", Type: TypeInteger, Nullable: true},
	{Name: "f", Type: TypeFloat, Nullable: true},
	{Name: "b", Type: TypeBoolean},
	{Name: "j", Type: TypeJSON, Nullable: true},
	{Name: "raw", Type: TypeBytes, Nullable: true},
	{Name: "doc", Type: TypeCRDT, Nullable: true},
	{Name: "ref", Type: TypeBlobRef, Nullable: true},
	{Name: "s", Type: TypeString, Nullable: true},
}

const goodRef = `{"blobId":"sha256:` + "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef" + `","byteLength":3,"mediaType":"text/plain"}`

// TestCellRowsMatchAddRow: the cell API accepts exactly the rows AddRow
// accepts and produces the same bytes; a rejected row leaves nothing.
func TestCellRowsMatchAddRow(t *testing.T) {
	if !validBlobRef([]byte(goodRef)) {
		t.Fatalf("test BlobRef is not canonical: %s", goodRef)
	}
	ok := Row{"a", int64(7), 1.5, true, json.RawMessage(`{"k":[1,2]}`), []byte{0, 1, 2}, []byte{}, goodRef, "ü"}
	with := func(i int, v any) Row { r := append(Row(nil), ok...); r[i] = v; return r }
	cases := []struct {
		name    string
		version int64
		row     Row
		wantErr string
	}{
		{"all types", 1, ok, ""},
		{"nulls where allowed", 2, Row{"b", nil, nil, false, nil, nil, nil, nil, nil}, ""},
		{"largest safe int", 3, with(1, int64(MaxSafeInt)), ""},
		{"NaN float", 3, with(2, math.NaN()), ""},
		{"empty strings and bytes", 3, with(0, ""), ""},
		{"null in a NOT NULL column", 1, with(0, nil), "not nullable"},
		{"invalid UTF-8", 1, with(8, "\xff"), "UTF-8"},
		{"int beyond 2^53", 1, with(1, int64(MaxSafeInt+1)), "outside"},
		{"JSON that does not parse", 1, with(4, json.RawMessage(`{`)), "JSON"},
		{"BlobRef not canonical", 1, with(7, `{"blobId":"x"}`), "BlobRef"},
		{"serverVersion 0", 0, ok, "serverVersion"},
		{"serverVersion beyond 2^53", MaxSafeInt + 1, ok, "serverVersion"},
		{"int in a string column", 1, with(0, int64(1)), "unexpected value type"},
		{"bool in an integer column", 1, with(1, true), "unexpected value type"},
		{"text in a float column", 1, with(2, "1.5"), "unexpected value type"},
		{"too few values", 1, ok[:8], "8 values"},
		{"too many values", 1, append(append(Row(nil), ok...), "x"), "more than 9"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := NewSegmentBuilder("t", 3, cellCols)
			b := NewSegmentBuilder("t", 3, cellCols)
			// One good row first, so a rejected row must leave it intact.
			if err := a.AddRow(1, ok); err != nil {
				t.Fatal(err)
			}
			if err := putCells(b, 1, ok); err != nil {
				t.Fatal(err)
			}
			errA := a.AddRow(c.version, c.row)
			errB := putCells(b, c.version, c.row)
			if c.wantErr == "" {
				if errB != nil {
					t.Fatalf("cells: %v", errB)
				}
			} else if errB == nil || !strings.Contains(errB.Error(), c.wantErr) {
				t.Fatalf("cells error = %v, want one containing %q", errB, c.wantErr)
			}
			if (errA == nil) != (errB == nil) {
				t.Fatalf("AddRow error %v, cells error %v", errA, errB)
			}
			sa, sbb := a.Finish(), b.Finish()
			if !bytes.Equal(sa, sbb) {
				t.Fatalf("segments differ:\nAddRow %x\ncells  %x", sa, sbb)
			}
			seg, err := DecodeSegment(sbb)
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			want := 1
			if c.wantErr == "" {
				want = 2
			}
			if n := countRows(seg); n != want {
				t.Fatalf("segment holds %d rows, want %d", n, want)
			}
		})
	}
}

func countRows(s *Segment) int {
	n := 0
	for _, b := range s.Blocks {
		n += len(b)
	}
	return n
}

// TestCellRowsAcrossBlocks: rows past SegmentBlockRows, with rejected rows
// in between (one at a block boundary), decode to the accepted rows.
func TestCellRowsAcrossBlocks(t *testing.T) {
	cols := []Column{{Name: "id", Type: TypeString}, {Name: "n", Type: TypeInteger}}
	a := NewSegmentBuilder("t", 1, cols)
	b := NewSegmentBuilder("t", 1, cols)
	for i := 0; i < 2*SegmentBlockRows+5; i++ {
		row := Row{"r", int64(i)}
		if i%SegmentBlockRows == 0 {
			if err := putCells(b, 1, Row{"r", nil}); err == nil {
				t.Fatal("a NULL in a NOT NULL column was accepted")
			}
		}
		if err := a.AddRow(int64(i+1), row); err != nil {
			t.Fatal(err)
		}
		if err := putCells(b, int64(i+1), row); err != nil {
			t.Fatal(err)
		}
	}
	b.BeginRow(9) // left open: Finish must drop it
	b.PutText([]byte("open"))
	if sa, sbb := a.Finish(), b.Finish(); !bytes.Equal(sa, sbb) {
		t.Fatal("segments differ")
	}
}

// TestRejectedOnlyRowLeavesNoEmptyBlock: a segment whose only row was
// rejected still decodes (no zero-row block).
func TestRejectedOnlyRowLeavesNoEmptyBlock(t *testing.T) {
	sb := NewSegmentBuilder("t", 1, []Column{{Name: "id", Type: TypeString}})
	if err := putCells(sb, 1, Row{int64(1)}); err == nil {
		t.Fatal("an int in a string column was accepted")
	}
	if err := sb.AddRow(1, Row{int64(1)}); err == nil {
		t.Fatal("AddRow took an int in a string column")
	}
	if _, err := DecodeSegment(sb.Finish()); err != nil {
		t.Fatalf("decode: %v", err)
	}
}

// FuzzCellRowsMatchAddRow: for rows of canonical Go types, the cell API and
// AddRow agree on acceptance and bytes.
func FuzzCellRowsMatchAddRow(f *testing.F) {
	f.Add("a", int64(1), 1.5, true, []byte(`{"a":1}`), []byte{1}, "s", int64(1), false)
	f.Add("\xff", int64(math.MaxInt64), math.Inf(1), false, []byte(`{`), []byte(nil), "", int64(0), true)
	f.Fuzz(func(t *testing.T, id string, n int64, fl float64, b bool, js []byte, raw []byte, s string, version int64, nullS bool) {
		row := Row{id, n, fl, b, json.RawMessage(js), raw, []byte{}, nil, s}
		if nullS {
			row[8] = nil
		}
		a := NewSegmentBuilder("t", 1, cellCols)
		c := NewSegmentBuilder("t", 1, cellCols)
		errA := a.AddRow(version, row)
		errC := putCells(c, version, row)
		if (errA == nil) != (errC == nil) {
			t.Fatalf("AddRow error %v, cells error %v", errA, errC)
		}
		if !bytes.Equal(a.Finish(), c.Finish()) {
			t.Fatal("segments differ")
		}
	})
}
