package ssp2

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// addVectorSeeds adds every .bin of kind (valid and invalid) found in the
// v1/v2 and the v3 vector directories, if present; fuzzing works without
// them.
func addVectorSeeds(f *testing.F, kind string) {
	addSeedsFrom(f, vectorSeedDir("SSP2_VECTORS", "ssp2-vectors"), kind)
	addSeedsFrom(f, vectorSeedDir("SSP2_VECTORS_V3", "ssp2-vectors-v3"), kind)
}

// vectorSeedDir is $env, or ../shared/<name> relative to the module root
// ("" when there is none).
func vectorSeedDir(env, name string) string {
	if dir := os.Getenv(env); dir != "" {
		return dir
	}
	wd, _ := os.Getwd()
	for d := wd; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return filepath.Join(d, "..", "shared", name)
		}
		if filepath.Dir(d) == d {
			return ""
		}
	}
}

func addSeedsFrom(f *testing.F, dir, kind string) {
	if dir == "" {
		return
	}
	for _, pat := range []string{"*.bin", "invalid/*.bin"} {
		files, _ := filepath.Glob(filepath.Join(dir, kind, pat))
		for _, p := range files {
			if b, err := os.ReadFile(p); err == nil {
				f.Add(b)
			}
		}
	}
}

// checkMessageRoundTrip: a decoded message re-encodes to exactly the input
// (the encoding is canonical) and decodes again.
func checkMessageRoundTrip(t *testing.T, in []byte, m *Message) {
	out, err := Encode(m)
	if err != nil {
		t.Fatalf("decoded message does not encode: %v", err)
	}
	if !bytes.Equal(out, in) {
		t.Fatalf("re-encode differs\n in: %x\nout: %x", in, out)
	}
	if _, err := Decode(out); err != nil {
		t.Fatalf("re-encoded message does not decode: %v", err)
	}
	if _, err := RenderJSON(m); err != nil {
		t.Fatalf("render: %v", err)
	}
}

func FuzzDecodeRequest(f *testing.F) {
	addVectorSeeds(f, "request")
	f.Add(rawMsg(1, KindRequest, reqHdrV1, pullHdr3, subFrame(u32(0), i64(1))))
	f.Add(rawMsg(2, KindRequest, frm(FrameReqHeader, cat(s("c"), appendI32(nil, 1), []byte{1}, s("e"))), frm(FramePushCommit, cat(s("c1"), u32(1), s("notes"), s("r"), []byte{2, 0, 0}))))
	f.Fuzz(func(t *testing.T, in []byte) {
		m, err := DecodeRequest(in)
		if err != nil {
			return
		}
		checkMessageRoundTrip(t, in, m)
		if _, err := m.Request(); err != nil {
			t.Fatal(err)
		}
	})
}

func FuzzDecodeResponse(f *testing.F) {
	addVectorSeeds(f, "response")
	f.Add(rawMsg(1, KindResponse, respHdrV1, subStart, frm(0x17, []byte{1}), subEnd))
	f.Add(rawMsg(1, KindResponse, respHdrV1, frm(FramePushResult, cat(s("c1"), []byte{3, 0}, u32(0))), frm(FramePushResultDetails, cat(s("c1"), u32(1), appendI32(nil, 0), s(`{"reason":"a"}`)))))
	f.Add(rawMsg(WireV3, KindResponse, frm(FrameRespHeader, cat([]byte{0, 0}, s("e"), []byte{0})),
		frm(FramePushResult, cat(s("c1"), []byte{3, 0}, u32(1), i32(0), []byte{2}, s("sync.version_conflict"), s("m"), i64(7), appendBytes(nil, []byte{1}), appendBytes(nil, []byte{2})))))
	f.Fuzz(func(t *testing.T, in []byte) {
		m, err := DecodeResponse(in)
		if err != nil {
			return
		}
		checkMessageRoundTrip(t, in, m)
	})
}

func FuzzDecodeSegment(f *testing.F) {
	addVectorSeeds(f, "segment")
	f.Add(NewSegmentBuilder("t", 1, []Column{{Name: "a", Type: TypeString, Nullable: true}}).Finish())
	f.Fuzz(func(t *testing.T, in []byte) {
		s, err := DecodeSegment(in)
		verr := validateSegment(in, 0)
		if (err == nil) != (verr == nil) {
			t.Fatalf("DecodeSegment (%v) and validate (%v) disagree", err, verr)
		}
		if err != nil {
			return
		}
		out, err := EncodeSegment(s)
		if err != nil {
			t.Fatalf("decoded segment does not encode: %v", err)
		}
		if !bytes.Equal(out, in) {
			t.Fatalf("re-encode differs\n in: %x\nout: %x", in, out)
		}
		if _, err := RenderSegmentJSON(s); err != nil {
			t.Fatal(err)
		}
	})
}

