package ssp2

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/synclane/synclane/protocol/ssp2/ssp2test"
)

// TestMessageVectorsV3 runs the wire v3 request and response vectors
// ($SSP2_VECTORS_V3) as TestMessageVectors runs the v1/v2 ones: every case
// is a v3 message that decodes, renders as its .json and re-encodes
// byte-exact; every invalid case is refused with its code, for its reason.
func TestMessageVectorsV3(t *testing.T) {
	checkMessageVectors(t, ssp2test.VectorsV3Dir(t), []uint16{WireV3})
}

// TestV3ConflictVector pins the one v3 layout change the response vectors
// carry: push-conflict's conflict record holds conflictColumns 0x02 (column
// 1) after its full-row serverRow.
func TestV3ConflictVector(t *testing.T) {
	dir := ssp2test.VectorsV3Dir(t)
	m, err := DecodeResponse(ssp2test.ReadFile(t, dir, "response", "push-conflict.bin"))
	if err != nil {
		t.Fatal(err)
	}
	var rec *OpResult
	for _, f := range m.Frames {
		if p, ok := f.(*PushResult); ok && len(p.Results) > 0 {
			rec = &p.Results[0]
		}
	}
	if rec == nil || rec.Status != OpConflict || !bytes.Equal(rec.ConflictColumns, ColumnSet{0x02}) || !rec.ConflictColumns.Has(1) || rec.ServerVersion != 7 {
		t.Fatalf("conflict record %+v", rec)
	}
}

// pushVectorTable reads the push manifest's table: its columns (parsed
// as a rule-11 rendering's) and the primary key's index.
func pushVectorTable(t *testing.T, man *ssp2test.Manifest) ([]Column, int) {
	t.Helper()
	cols, _, err := ParseSparseJSON([]byte(`{"columns":` + string(man.Columns) + `,"values":{}}`))
	if err != nil {
		t.Fatalf("manifest columns: %v", err)
	}
	for i, c := range cols {
		if c.Name == man.PrimaryKey {
			return cols, i
		}
	}
	t.Fatalf("manifest primaryKey %q is not one of its columns", man.PrimaryKey)
	return nil, 0
}

// pushInvalidReasons is why each named invalid push vector must be
// refused: the check of SPEC §2.4 it covers.
var pushInvalidReasons = map[string]string{
	"presence-padding-bit":       "presence bitmap padding bits set",
	"absent-primary-key":         "primary-key column",
	"null-bit-for-absent-column": "null bitmap padding bits set",
	"null-bit-on-non-nullable":   "null bit set on non-nullable column",
}

// TestPushVectors runs the codec-level push vectors (sparse rows, SPEC
// §2.4, §11.1 rule 11) against the manifest's table: each payload decodes,
// renders as its .json, re-encodes byte-exact, and its rendering encodes
// to the same bytes; each invalid payload is refused with its code, for
// its reason.
func TestPushVectors(t *testing.T) {
	dir := ssp2test.VectorsV3Dir(t)
	man := ssp2test.LoadManifest(t, dir, "push")
	cols, pk := pushVectorTable(t, man)
	codec := NewRowCodec(cols)
	for _, c := range man.Cases {
		t.Run(c.Name, func(t *testing.T) {
			bin := ssp2test.ReadFile(t, dir, "push", c.Bin)
			want := ssp2test.ReadFile(t, dir, "push", c.JSON)
			sr, err := codec.DecodeSparse(bin, pk)
			if err != nil {
				t.Fatalf("DecodeSparse: %v", err)
			}
			if err := codec.ValidateSparse(bin, pk); err != nil {
				t.Fatalf("ValidateSparse: %v", err)
			}
			got, err := RenderSparseJSON(cols, sr)
			if err != nil {
				t.Fatalf("render: %v", err)
			}
			if !ssp2test.JSONEqualOrdered(t, got, want) {
				t.Fatalf("rendering differs (values or member order)\n got: %s\nwant: %s", got, want)
			}
			re, err := codec.AppendSparse(nil, sr.Row, sr.Present, pk)
			if err != nil || !bytes.Equal(re, bin) {
				t.Fatalf("re-encode = %x, %v\nwant %x", re, err, bin)
			}
			pcols, psr, err := ParseSparseJSON(want)
			if err != nil {
				t.Fatalf("ParseSparseJSON: %v", err)
			}
			if !reflect.DeepEqual(pcols, cols) {
				t.Fatalf("the rendering's columns are not the manifest's:\n%+v\n%+v", pcols, cols)
			}
			fromJSON, err := codec.AppendSparse(nil, psr.Row, psr.Present, pk)
			if err != nil {
				t.Fatalf("encode the parsed rendering: %v", err)
			}
			if !bytes.Equal(fromJSON, bin) {
				// The only permitted difference: insignificant whitespace
				// inside json values, which a rendering cannot carry.
				compacted := false
				for i, v := range sr.Row {
					if raw, ok := v.(json.RawMessage); ok {
						c, err := compactJSON(raw)
						if err != nil {
							t.Fatal(err)
						}
						compacted = compacted || !bytes.Equal(c, raw)
						sr.Row[i] = json.RawMessage(c)
					}
				}
				norm, err := codec.AppendSparse(nil, sr.Row, sr.Present, pk)
				if err != nil || !compacted || !bytes.Equal(fromJSON, norm) {
					t.Fatalf("encode(ParseSparseJSON(json)) differs from .bin\n got: %x\nwant: %x", fromJSON, bin)
				}
				t.Logf("note: .bin carries non-compact JSON text; the rendering encodes to it up to that whitespace")
			}
		})
	}
	for _, c := range man.Invalid {
		t.Run("invalid/"+c.Name, func(t *testing.T) {
			bin := ssp2test.ReadFile(t, dir, "push", c.Bin)
			_, err := codec.DecodeSparse(bin, pk)
			wantCode(t, err, c.Error)
			wantCode(t, codec.ValidateSparse(bin, pk), c.Error)
			why, ok := pushInvalidReasons[c.Name]
			if !ok {
				t.Logf("no expected reason for %q; checked the code only (%v)", c.Name, err)
				return
			}
			var de *DecodeError
			if errors.As(err, &de); !strings.Contains(de.Reason, why) {
				t.Fatalf("refused for %q, want a reason with %q (the manifest: %s)", de.Reason, why, c.Covers)
			}
		})
	}
}
