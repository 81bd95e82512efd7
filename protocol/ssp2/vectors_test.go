package ssp2

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/synclane/synclane/protocol/ssp2/ssp2test"
	"github.com/synclane/synclane/protocol/syncerr"
)

// compactMessageJSON compacts every json-typed field of m in place and
// reports whether anything changed.
func compactMessageJSON(t *testing.T, m *Message) bool {
	changed := false
	c := func(v *json.RawMessage) {
		if *v == nil {
			return
		}
		out, err := compactJSON(*v)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(out, *v) {
			changed = true
		}
		*v = out
	}
	// Every frame is a pointer to a struct; its json-typed fields are the
	// top-level fields of type json.RawMessage.
	raw := reflect.TypeFor[json.RawMessage]()
	for _, f := range m.Frames {
		v := reflect.ValueOf(f).Elem()
		for i := 0; i < v.NumField(); i++ {
			if v.Field(i).Type() == raw {
				c(v.Field(i).Addr().Interface().(*json.RawMessage))
			}
		}
	}
	return changed
}

func compactSegmentJSON(t *testing.T, s *Segment) bool {
	changed := false
	for _, b := range s.Blocks {
		for _, r := range b {
			for i, v := range r.Values {
				if raw, ok := v.(json.RawMessage); ok {
					out, err := compactJSON(raw)
					if err != nil {
						t.Fatal(err)
					}
					if !bytes.Equal(out, raw) {
						changed = true
					}
					r.Values[i] = json.RawMessage(out)
				}
			}
		}
	}
	return changed
}

func wantCode(t *testing.T, err error, code string) {
	t.Helper()
	if err == nil {
		t.Fatalf("decode succeeded, want %s", code)
	}
	if got := string(syncerr.CodeOf(err)); got != code {
		t.Fatalf("code = %s, want %s (err %v)", got, code, err)
	}
	var de *DecodeError
	if !errors.As(err, &de) {
		t.Fatalf("error %v does not wrap *DecodeError", err)
	}
}

func TestMessageVectors(t *testing.T) {
	checkMessageVectors(t, ssp2test.VectorsDir(t), nil)
}

// checkMessageVectors runs the request and response vectors of dir: each
// case decodes, renders as its .json (members in its order), re-encodes byte-exact (also from
// the rendering, up to JSON whitespace) and, when versions is set, has one
// of those wire versions; each invalid case is refused with its
// manifest's code and, where invalidReasons names the case, for that
// reason.
func checkMessageVectors(t *testing.T, dir string, versions []uint16) {
	for _, kind := range []string{"request", "response"} {
		man := ssp2test.LoadManifest(t, dir, kind)
		for _, c := range man.Cases {
			t.Run(kind+"/"+c.Name, func(t *testing.T) {
				bin := ssp2test.ReadFile(t, dir, kind, c.Bin)
				want := ssp2test.ReadFile(t, dir, kind, c.JSON)
				dec := DecodeRequest
				if kind == "response" {
					dec = DecodeResponse
				}
				m, err := dec(bin)
				if err != nil {
					t.Fatalf("decode: %v", err)
				}
				if versions != nil && !slices.Contains(versions, m.WireVersion) {
					t.Fatalf("wire version %d, want one of %v", m.WireVersion, versions)
				}
				m2, err := Decode(bin)
				if err != nil || m2.Kind != m.Kind {
					t.Fatalf("Decode (kind from header): %v", err)
				}
				got, err := RenderJSON(m)
				if err != nil {
					t.Fatalf("render: %v", err)
				}
				if !ssp2test.JSONEqualOrdered(t, got, want) {
					t.Fatalf("rendering differs (values or member order)\n got: %s\nwant: %s", got, want)
				}
				re, err := Encode(m)
				if err != nil {
					t.Fatalf("encode: %v", err)
				}
				if !bytes.Equal(re, bin) {
					t.Fatalf("re-encode differs\n got: %x\nwant: %x", re, bin)
				}
				// Streaming encoder gives the same bytes.
				var buf bytes.Buffer
				enc := NewEncoder(&buf, m.WireVersion, m.Kind)
				for _, f := range m.Frames {
					if err := enc.WriteFrame(f); err != nil {
						t.Fatalf("WriteFrame: %v", err)
					}
				}
				if err := enc.Close(); err != nil {
					t.Fatalf("Close: %v", err)
				}
				if !bytes.Equal(buf.Bytes(), bin) {
					t.Fatalf("streaming encode differs")
				}
				// From the rendering.
				pm, err := ParseJSON(want)
				if err != nil {
					t.Fatalf("ParseJSON: %v", err)
				}
				fromJSON, err := Encode(pm)
				if err != nil {
					t.Fatalf("encode parsed rendering: %v", err)
				}
				if bytes.Equal(fromJSON, bin) {
					return
				}
				// The only permitted difference: insignificant whitespace
				// inside json-typed fields, which a rendering cannot carry.
				if !compactMessageJSON(t, m) {
					t.Fatalf("encode(ParseJSON(json)) differs from .bin\n got: %x\nwant: %x", fromJSON, bin)
				}
				norm, err := Encode(m)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(fromJSON, norm) {
					t.Fatalf("encode(ParseJSON(json)) differs from .bin beyond JSON whitespace")
				}
				t.Logf("note: .bin carries non-compact JSON text; encode(ParseJSON) equals .bin up to that whitespace")
			})
		}
		for _, c := range man.Invalid {
			t.Run(kind+"/invalid/"+c.Name, func(t *testing.T) {
				bin := ssp2test.ReadFile(t, dir, kind, c.Bin)
				_, err := Decode(bin)
				wantCode(t, err, c.Error)
				if kind == "request" {
					_, err = DecodeRequest(bin)
				} else {
					_, err = DecodeResponse(bin)
				}
				wantCode(t, err, c.Error)
				if why, ok := invalidReasons[c.Name]; ok {
					var de *DecodeError
					if errors.As(err, &de); !strings.Contains(de.Reason, why) {
						t.Fatalf("refused for %q, want a reason with %q (the manifest: %s)", de.Reason, why, c.Covers)
					}
				}
				// The streaming decoder refuses it too, at the latest
				// where the message should end.
				d := NewDecoder(bytes.NewReader(bin), 0, 0)
				for err = nil; err == nil; _, err = d.Next() {
				}
				if errors.Is(err, io.EOF) {
					t.Fatal("the streaming decoder reads the invalid message to its end")
				}
				wantCode(t, err, c.Error)
			})
		}
	}
}

