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

// noEnv is an empty environment.
func noEnv(string) (string, bool) { return "", false }

// envOf is an environment holding exactly env.
func envOf(env map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := env[k]; return v, ok }
}

// serveProc is an in-process `synclane serve`.
type serveProc struct {
	base   string
	cancel context.CancelFunc // SIGTERM
	done   chan int
	stderr *lockedBuffer
}

// wait returns the exit code once serve has stopped (-1 after 15s).
func (p *serveProc) wait(t *testing.T) int {
	t.Helper()
	select {
	case code := <-p.done:
		if code != 0 {
			t.Logf("server log:\n%s", p.stderr.String())
		}
		return code
	case <-time.After(15 * time.Second):
		t.Error("synclane serve did not stop within 15s")
		return -1
	}
}

// startServeProc runs `synclane serve` with env on a free loopback port and
// waits for /healthz. The drain delay is 0 unless flags set one.
func startServeProc(t *testing.T, env map[string]string, flags ...string) *serveProc {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()

	ctx, cancel := context.WithCancel(context.Background())
	var stdout lockedBuffer
	p := &serveProc{base: "http://" + addr, cancel: cancel, done: make(chan int, 1), stderr: &lockedBuffer{}}
	args := append([]string{"serve", "--listen", addr, "--log-level", "warn", "--drain-delay", "0"}, flags...)
	go func() { p.done <- run(ctx, args, envOf(env), &stdout, p.stderr) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get(p.base + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		select {
		case c := <-p.done:
			cancel()
			t.Fatalf("synclane serve exited %d before it was ready\n%s", c, p.stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("synclane serve not ready at %s: %v\n%s", p.base, err, p.stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.Contains(stdout.String(), addr) {
		cancel()
		t.Fatalf("serve did not announce its address: %q", stdout.String())
	}
	return p
}

// startServeStoppable is startServe whose stop the caller controls; stop
// returns the exit code.
func startServeStoppable(t *testing.T, flags ...string) (string, func() int) {
	t.Helper()
	p := startServeProc(t, nil, flags...)
	stopped, code := false, 0
	return p.base, func() int {
		if !stopped {
			stopped = true
			p.cancel()
			code = p.wait(t)
		}
		return code
	}
}

// runCmd runs a synclane subcommand in-process and returns its exit code
// and output.
func runCmd(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr lockedBuffer
	code := run(context.Background(), args, noEnv, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// runCmdEnv is runCmd with an environment, for commands expected to stop
// by themselves: a server that starts instead is stopped (SIGTERM) after
// 10s and the test fails.
func runCmdEnv(t *testing.T, env map[string]string, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr lockedBuffer
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	code := run(ctx, args, envOf(env), &stdout, &stderr)
	if ctx.Err() != nil {
		t.Errorf("%v kept running until stopped after 10s (exit %d)", args, code)
	}
	return code, stdout.String(), stderr.String()
}
