package main

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
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

// TestReferenceClientInterop serves the demo schema in-process and runs the
// Node interop scenario of examples/reference-client against it: two clients
// subscribe, push, pull and converge on wire version 2 with the epoch
// handshake, a late joiner bootstraps from a rows segment, and the schema
// floor answers an unserved schemaVersion. It is skipped when node/npm are
// missing or the npm install fails, unless SYNCLANE_REQUIRE_INTEROP=1.
func TestReferenceClientInterop(t *testing.T) {
	if testing.Short() {
		t.Skip("interop test skipped in -short mode")
	}
	require := os.Getenv("SYNCLANE_REQUIRE_INTEROP") == "1"
	unavailable := func(format string, args ...any) {
		t.Helper()
		if require {
			t.Fatalf("SYNCLANE_REQUIRE_INTEROP=1: "+format, args...)
		}
		t.Skipf(format, args...)
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

	// A free loopback port; the tiny window before serve binds it is fine
	// for a test.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()

	ctx, cancel := context.WithCancel(context.Background())
	var stdout, stderr lockedBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"serve", "--listen", addr, "--data", t.TempDir(), "--log-level", "warn"},
			func(string) string { return "" }, &stdout, &stderr)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case code := <-done:
			if code != 0 {
				t.Errorf("synclane serve exited %d\n%s", code, stderr.String())
			}
		case <-time.After(15 * time.Second):
			t.Error("synclane serve did not stop within 15s")
		}
	})

	base := "http://" + addr
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get(base + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		select {
		case code := <-done:
			t.Fatalf("synclane serve exited %d before it was ready\n%s", code, stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("synclane serve not ready at %s: %v\n%s", base, err, stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}

	nctx, ncancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer ncancel()
	cmd := exec.CommandContext(nctx, node, "interop.mjs", base)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	t.Logf("node interop.mjs %s:\n%s", base, strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatalf("interop scenario failed: %v\nserver log:\n%s", err, stderr.String())
	}
}
