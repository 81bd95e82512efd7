package yjs

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// TestYjsAppliesMergedUpdates merges every vector's updates in a random
// order with this package and has the real yjs package (testdata/node,
// check.mjs) apply each merged update to a fresh document: it must
// integrate completely and reach exactly the state the generator recorded.
// Skipped when node/npm are missing or npm ci fails, unless
// SYNCLANE_REQUIRE_INTEROP=1.
func TestYjsAppliesMergedUpdates(t *testing.T) {
	if testing.Short() {
		t.Skip("node check: skipped in -short mode (run without -short)")
	}
	require := os.Getenv("SYNCLANE_REQUIRE_INTEROP") == "1"
	unavailable := func(format string, args ...any) {
		t.Helper()
		if require {
			t.Fatalf("SYNCLANE_REQUIRE_INTEROP=1: "+format, args...)
		}
		t.Skipf(format+" (install Node.js with npm, e.g. apt-get install nodejs npm, and let npm ci reach the registry; SYNCLANE_REQUIRE_INTEROP=1 makes this a failure)", args...)
	}
	dir, err := filepath.Abs(filepath.Join("testdata", "node"))
	if err != nil {
		t.Fatal(err)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		unavailable("node not found: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "yjs")); errors.Is(err, os.ErrNotExist) {
		npm, err := exec.LookPath("npm")
		if err != nil {
			unavailable("npm not found: %v", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		cmd := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund")
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		cancel()
		if err != nil {
			unavailable("npm ci failed (no network?): %v\n%s", err, out)
		}
	}

	type merged struct {
		Name   string          `json:"name"`
		Merged string          `json:"merged"`
		State  json.RawMessage `json:"state"`
	}
	rng := rand.New(rand.NewPCG(18, 3))
	var cases []merged
	for _, v := range loadVectors(t) {
		us := v.updates(t)
		rng.Shuffle(len(us), func(i, j int) { us[i], us[j] = us[j], us[i] })
		m := foldRandom(t, rng, us)
		cases = append(cases, merged{v.Name, base64.StdEncoding.EncodeToString(m), v.State})
	}
	b, err := json.Marshal(cases)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "merged.json")
	if err := os.WriteFile(file, b, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "check.mjs", file)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("yjs check failed: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}
