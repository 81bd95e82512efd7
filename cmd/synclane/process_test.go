package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/transport/httpsync"
)

// These tests run synclane as real OS processes (built once per test
// binary), because what they check — a kill -9, two processes on one
// database — cannot be simulated in one process.

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// TestMain removes the binary synclaneBinary built (its temporary
// directory) once the package's tests have run.
func TestMain(m *testing.M) {
	code := m.Run()
	if binPath != "" {
		_ = os.RemoveAll(filepath.Dir(binPath))
	}
	os.Exit(code)
}

func synclaneBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("process tests build the binary: skipped in -short mode (run without -short)")
	}
	binOnce.Do(func() {
		dir, err := os.MkdirTemp("", "synclane-bin-")
		if err != nil {
			binErr = err
			return
		}
		binPath = filepath.Join(dir, "synclane")
		out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			binErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// proc is one running `synclane serve` process.
type proc struct {
	base string
	// admin is the admin listener's URL (serve --admin-listen), or "".
	admin string
	cmd   *exec.Cmd
	done  chan error
}

// startProc starts `synclane serve --listen 127.0.0.1:0 args...` and reads
// its address from the first stdout line. The process is killed at cleanup
// if it still runs.
func startProc(t *testing.T, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(synclaneBinary(t), append([]string{"serve", "--listen", "127.0.0.1:0", "--log-level", "warn"}, args...)...)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, done: make(chan error, 1)}
	t.Cleanup(func() { p.kill(t) })
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		if sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		p.done <- cmd.Wait()
	}()
	select {
	case line := <-lines:
		var first struct {
			Listening string `json:"listening"`
			Admin     string `json:"admin"`
		}
		if err := json.Unmarshal([]byte(line), &first); err != nil || first.Listening == "" {
			t.Fatalf("first stdout line %q: %v", line, err)
		}
		p.base, p.admin = first.Listening, first.Admin
	case <-time.After(30 * time.Second):
		t.Fatal("synclane serve did not announce its address")
	}
	return p
}

// kill sends SIGKILL (kill -9) and waits for the process to end.
func (p *proc) kill(t *testing.T) {
	if p.cmd.ProcessState != nil {
		return
	}
	_ = p.cmd.Process.Kill()
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		t.Error("process did not end after SIGKILL")
	}
}

func devClient(base, actor, clientID string) *httpsync.Client {
	return &httpsync.Client{URL: base + "/sync", ClientID: clientID, Header: http.Header{"X-Actor": {actor}}}
}

// pullOnce subscribes clientID to list L and pulls once.
func pullOnce(c *httpsync.Client) error {
	_, err := c.Pull(context.Background(), ssp2.PullHeader{LimitCommits: 10, LimitSnapshotRows: 10, MaxSnapshotPages: 1, Accept: ssp2.AcceptInlineRows},
		&ssp2.Subscription{ID: "s", Table: "todos", Scopes: map[string][]string{"list_id": {"L"}}, Cursor: -1})
	return err
}

// After kill -9, a clientId's binding survives: another actor cannot take
// the clientId and lock its owner out.
func TestKill9KeepsClientBinding(t *testing.T) {
	dir := t.TempDir()
	p := startProc(t, "--data", dir)
	if err := pullOnce(devClient(p.base, "ada", "cx")); err != nil {
		t.Fatal(err)
	}
	p.kill(t) // no chance to write back anything buffered
	p = startProc(t, "--data", dir)
	err := pullOnce(devClient(p.base, "eve", "cx"))
	if syncerr.CodeOf(err) != syncerr.InvalidClientID {
		t.Fatalf("another actor taking the clientId after kill -9: %v, want sync.invalid_client_id", err)
	}
	if err := pullOnce(devClient(p.base, "ada", "cx")); err != nil {
		t.Fatalf("the owner after kill -9: %v", err)
	}
}

// Two processes on one PostgreSQL database: when two actors race for the
// same clientId through different processes, exactly one binding wins.
func TestTwoProcessesBindOneClientID(t *testing.T) {
	stores := sharedStores(t)
	pg, ok := stores["postgres"]
	if !ok {
		t.Skip("PostgreSQL not configured: set SYNCLANE_TEST_POSTGRES to a pgx URL of a database the tests may create schemas in (e.g. postgres://postgres@127.0.0.1:5432/test?sslmode=disable); SYNCLANE_REQUIRE_POSTGRES=1 makes this a failure")
	}
	a := startProc(t, pg...)
	b := startProc(t, pg...)
	const ids = 12
	for i := range ids {
		cid := fmt.Sprint("race-", i)
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for k, target := range []struct{ base, actor string }{{a.base, "ada"}, {b.base, "eve"}} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[k] = pullOnce(devClient(target.base, target.actor, cid))
			}()
		}
		wg.Wait()
		won := 0
		for _, err := range errs {
			switch {
			case err == nil:
				won++
			case syncerr.CodeOf(err) == syncerr.InvalidClientID:
			default:
				t.Fatalf("%s: unexpected error %v", cid, err)
			}
		}
		if won != 1 {
			t.Fatalf("%s: %d actors got the clientId (errors %v), want exactly 1", cid, won, errs)
		}
		// The loser stays locked out on both processes; the winner is served
		// on both.
		winner := "ada"
		if errs[0] != nil {
			winner = "eve"
		}
		for _, base := range []string{a.base, b.base} {
			if err := pullOnce(devClient(base, winner, cid)); err != nil {
				t.Fatalf("%s: winner %s on %s: %v", cid, winner, base, err)
			}
			loser := map[string]string{"ada": "eve", "eve": "ada"}[winner]
			if err := pullOnce(devClient(base, loser, cid)); syncerr.CodeOf(err) != syncerr.InvalidClientID {
				t.Fatalf("%s: loser %s on %s: %v", cid, loser, base, err)
			}
		}
	}
}
