// Package ssp2test locates the SSP2 golden vectors for tests.
package ssp2test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// VectorsDir returns the golden-vector directory: $SSP2_VECTORS if set,
// otherwise ../shared/ssp2-vectors relative to the module root (the nearest
// ancestor of the working directory holding go.mod). When the directory is
// absent the test is skipped, or fails if SYNCLANE_REQUIRE_VECTORS=1.
func VectorsDir(t testing.TB) string {
	t.Helper()
	dir := os.Getenv("SSP2_VECTORS")
	if dir == "" {
		root, err := moduleRoot()
		if err != nil {
			missing(t, "cannot locate module root: "+err.Error())
			return ""
		}
		dir = filepath.Join(root, "..", "shared", "ssp2-vectors")
	}
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		missing(t, "SSP2 vectors not found at "+dir)
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
	Name  string `json:"name"`
	Bin   string `json:"bin"`
	JSON  string `json:"json"`
	Error string `json:"error"`
}

// Manifest is a per-kind manifest.json.
type Manifest struct {
	Kind    string `json:"kind"`
	Cases   []Case `json:"cases"`
	Invalid []Case `json:"invalid"`
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
