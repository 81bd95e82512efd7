package main

import (
	"context"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// startServe runs `synclane serve` in-process on a free loopback port with
// extra flags, waits for /healthz, and stops it (SIGTERM-like context
// cancel, expecting exit 0) when the test ends. It returns the base URL.
func startServe(t *testing.T, flags ...string) string {
	t.Helper()
	base, stop := startServeStoppable(t, flags...)
	t.Cleanup(func() {
		if code := stop(); code != 0 {
			t.Errorf("synclane serve exited %d", code)
		}
	})
	return base
}

// startServeStoppable is startServe whose stop the caller controls; stop
// returns the exit code.
func startServeStoppable(t *testing.T, flags ...string) (string, func() int) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()

	ctx, cancel := context.WithCancel(context.Background())
	var stdout, stderr lockedBuffer
	done := make(chan int, 1)
	args := append([]string{"serve", "--listen", addr, "--log-level", "warn"}, flags...)
	go func() { done <- run(ctx, args, func(string) string { return "" }, &stdout, &stderr) }()
	stopped := false
	code := 0
	stop := func() int {
		if stopped {
			return code
		}
		stopped = true
		cancel()
		select {
		case code = <-done:
		case <-time.After(15 * time.Second):
			t.Error("synclane serve did not stop within 15s")
			code = -1
		}
		if code != 0 {
			t.Logf("server log:\n%s", stderr.String())
		}
		return code
	}
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
		case c := <-done:
			t.Fatalf("synclane serve exited %d before it was ready\n%s", c, stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("synclane serve not ready at %s: %v\n%s", base, err, stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.Contains(stdout.String(), addr) {
		t.Fatalf("serve did not announce its address: %q", stdout.String())
	}
	return base, stop
}

// runCmd runs a synclane subcommand in-process and returns its exit code
// and output.
func runCmd(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr lockedBuffer
	code := run(context.Background(), args, func(string) string { return "" }, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}
