package main

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/ssp2/ssp2test"
)

func jsonEqual(t *testing.T, a, b []byte) bool {
	t.Helper()
	var va, vb any
	if err := json.Unmarshal(a, &va); err != nil {
		t.Fatalf("bad JSON output: %v\n%s", err, a)
	}
	if err := json.Unmarshal(b, &vb); err != nil {
		t.Fatal(err)
	}
	return reflect.DeepEqual(va, vb)
}

// compactEqual reports whether two encodings decode to the same value once
// json-typed text is compacted (renderings cannot carry JSON whitespace).
func sameUpToJSONWhitespace(t *testing.T, kind string, a, b []byte) bool {
	t.Helper()
	var ra, rb []byte
	var err error
	if kind == "segment" {
		ra, err = decode("segment", a)
		if err == nil {
			rb, err = decode("segment", b)
		}
	} else {
		ra, err = decode("", a)
		if err == nil {
			rb, err = decode("", b)
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	return jsonEqual(t, ra, rb)
}

func TestRunVectors(t *testing.T) {
	runVectors(t, ssp2test.VectorsDir(t), "request", "response", "segment")
}

// The wire v3 request and response vectors decode to their renderings
// and encode back, as the v1/v2 ones do: the tool follows the rendering's
// wireVersion.
func TestRunVectorsV3(t *testing.T) {
	runVectors(t, ssp2test.VectorsV3Dir(t), "request", "response")
}

// runVectors runs ssp2 decode and encode over the vectors of kinds in dir.
func runVectors(t *testing.T, dir string, kinds ...string) {
	for _, kind := range kinds {
		man := ssp2test.LoadManifest(t, dir, kind)
		for _, c := range man.Cases {
			t.Run(kind+"/"+c.Name, func(t *testing.T) {
				binPath := filepath.Join(dir, kind, c.Bin)
				jsonPath := filepath.Join(dir, kind, c.JSON)
				bin := ssp2test.ReadFile(t, dir, kind, c.Bin)
				want := ssp2test.ReadFile(t, dir, kind, c.JSON)
				var args []string
				if kind == "segment" {
					args = []string{"--kind", "segment"}
				}
				var out, errb bytes.Buffer
				if code := run(append(append([]string{"decode"}, args...), binPath), nil, &out, &errb); code != 0 {
					t.Fatalf("decode exit %d: %s", code, errb.String())
				}
				if !jsonEqual(t, out.Bytes(), want) {
					t.Fatalf("decode output differs:\n%s", out.String())
				}
				// stdin path
				out.Reset()
				if code := run(append(append([]string{"decode"}, args...), "-"), bytes.NewReader(bin), &out, &errb); code != 0 || !jsonEqual(t, out.Bytes(), want) {
					t.Fatalf("decode from stdin failed (%d): %s", code, errb.String())
				}
				out.Reset()
				if kind != "segment" {
					args = []string{"--kind", kind}
				}
				if code := run(append(append([]string{"encode"}, args...), jsonPath), nil, &out, &errb); code != 0 {
					t.Fatalf("encode exit %d: %s", code, errb.String())
				}
				if bytes.Equal(out.Bytes(), bin) {
					return
				}
				// Only JSON whitespace (not representable in a rendering)
				// may differ; see the package tests for the exact check.
				if !sameUpToJSONWhitespace(t, kind, out.Bytes(), bin) || !bytes.Contains(bin, []byte(`": `)) {
					t.Fatalf("encode output differs from .bin\n got: %x\nwant: %x", out.Bytes(), bin)
				}
				t.Logf("note: .bin has non-compact JSON text; encode output equals it up to that whitespace")
			})
		}
		for _, c := range man.Invalid {
			t.Run(kind+"/invalid/"+c.Name, func(t *testing.T) {
				args := []string{"decode"}
				if kind == "segment" {
					args = append(args, "--kind", "segment")
				}
				var out, errb bytes.Buffer
				code := run(append(args, filepath.Join(dir, kind, c.Bin)), nil, &out, &errb)
				if code != 1 {
					t.Fatalf("exit %d, want 1", code)
				}
				if !strings.HasPrefix(errb.String(), c.Error+": ") {
					t.Fatalf("stderr %q does not start with %s", errb.String(), c.Error)
				}
				if out.Len() != 0 {
					t.Fatalf("stdout not empty on error")
				}
			})
		}
	}
}

func TestRunUsage(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run(nil, nil, &out, &errb); code != 2 {
		t.Fatalf("no args: exit %d", code)
	}
	if code := run([]string{"frobnicate", "-"}, strings.NewReader(""), &out, &errb); code != 2 {
		t.Fatalf("bad command: exit %d", code)
	}
	if code := run([]string{"decode", "--kind", "nope", "-"}, strings.NewReader(""), &out, &errb); code != 2 {
		t.Fatalf("bad kind: exit %d", code)
	}
	// A request rendering encoded as --kind response is refused.
	m := &ssp2.Message{WireVersion: 1, Kind: ssp2.KindRequest, Frames: []ssp2.Frame{&ssp2.ReqHeader{ClientID: "c", SchemaVersion: 1}, &ssp2.PullHeader{Accept: 3}}}
	r, err := ssp2.RenderJSON(m)
	if err != nil {
		t.Fatal(err)
	}
	errb.Reset()
	if code := run([]string{"encode", "--kind", "response", "-"}, bytes.NewReader(r), &out, &errb); code != 1 {
		t.Fatalf("kind mismatch: exit %d", code)
	}
}

func TestRunHelp(t *testing.T) {
	for _, args := range [][]string{{"-h"}, {"--help"}, {"help"}, {"decode", "-h"}} {
		var out, errb bytes.Buffer
		if code := run(args, nil, &out, &errb); code != 0 || !strings.Contains(out.String()+errb.String(), "usage: ssp2 decode|encode") {
			t.Fatalf("%v: exit %d\nstdout %q\nstderr %q", args, code, out.String(), errb.String())
		}
	}
}

// curl | ssp2 decode - on a refused request: the JSON error body is shown
// as such (not "bad magic"), and decode exits non-zero.
func TestDecodeJSONErrorBody(t *testing.T) {
	body := `{"code":"sync.unknown_table","category":"schema-mismatch","retryable":false,"recommendedAction":"regenerateClient","message":"subscription \"sub-notes\" names unknown table \"notes\""}` + "\n"
	var out, errb bytes.Buffer
	code := run([]string{"decode", "-"}, strings.NewReader(body), &out, &errb)
	if code != 1 || strings.Contains(errb.String(), "bad magic") ||
		!strings.Contains(errb.String(), "JSON error body") || !strings.Contains(errb.String(), "sync.unknown_table: subscription") {
		t.Fatalf("exit %d, stderr %q", code, errb.String())
	}
	if !jsonEqual(t, out.Bytes(), []byte(body)) || !strings.Contains(out.String(), "\n  \"code\": \"sync.unknown_table\"") {
		t.Fatalf("stdout is not the indented error body: %q", out.String())
	}
	// A rendering given to decode instead of encode.
	out.Reset()
	errb.Reset()
	if code := run([]string{"decode", "-"}, strings.NewReader(`{"magic":"SSP2"}`), &out, &errb); code != 1 || !strings.Contains(errb.String(), "ssp2 encode") {
		t.Fatalf("rendering to decode: exit %d, stderr %q", code, errb.String())
	}
	errb.Reset()
	if code := run([]string{"decode", "-"}, strings.NewReader(`{"code":`), &out, &errb); code != 1 || !strings.Contains(errb.String(), "neither") {
		t.Fatalf("broken JSON: exit %d, stderr %q", code, errb.String())
	}
}
