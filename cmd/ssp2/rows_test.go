package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/ssp2/ssp2test"
)

var update = flag.Bool("update", false, "rewrite testdata/*.bin and *.decoded.json from testdata/*.json")

const testSchema = "testdata/schema.json"

// runOK runs ssp2 with args and stdin and returns stdout, failing the test
// on a non-zero exit.
func runOK(t *testing.T, stdin []byte, args ...string) []byte {
	t.Helper()
	var out, errb bytes.Buffer
	if code := run(args, bytes.NewReader(stdin), &out, &errb); code != 0 {
		t.Fatalf("ssp2 %v: exit %d, stderr %q", args, code, errb.String())
	}
	if errb.Len() != 0 {
		t.Fatalf("ssp2 %v: unexpected stderr %q", args, errb.String())
	}
	return out.Bytes()
}

// The golden round trip: the rendering a person writes (rows as values
// per column) encodes to NAME.bin; NAME.bin decodes to NAME.decoded.json,
// which says the same as NAME.json and encodes to NAME.bin again; without
// --schema the same bytes decode to base64 rows and encode back unchanged.
func TestSchemaGolden(t *testing.T) {
	for _, name := range []string{"push", "pull", "tags-segment", "push-v3", "conflict-v3"} {
		t.Run(name, func(t *testing.T) {
			src := filepath.Join("testdata", name+".json")
			binPath := filepath.Join("testdata", name+".bin")
			decodedPath := filepath.Join("testdata", name+".decoded.json")
			written, err := os.ReadFile(src)
			if err != nil {
				t.Fatal(err)
			}
			bin := runOK(t, nil, "encode", "--schema", testSchema, src)
			if *update {
				if err := os.WriteFile(binPath, bin, 0o644); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(decodedPath, runOK(t, bin, "decode", "--schema", testSchema, "-"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			wantBin, err := os.ReadFile(binPath)
			if err != nil {
				t.Fatal(err)
			}
			wantDecoded, err := os.ReadFile(decodedPath)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(bin, wantBin) {
				t.Fatalf("encode --schema %s differs from %s\n got %x\nwant %x", src, binPath, bin, wantBin)
			}
			decoded := runOK(t, nil, "decode", "--schema", testSchema, binPath)
			if !bytes.Equal(decoded, wantDecoded) {
				t.Fatalf("decode --schema %s differs from %s:\n%s", binPath, decodedPath, decoded)
			}
			if !jsonEqual(t, decoded, written) {
				t.Fatalf("decode --schema %s does not say what %s says:\n%s", binPath, src, decoded)
			}
			if again := runOK(t, decoded, "encode", "--schema", testSchema, "-"); !bytes.Equal(again, wantBin) {
				t.Fatalf("the decoded rendering does not encode back to %s", binPath)
			}
			// Without --schema: rows stay base64, and the bytes round-trip.
			plain := runOK(t, wantBin, "decode", "-")
			if name != "tags-segment" && (bytes.Contains(plain, []byte(`"values"`)) || bytes.Contains(plain, []byte(`"segment"`))) {
				t.Fatalf("decode without --schema shows rows per column:\n%s", plain)
			}
			if again := runOK(t, plain, "encode", "-"); !bytes.Equal(again, wantBin) {
				t.Fatalf("decode/encode without --schema changed the bytes")
			}
			// --schema changes nothing of a rendering without rows per
			// column: encode takes base64 rows as they are.
			if again := runOK(t, plain, "encode", "--schema", testSchema, "-"); !bytes.Equal(again, wantBin) {
				t.Fatalf("encode --schema of a base64 rendering changed the bytes")
			}
		})
	}
}

// The golden push's bytes, read with the row codec alone (not the
// rendering code under test), hold the values push.json gives.
func TestSchemaGoldenPushRows(t *testing.T) {
	bin, err := os.ReadFile("testdata/push.bin")
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile(testSchema)
	if err != nil {
		t.Fatal(err)
	}
	sch, err := schema.Parse(src)
	if err != nil {
		t.Fatal(err)
	}
	m, err := ssp2.DecodeRequest(bin)
	if err != nil {
		t.Fatal(err)
	}
	pc := m.Frames[1].(*ssp2.PushCommit)
	blob := `{"blobId":"sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08","byteLength":4,"mediaType":"text/plain"}`
	for i, want := range []ssp2.Row{
		{"n-1", "p1", int64(-42), 0.125, true, json.RawMessage(`{"tags":["a","b"],"k":1}`), []byte{0xde, 0xad, 0xbe, 0xef}, blob, []byte{1, 2, 3}},
		{"n-2", "p1", nil, nil, nil, nil, nil, nil, nil},
		nil, // a delete
		{"t-1", "p1", "naïve ✓"},
	} {
		op := pc.Operations[i]
		if want == nil {
			if op.Op != ssp2.OpDelete || op.Payload != nil || op.BaseVersion == nil || *op.BaseVersion != 7 {
				t.Fatalf("op %d: %+v, want a delete at baseVersion 7", i, op)
			}
			continue
		}
		got, err := ssp2.NewRowCodec(sch.Table(op.Table).Columns).Decode(op.Payload)
		if err != nil {
			t.Fatalf("op %d: %v", i, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("op %d row:\n got %#v\nwant %#v", i, got, want)
		}
	}
}

// The golden v3 push's payloads, read with the sparse row codec alone,
// hold exactly the columns push-v3.json names, with its values; the
// conflict record of conflict-v3 carries its conflictColumns.
func TestSchemaGoldenPushV3Rows(t *testing.T) {
	bin, err := os.ReadFile("testdata/push-v3.bin")
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile(testSchema)
	if err != nil {
		t.Fatal(err)
	}
	sch, err := schema.Parse(src)
	if err != nil {
		t.Fatal(err)
	}
	m, err := ssp2.DecodeRequest(bin)
	if err != nil {
		t.Fatal(err)
	}
	if m.WireVersion != ssp2.WireV3 {
		t.Fatalf("wire version %d", m.WireVersion)
	}
	pc := m.Frames[1].(*ssp2.PushCommit)
	blob := `{"blobId":"sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08","byteLength":4,"mediaType":"text/plain"}`
	for i, want := range []struct {
		row  ssp2.Row
		pres ssp2.ColumnSet
	}{
		{ssp2.Row{"n-1", nil, int64(-42), nil, nil, json.RawMessage(`{"tags":["a","b"],"k":1}`), nil, nil, nil}, ssp2.ColumnSet{0x25, 0x00}},
		{ssp2.Row{"n-2", nil, nil, nil, nil, nil, nil, nil, []byte{1, 2, 3}}, ssp2.ColumnSet{0x09, 0x01}},
		{ssp2.Row{"n-3", "p1", nil, 0.125, true, nil, []byte{0xde, 0xad, 0xbe, 0xef}, blob, nil}, ssp2.ColumnSet{0xff, 0x01}},
		{},
		{ssp2.Row{"t-1", nil, "naïve ✓"}, ssp2.ColumnSet{0x05}},
	} {
		op := pc.Operations[i]
		if want.row == nil {
			if op.Op != ssp2.OpDelete || op.Payload != nil {
				t.Fatalf("op %d: %+v, want a delete", i, op)
			}
			continue
		}
		tb := sch.Table(op.Table)
		got, err := ssp2.NewRowCodec(tb.Columns).DecodeSparse(op.Payload, tb.PK)
		if err != nil {
			t.Fatalf("op %d: %v", i, err)
		}
		if !reflect.DeepEqual(got.Row, want.row) || !bytes.Equal(got.Present, want.pres) {
			t.Fatalf("op %d:\n got %#v %x\nwant %#v %x", i, got.Row, got.Present, want.row, want.pres)
		}
	}
	cbin, err := os.ReadFile("testdata/conflict-v3.bin")
	if err != nil {
		t.Fatal(err)
	}
	rm, err := ssp2.DecodeResponse(cbin)
	if err != nil {
		t.Fatal(err)
	}
	rec := rm.Frames[1].(*ssp2.PushResult).Results[0]
	if !bytes.Equal(rec.ConflictColumns, ssp2.ColumnSet{0x60, 0x00}) || !rec.ConflictColumns.Has(5) || !rec.ConflictColumns.Has(6) {
		t.Fatalf("conflict record %+v", rec)
	}
	if _, err := ssp2.NewRowCodec(sch.Table("notes").Columns).Decode(rec.ServerRow); err != nil {
		t.Fatalf("serverRow is not a full row of notes: %v", err)
	}
}

// Without --kind, decode tells an SSG2 segment by its magic and encode a
// segment rendering by its "magic", for every golden segment vector.
func TestSegmentKindDetected(t *testing.T) {
	dir := ssp2test.VectorsDir(t)
	man := ssp2test.LoadManifest(t, dir, "segment")
	if len(man.Cases) == 0 {
		t.Fatal("no segment vectors")
	}
	for _, c := range man.Cases {
		t.Run(c.Name, func(t *testing.T) {
			bin := ssp2test.ReadFile(t, dir, "segment", c.Bin)
			want := ssp2test.ReadFile(t, dir, "segment", c.JSON)
			out := runOK(t, bin, "decode", "-")
			if !jsonEqual(t, out, want) {
				t.Fatalf("decode without --kind:\n%s", out)
			}
			if !sameUpToJSONWhitespace(t, "segment", runOK(t, want, "encode", "-"), bin) {
				t.Fatalf("encode without --kind does not give the segment's bytes")
			}
		})
	}
}

func TestSchemaErrors(t *testing.T) {
	push, err := os.ReadFile("testdata/push.json")
	if err != nil {
		t.Fatal(err)
	}
	pushBin, err := os.ReadFile("testdata/push.bin")
	if err != nil {
		t.Fatal(err)
	}
	badSchema := filepath.Join(t.TempDir(), "bad.json")
	if err := os.WriteFile(badSchema, []byte(`{"version":1,"tables":[{"name":"t"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	otherSchema := filepath.Join(t.TempDir(), "other.json")
	if err := os.WriteFile(otherSchema, []byte(`{"version":1,"tables":[{"name":"tags","columns":[{"name":"id","type":"string"},{"name":"project_id","type":"string"}],"primaryKey":"id","scopes":["project:{project_id}"]}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	pushV3, err := os.ReadFile("testdata/push-v3.json")
	if err != nil {
		t.Fatal(err)
	}
	pushV3Bin, err := os.ReadFile("testdata/push-v3.bin")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name       string
		args       []string
		in         []byte
		code       int
		stderr     []string // substrings
		stdoutHas  string
		stdoutNone bool
	}{
		// Wire v3: sparse payloads.
		{name: "v3 values without the primary key", args: []string{"encode", "--schema", "testdata/schema.json", "-"},
			in: bytes.Replace(pushV3, []byte(`"values": {"id": "n-2", `), []byte(`"values": {`), 1), code: 1,
			stderr: []string{`frames[1].operations[1].values (table "notes", a sparse row)`, "the primary-key column must be present"}, stdoutNone: true},
		{name: "v3 present NULL in a non-nullable column", args: []string{"encode", "--schema", "testdata/schema.json", "-"},
			in: bytes.Replace(pushV3, []byte(`"values": {"id": "t-1", `), []byte(`"values": {"id": "t-1", "project_id": null, `), 1), code: 1,
			stderr: []string{`frames[1].operations[4]`, `"project_id" is not nullable`}, stdoutNone: true},
		{name: "v3 a key that names no column", args: []string{"encode", "--schema", "testdata/schema.json", "-"},
			in: bytes.Replace(pushV3, []byte(`"label": "naïve ✓"`), []byte(`"lable": "naïve ✓"`), 1), code: 1,
			stderr: []string{`frames[1].operations[4].values`, `lable`}, stdoutNone: true},
		{name: "v3 payloads as full rows are refused", args: []string{"encode", "--schema", "testdata/schema.json", "-"},
			in: bytes.Replace(pushV3, []byte(`"wireVersion": 3`), []byte(`"wireVersion": 2`), 1), code: 1,
			stderr: []string{`frames[1].operations[0].values`, `missing "project_id"`}, stdoutNone: true},
		{name: "v3 decode with a schema whose table differs", args: []string{"decode", "--schema", otherSchema, "-"}, in: pushV3Bin, code: 0,
			stderr:    []string{`ssp2: note: frames[1].operations[4].payload is not a sparse row of table "tags" in the schema`},
			stdoutHas: `"payload": "BQADAAAAdC0x`},

		{name: "missing schema file", args: []string{"decode", "--schema", "testdata/nope.json", "-"}, in: pushBin, code: 2,
			stderr: []string{"--schema", "nope.json"}, stdoutNone: true},
		{name: "schema that does not compile", args: []string{"encode", "--schema", badSchema, "-"}, in: push, code: 2,
			stderr: []string{"--schema " + badSchema}, stdoutNone: true},
		{name: "values without --schema", args: []string{"encode", "-"}, in: push, code: 1,
			stderr: []string{"values"}, stdoutNone: true},
		{name: "table not in the schema (encode)", args: []string{"encode", "--schema", "testdata/schema.json", "-"},
			in: bytes.Replace(push, []byte(`"table": "tags"`), []byte(`"table": "labels"`), 1), code: 1,
			stderr: []string{`frames[1].operations[3]`, `table "labels" is not in the schema`}, stdoutNone: true},
		{name: "value of the wrong type", args: []string{"encode", "--schema", "testdata/schema.json", "-"},
			in: bytes.Replace(push, []byte(`"rank": -42`), []byte(`"rank": "high"`), 1), code: 1,
			stderr: []string{`frames[1].operations[0].values`, `"rank"`}, stdoutNone: true},
		{name: "a column missing", args: []string{"encode", "--schema", "testdata/schema.json", "-"},
			in: bytes.Replace(push, []byte(`"label": "naïve ✓"`), []byte(`"lable": "naïve ✓"`), 1), code: 1,
			stderr: []string{`frames[1].operations[3].values`, `"label"`}, stdoutNone: true},
		{name: "null in a non-nullable column", args: []string{"encode", "--schema", "testdata/schema.json", "-"},
			in: bytes.Replace(push, []byte(`"project_id": "p1", "rank": null`), []byte(`"project_id": null, "rank": null`), 1), code: 1,
			stderr: []string{`operations[1]`, `"project_id" is not nullable`}, stdoutNone: true},
		{name: "both payload and values", args: []string{"encode", "--schema", "testdata/schema.json", "-"},
			in: bytes.Replace(push, []byte(`"op": "upsert", "values"`), []byte(`"op": "upsert", "payload": "AA==", "values"`), 1), code: 1,
			stderr: []string{`not both`}, stdoutNone: true},
		// decode shows what it can: rows of a table the schema lacks, or
		// that do not fit it, stay base64 with a note.
		{name: "decode with a schema lacking a table", args: []string{"decode", "--schema", otherSchema, "-"}, in: pushBin, code: 0,
			stderr: []string{`ssp2: note: frames[1].operations[0]: table "notes" is not in the schema; left as base64`,
				`ssp2: note: frames[1].operations[3].payload is not a row of table "tags" in the schema`},
			stdoutHas: `"payload": "AAADAAAAbi0x`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := run(tc.args, bytes.NewReader(tc.in), &out, &errb)
			if code != tc.code {
				t.Fatalf("exit %d, want %d; stderr %q", code, tc.code, errb.String())
			}
			for _, s := range tc.stderr {
				if !strings.Contains(errb.String(), s) {
					t.Errorf("stderr %q lacks %q", errb.String(), s)
				}
			}
			if tc.stdoutNone && out.Len() != 0 {
				t.Errorf("stdout not empty: %q", out.String())
			}
			if tc.stdoutHas != "" && !strings.Contains(out.String(), tc.stdoutHas) {
				t.Errorf("stdout lacks %q:\n%s", tc.stdoutHas, out.String())
			}
		})
	}
}