var fuzzRowCols = []Column{
	{Name: "s", Type: TypeString}, {Name: "i", Type: TypeInteger, Nullable: true},
	{Name: "f", Type: TypeFloat, Nullable: true}, {Name: "b", Type: TypeBoolean},
	{Name: "j", Type: TypeJSON, Nullable: true}, {Name: "by", Type: TypeBytes, Nullable: true},
	{Name: "r", Type: TypeBlobRef, Nullable: true}, {Name: "c", Type: TypeCRDT, Nullable: true},
	{Name: "t", Type: TypeString, Nullable: true},
}

func FuzzRowCodec(f *testing.F) {
	codec := NewRowCodec(fuzzRowCols)
	seed, err := codec.Append(nil, Row{"x", int64(1), 1.5, true, json.RawMessage(`{"a":[1]}`), []byte{1, 2}, nil, []byte{}, nil})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed)
	f.Add([]byte{0xf6, 0x01})
	f.Fuzz(func(t *testing.T, in []byte) {
		row, err := codec.Decode(in)
		verr := codec.Validate(in)
		if (err == nil) != (verr == nil) {
			t.Fatalf("Decode (%v) and Validate (%v) disagree", err, verr)
		}
		if err != nil {
			return
		}
		out, err := codec.Append(nil, row)
		if err != nil {
			t.Fatalf("decoded row does not encode: %v", err)
		}
		if !bytes.Equal(out, in) {
			t.Fatalf("re-encode differs\n in: %x\nout: %x", in, out)
		}
	})
}

// FuzzSparseRow: a sparse row of the push vectors' table that decodes
// re-encodes with AppendSparse to exactly its bytes, ValidateSparse agrees
// with DecodeSparse, and the row renders per rule 11 and parses back.
func FuzzSparseRow(f *testing.F) {
	addSeedsFrom(f, vectorSeedDir("SSP2_VECTORS_V3", "ssp2-vectors-v3"), "push")
	for _, c := range sparseCases() {
		if reflect.DeepEqual(c.cols, pushCols) {
			f.Add(c.in)
		}
	}
	codec := NewRowCodec(pushCols)
	f.Fuzz(func(t *testing.T, in []byte) {
		sr, err := codec.DecodeSparse(in, 0)
		verr := codec.ValidateSparse(in, 0)
		if (err == nil) != (verr == nil) {
			t.Fatalf("DecodeSparse (%v) and ValidateSparse (%v) disagree", err, verr)
		}
		if err != nil {
			return
		}
		out, err := codec.AppendSparse(nil, sr.Row, sr.Present, 0)
		if err != nil {
			t.Fatalf("decoded sparse row does not encode: %v", err)
		}
		if !bytes.Equal(out, in) {
			t.Fatalf("re-encode differs\n in: %x\nout: %x", in, out)
		}
		r, err := RenderSparseJSON(pushCols, sr)
		if err != nil {
			t.Fatalf("render: %v", err)
		}
		if _, _, err := ParseSparseJSON(r); err != nil {
			t.Fatalf("the rendering does not parse: %v\n%s", err, r)
		}
	})
}

// FuzzParseControl: realtime control messages never panic, and an accepted
// message marshals and parses again.
func FuzzParseControl(f *testing.F) {
	for _, seed := range []string{
		`{"event":"hello","data":{"protocolVersion":1,"sessionId":"s","actorId":"a","clientId":"c","cursor":5,"latestCursor":9,"requiresSync":true,"timestamp":1}}`,
		`{"event":"sync","data":{"cursor":64,"requiresPull":true,"reason":"catchup-required","timestamp":1}}`,
		`{"type":"ack","cursor":3}`,
		`{"event":"presence","data":{"scopeKey":"p:1","doc":{"x":1}}}`,
		`{"event":"heartbeat","data":{"timestamp":1.5}}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		v, err := ParseControl(in)
		if err != nil {
			return
		}
		out, err := MarshalControl(v)
		if err != nil {
			return // unknown events are tolerated on parse but not re-marshalled
		}
		if _, err := ParseControl(out); err != nil {
			t.Fatalf("re-marshalled control message does not parse: %v\n%s", err, out)
		}
	})
}
