// Package etcdtest runs a real single-node etcd for tests: on free loopback
// ports of its own choosing (never the default 2379/2380), with its data in
// the test's temporary directory, stopped when the test ends.
//
// The binary is SYNCLANE_ETCD_BIN, else /usr/bin/etcd, else etcd on PATH.
// When none is found the test is skipped, unless SYNCLANE_REQUIRE_ETCD=1,
// which makes it fail instead. The flags used are those of etcd 3.4 (and
// later): Debian's etcd-server 3.4 is what the project's machines have.
//
// The harness talks to etcd over plain HTTP (its /health endpoint) and links
// no etcd client.
package etcdtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// startTimeout bounds how long Start and Restart wait for etcd to answer
// its health check.
const startTimeout = 20 * time.Second

// Server is a running etcd for tests.
type Server struct {
	// Endpoint is its client URL, http://127.0.0.1:PORT: the value to put
	// in a client's endpoints.
	Endpoint string

	bin     string
	dir     string // the test's temp dir: data/ and etcd.log
	logPath string
	args    []string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited (nil when not running)
}

// Binary returns the etcd binary tests use: SYNCLANE_ETCD_BIN, else
// /usr/bin/etcd, else etcd on PATH; "" when there is none.
func Binary() string {
	if b := os.Getenv("SYNCLANE_ETCD_BIN"); b != "" {
		return b
	}
	if _, err := os.Stat("/usr/bin/etcd"); err == nil {
		return "/usr/bin/etcd"
	}
	if b, err := exec.LookPath("etcd"); err == nil {
		return b
	}
	return ""
}

// Start starts an etcd on free loopback client and peer ports with its data
// in t.TempDir(), and returns once it answers its health check (it has a
// leader and serves requests). It is stopped (killed, and waited for) at
// t.Cleanup, and the tail of its log is shown if t failed. Without an etcd
// binary t is skipped (failed when SYNCLANE_REQUIRE_ETCD=1).
//
// etcd runs with short raft timings (heartbeat 50ms, election 250ms, so
// leases as short as 1s are granted) and --unsafe-no-fsync: fast, and durable
// across Stop (SIGKILL) since the kernel keeps what was written, not across
// a machine crash.
func Start(t testing.TB) *Server {
	t.Helper()
	bin := Binary()
	if bin == "" {
		msg := "etcdtest: no etcd binary: set SYNCLANE_ETCD_BIN to one, apt-get install etcd-server (/usr/bin/etcd), or put etcd on PATH; SYNCLANE_REQUIRE_ETCD=1 makes this a failure"
		if os.Getenv("SYNCLANE_REQUIRE_ETCD") == "1" {
			t.Fatal(msg + " (it is set)")
		}
		t.Skip(msg)
	}
	dir := t.TempDir()
	s := &Server{bin: bin, dir: dir, logPath: filepath.Join(dir, "etcd.log")}
	t.Cleanup(func() {
		s.Stop()
		if t.Failed() {
			t.Logf("etcdtest: tail of %s:\n%s", s.logPath, tail(s.logPath, 40))
		}
	})
	// The ports are free when chosen but can be taken before etcd binds
	// them (other tests run beside this one): try a few pairs.
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		var client, peer int
		if client, peer, err = freePorts(); err != nil {
			break
		}
		s.Endpoint = "http://127.0.0.1:" + strconv.Itoa(client)
		peerURL := "http://127.0.0.1:" + strconv.Itoa(peer)
		s.args = []string{
			"--name", "etcdtest",
			"--data-dir", filepath.Join(dir, "data"),
			"--listen-client-urls", s.Endpoint,
			"--advertise-client-urls", s.Endpoint,
			"--listen-peer-urls", peerURL,
			"--initial-advertise-peer-urls", peerURL,
			"--initial-cluster", "etcdtest=" + peerURL,
			"--initial-cluster-token", "etcdtest",
			"--initial-cluster-state", "new",
			"--heartbeat-interval", "50",
			"--election-timeout", "250",
			"--unsafe-no-fsync",
			"--logger", "zap",
			"--log-outputs", s.logPath,
		}
		if err = s.start(); err == nil {
			return s
		}
		s.Stop()
		_ = os.RemoveAll(filepath.Join(dir, "data"))
	}
	t.Fatalf("etcdtest: start: %v", err)
	return nil
}

// Stop stops etcd now (SIGKILL, and waits for it to exit), keeping its data
// directory for Restart. Stopping a stopped server does nothing.
func (s *Server) Stop() {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.cmd, s.done = nil, nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-done
}

// Restart starts etcd again on the same ports and data directory (stopping
// it first if it runs) and returns once it answers its health check; it
// fails t if etcd does not come up.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.Stop()
	if err := s.start(); err != nil {
		s.Stop()
		t.Fatalf("etcdtest: restart: %v", err)
	}
}

// RestartEmpty starts etcd again on the same ports with an empty data
// directory (stopping it first if it runs): a new etcd cluster, with none
// of the keys, leases or revisions of the previous one, as when etcd is
// restored or wiped under its clients. It fails t if etcd does not come up.
func (s *Server) RestartEmpty(t testing.TB) {
	t.Helper()
	s.Stop()
	if err := os.RemoveAll(filepath.Join(s.dir, "data")); err != nil {
		t.Fatalf("etcdtest: remove the data: %v", err)
	}
	if err := s.start(); err != nil {
		s.Stop()
		t.Fatalf("etcdtest: restart empty: %v", err)
	}
}

// start runs the binary with s.args and waits until it is healthy, it
// exits, or startTimeout passes.
func (s *Server) start() error {
	out, err := os.OpenFile(filepath.Join(s.dir, "etcd.out"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(s.bin, s.args...)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		_ = out.Close()
		return fmt.Errorf("%s: %w", s.bin, err)
	}
	done := make(chan struct{})
	go func() { // owned by the Server: ends when the process exits (Stop kills it)
		_ = cmd.Wait()
		_ = out.Close()
		close(done)
	}()
	s.mu.Lock()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	var last error
	for {
		if last = s.healthy(ctx); last == nil {
			return nil
		}
		select {
		case <-done:
			return fmt.Errorf("etcd exited during start (%s): %s", cmd.ProcessState, tail(s.logPath, 10)+tail(filepath.Join(s.dir, "etcd.out"), 10))
		case <-ctx.Done():
			return fmt.Errorf("etcd not healthy within %v: %w", startTimeout, last)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// healthy asks etcd's /health endpoint once.
func (s *Server) healthy(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.Endpoint+"/health", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	var body struct {
		Health string `json:"health"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return fmt.Errorf("/health: %s: %w", resp.Status, err)
	}
	if resp.StatusCode != http.StatusOK || body.Health != "true" {
		return fmt.Errorf("/health: %s, health %q", resp.Status, body.Health)
	}
	return nil
}

// freePorts returns two distinct loopback ports that were free a moment ago.
func freePorts() (int, int, error) {
	var ports [2]int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, 0, err
		}
		ls = append(ls, l)
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	return ports[0], ports[1], nil
}

// tail returns the last n lines of the file at path (or why it cannot).
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return ""
		}
		return err.Error()
	}
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.TrimSpace(string(bytes.Join(lines, []byte("\n")))) + "\n"
}