// invalidReasons is why each named invalid vector must be refused, so
// that a vector refused for another fault (an unknown wire version, say)
// does not pass as covering its case.
var invalidReasons = map[string]string{
	"truncated-no-end":         "truncated",
	"bad-magic":                "bad magic",
	"unsupported-wire-version": "unsupported wireVersion 999",
	"nonzero-flags":            "flags byte",
	"overlong-frame-length":    "exceeds remaining",
	"op-enum-out-of-range":     "op byte 3",
	"upsert-without-payload":   "payload",
	"bool-byte-out-of-range":   "bool byte",
}

func TestSegmentVectors(t *testing.T) {
	dir := ssp2test.VectorsDir(t)
	man := ssp2test.LoadManifest(t, dir, "segment")
	for _, c := range man.Cases {
		t.Run(c.Name, func(t *testing.T) {
			bin := ssp2test.ReadFile(t, dir, "segment", c.Bin)
			want := ssp2test.ReadFile(t, dir, "segment", c.JSON)
			s, err := DecodeSegment(bin)
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			if err := validateSegment(bin, 0); err != nil {
				t.Fatalf("validate: %v", err)
			}
			got, err := RenderSegmentJSON(s)
			if err != nil {
				t.Fatal(err)
			}
			if !ssp2test.JSONEqual(t, got, want) {
				t.Fatalf("rendering differs\n got: %s\nwant: %s", got, want)
			}
			re, err := EncodeSegment(s)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(re, bin) {
				t.Fatalf("re-encode differs\n got: %x\nwant: %x", re, bin)
			}
			// Row codec round trip of every row.
			codec := NewRowCodec(s.Columns)
			for _, b := range s.Blocks {
				for _, r := range b {
					enc, err := codec.Append(nil, r.Values)
					if err != nil {
						t.Fatal(err)
					}
					if err := codec.Validate(enc); err != nil {
						t.Fatal(err)
					}
					if !bytes.Contains(bin, enc) {
						t.Fatalf("row encoding not found in segment bytes")
					}
				}
			}
			ps, err := ParseSegmentJSON(want)
			if err != nil {
				t.Fatalf("ParseSegmentJSON: %v", err)
			}
			fromJSON, err := EncodeSegment(ps)
			if err != nil {
				t.Fatal(err)
			}
			if bytes.Equal(fromJSON, bin) {
				return
			}
			if !compactSegmentJSON(t, s) {
				t.Fatalf("encode(ParseSegmentJSON(json)) differs from .bin\n got: %x\nwant: %x", fromJSON, bin)
			}
			norm, err := EncodeSegment(s)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(fromJSON, norm) {
				t.Fatalf("encode(ParseSegmentJSON(json)) differs from .bin beyond JSON whitespace")
			}
			t.Logf("note: .bin carries non-compact JSON column text; encode(ParseSegmentJSON) equals .bin up to that whitespace")
		})
	}
	for _, c := range man.Invalid {
		t.Run("invalid/"+c.Name, func(t *testing.T) {
			bin := ssp2test.ReadFile(t, dir, "segment", c.Bin)
			_, err := DecodeSegment(bin)
			wantCode(t, err, c.Error)
			wantCode(t, validateSegment(bin, 0), c.Error)
		})
	}
}
