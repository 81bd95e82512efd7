// Package ssp2test locates the SSP2 golden vectors for tests.
package ssp2test

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// VectorsDir returns the wire v1/v2 golden-vector directory: $SSP2_VECTORS
// if set, otherwise ../shared/ssp2-vectors relative to the module root (the
// nearest ancestor of the working directory holding go.mod). When the
// directory is absent the test is skipped, or fails if
// SYNCLANE_REQUIRE_VECTORS=1.
func VectorsDir(t testing.TB) string {
	t.Helper()
	return vectorsDir(t, "SSP2_VECTORS", "ssp2-vectors", "wire versions 1 and 2: the 0.15.48 release")
}

// VectorsV3Dir returns the wire v3 golden-vector directory (request,
// response and push): $SSP2_VECTORS_V3 if set, otherwise
// ../shared/ssp2-vectors-v3 relative to the module root, skipped or failed
// when absent exactly as VectorsDir.
func VectorsV3Dir(t testing.TB) string {
	t.Helper()
	return vectorsDir(t, "SSP2_VECTORS_V3", "ssp2-vectors-v3", "wire version 3: main")
}

// vectorsDir finds the vectors of env (default ../shared/<name>); a
// missing directory skips t with a message naming env, where the vectors
// come from (source: which revision of the public repository) and the
// variable that turns the skip into a failure.
func vectorsDir(t testing.TB, env, name, source string) string {
	t.Helper()
	how := func(dir string) string {
		return "SSP2 vectors not found at " + dir + ": set " + env + " to the spec/vectors directory of a clone of " +
			"https://github.com/syncular/syncular (" + source + "), or put that directory at ../shared/" + name +
			" next to this repository; SYNCLANE_REQUIRE_VECTORS=1 makes this a failure (README: what the tests skip)"
	}
	dir := os.Getenv(env)
	if dir == "" {
		root, err := moduleRoot()
		if err != nil {
			missing(t, how("../shared/"+name)+" (cannot locate the module root: "+err.Error()+")")
			return ""
		}
		dir = filepath.Join(root, "..", "shared", name)
	}
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		missing(t, how(dir))
		return ""
	}
	return dir
}

func missing(t testing.TB, msg string) {
	t.Helper()
	if os.Getenv("SYNCLANE_REQUIRE_VECTORS") == "1" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", os.ErrNotExist
		}
		dir = parent
	}
}

// Case is one manifest entry.
type Case struct {
	Name   string `json:"name"`
	Bin    string `json:"bin"`
	JSON   string `json:"json"`
	Error  string `json:"error"`
	Covers string `json:"covers"`
}

// Manifest is a per-kind manifest.json. Columns and PrimaryKey are set for
// the push kind (codec-level sparse rows of one table): the table's rule-8
// column objects, as JSON, and the primary-key column's name.
type Manifest struct {
	Kind       string          `json:"kind"`
	Columns    json.RawMessage `json:"columns"`
	PrimaryKey string          `json:"primaryKey"`
	Cases      []Case          `json:"cases"`
	Invalid    []Case          `json:"invalid"`
}

// LoadManifest reads <dir>/<kind>/manifest.json, failing the test on error.
func LoadManifest(t testing.TB, dir, kind string) *Manifest {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, kind, "manifest.json"))
	if err != nil {
		t.Fatalf("read manifest: %v", err)
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("parse manifest %s: %v", kind, err)
	}
	if len(m.Cases) == 0 {
		t.Fatalf("manifest %s lists no cases", kind)
	}
	return &m
}

// ReadFile reads <dir>/<kind>/<name>, failing the test on error.
func ReadFile(t testing.TB, dir, kind, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, kind, name))
	if err != nil {
		t.Fatalf("read vector: %v", err)
	}
	return b
}

// JSONEqual reports whether a and b are structurally equal JSON documents.
func JSONEqual(t testing.TB, a, b []byte) bool {
	t.Helper()
	var va, vb any
	if err := json.Unmarshal(a, &va); err != nil {
		t.Fatalf("unmarshal a: %v\n%s", err, a)
	}
	if err := json.Unmarshal(b, &vb); err != nil {
		t.Fatalf("unmarshal b: %v\n%s", err, b)
	}
	return reflect.DeepEqual(va, vb)
}

// JSONEqualOrdered reports whether a and b are the same JSON document with
// object members in the same order (SPEC §11.1 rule 2 makes the order of a
// rendering's members part of it): their token streams are equal, numbers
// compared by value and whitespace ignored.
func JSONEqualOrdered(t testing.TB, a, b []byte) bool {
	t.Helper()
	ta, tb := jsonTokens(t, a), jsonTokens(t, b)
	return reflect.DeepEqual(ta, tb)
}

func jsonTokens(t testing.TB, b []byte) []json.Token {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(b))
	var out []json.Token
	for {
		tok, err := d.Token()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatalf("not JSON: %v\n%s", err, b)
		}
		out = append(out, tok)
	}
}
