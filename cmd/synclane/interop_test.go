package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// lockedBuffer is an io.Writer safe for the server goroutine and the test.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestReferenceClientInterop serves the demo schema in-process with the
// wire-version window 2,3 (--wire-versions) and runs the Node interop
// scenario of examples/reference-client against it: two clients of the
// 0.15.48 generation subscribe, push, pull and converge on wire version 2
// with the epoch handshake, a late joiner bootstraps from a rows segment,
// and the schema floor answers an unserved schemaVersion. Then the same
// client against the default window (version 3 alone) must be refused on
// its first request, 400 sync.invalid_request, before any frame is read.
// It is skipped when node/npm are missing or the npm install fails, unless
// SYNCLANE_REQUIRE_INTEROP=1.
func TestReferenceClientInterop(t *testing.T) {
	if testing.Short() {
		t.Skip("interop test: skipped in -short mode (run without -short)")
	}
	require := os.Getenv("SYNCLANE_REQUIRE_INTEROP") == "1"
	unavailable := func(format string, args ...any) {
		t.Helper()
		if require {
			t.Fatalf("SYNCLANE_REQUIRE_INTEROP=1: "+format, args...)
		}
		t.Skipf(format+" (install Node.js with npm, e.g. apt-get install nodejs npm, and let npm ci reach the registry; SYNCLANE_REQUIRE_INTEROP=1 makes this a failure)", args...)
	}

	dir, err := filepath.Abs(filepath.Join("..", "..", "examples", "reference-client"))
	if err != nil {
		t.Fatal(err)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		unavailable("node not found: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules")); errors.Is(err, os.ErrNotExist) {
		npm, err := exec.LookPath("npm")
		if err != nil {
			unavailable("npm not found: %v", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
		cmd := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund")
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		cancel()
		if err != nil {
			unavailable("npm ci failed (no network?): %v\n%s", err, out)
		}
	}
	runNode := func(t *testing.T, args ...string) {
		t.Helper()
		nctx, ncancel := context.WithTimeout(context.Background(), 45*time.Second)
		defer ncancel()
		cmd := exec.CommandContext(nctx, node, append([]string{"interop.mjs"}, args...)...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		t.Logf("node interop.mjs %s:\n%s", strings.Join(args, " "), strings.TrimSpace(string(out)))
		if err != nil {
			t.Fatalf("interop scenario failed: %v", err)
		}
	}

	t.Run("window 2,3", func(t *testing.T) {
		// A free loopback port; the tiny window before serve binds it is
		// fine for a test.
		runNode(t, startServe(t, "--data", t.TempDir(), "--wire-versions", "2,3"))
	})
	t.Run("default window refuses it", func(t *testing.T) {
		runNode(t, startServe(t, "--data", t.TempDir()), "--expect-refused")
	})
}
