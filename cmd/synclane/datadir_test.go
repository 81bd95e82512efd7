package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/synclane/synclane/storage/blobstore"
	"github.com/synclane/synclane/storage/datadir"
)

// synclaneRun runs the synclane binary with args to its end (at most 30 s)
// and returns its exit code and combined output.
func synclaneRun(t *testing.T, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, synclaneBinary(t), args...).CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("synclane %v still ran after 30s\n%s", args, out)
	}
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode(), string(out)
		}
		t.Fatalf("synclane %v: %v", args, err)
	}
	return 0, string(out)
}

// holderOf is the pid datadir.Holder reports for dir (0: free).
func holderOf(t *testing.T, dir string) int {
	t.Helper()
	info, held, err := datadir.Holder(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !held {
		return 0
	}
	return info.PID
}

// A second `synclane serve` on the same --data refuses at once, names the
// first one's pid, and touches nothing (the first server's blob uploads
// in progress, <data>/blobs/.tmp, stay); the first keeps serving.
func TestSecondServeOnOneDataDirectoryRefuses(t *testing.T) {
	dir := t.TempDir()
	a := startProc(t, "--data", dir)
	pid := a.cmd.Process.Pid
	if got := holderOf(t, dir); got != pid {
		t.Fatalf("holder of %s: pid %d, want the server's %d", dir, got, pid)
	}
	inFlight := filepath.Join(dir, "blobs", ".tmp", "put-in-flight")
	if err := os.WriteFile(inFlight, []byte("half an upload"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out := synclaneRun(t, "serve", "--data", dir, "--listen", "127.0.0.1:0", "--log-level", "warn")
	want := fmt.Sprintf("data directory %s is in use by `synclane serve` (pid %d, since ", dir, pid)
	if code != 1 || !strings.Contains(out, want) {
		t.Fatalf("second serve: exit %d, want 1 with %q\n%s", code, want, out)
	}
	if _, err := os.Stat(inFlight); err != nil {
		t.Fatalf("the refused serve swept the first server's uploads: %v", err)
	}
	if err := pullOnce(devClient(a.base, "ada", "c1")); err != nil {
		t.Fatalf("the first server after the refused start: %v", err)
	}
	if got := holderOf(t, dir); got != pid {
		t.Fatalf("holder after the refused start: pid %d, want %d", got, pid)
	}
}

// kill -9 of a server releases its data directory: a new server starts
// on it at once.
func TestKill9ReleasesTheDataDirectory(t *testing.T) {
	dir := t.TempDir()
	a := startProc(t, "--data", dir)
	a.kill(t)
	if got := holderOf(t, dir); got != 0 {
		t.Fatalf("after kill -9 the directory is held by pid %d", got)
	}
	b := startProc(t, "--data", dir)
	if got := holderOf(t, dir); got != b.cmd.Process.Pid {
		t.Fatalf("holder after the restart: pid %d, want %d", got, b.cmd.Process.Pid)
	}
	if err := pullOnce(devClient(b.base, "ada", "c1")); err != nil {
		t.Fatal(err)
	}
}

// `synclane restore --from` refuses while a server holds the directory
// and leaves the database as it was: same file, nothing moved aside.
func TestRestoreRefusesWhileServing(t *testing.T) {
	dir := t.TempDir()
	a := startProc(t, "--data", dir)
	if err := pullOnce(devClient(a.base, "ada", "c1")); err != nil {
		t.Fatal(err)
	}
	backup := filepath.Join(t.TempDir(), "backup") // a backup is a directory
	if code, out := synclaneRun(t, "backup", "--data", dir, "--to", backup); code != 0 {
		t.Fatalf("backup of the running server: exit %d\n%s", code, out)
	}
	db := filepath.Join(dir, "synclane.db")
	before, err := os.Stat(db)
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"--from", backup}, {"--rotate-epochs"}} {
		code, out := synclaneRun(t, append([]string{"restore", "--data", dir}, args...)...)
		want := fmt.Sprintf("is in use by `synclane serve` (pid %d", a.cmd.Process.Pid)
		if code != 1 || !strings.Contains(out, want) || strings.Contains(out, "installed") || strings.Contains(out, "rotated") {
			t.Fatalf("restore %v while serving: exit %d, want 1 with %q\n%s", args, code, want, out)
		}
	}
	after, err := os.Stat(db)
	if err != nil || !os.SameFile(before, after) {
		t.Fatalf("the database file after the refused restore: %v (same file: %v)", err, err == nil && os.SameFile(before, after))
	}
	left, _ := filepath.Glob(filepath.Join(dir, "synclane.db.*"))
	if len(left) != 0 {
		t.Fatalf("the refused restore left %v", left)
	}
	if err := pullOnce(devClient(a.base, "ada", "c1")); err != nil {
		t.Fatalf("the server after the refused restore: %v", err)
	}
}

// `synclane prune` next to a server that is uploading 3 large blobs
// fails none of them: it opens no filesystem blob store (whose open
// sweeps <data>/blobs/.tmp) and says that it skipped the blob sweep.
func TestPruneNextToUploadingServer(t *testing.T) {
	dir := t.TempDir()
	a := startProc(t, "--data", dir)
	const n, size = 3, 8 << 20
	type upload struct {
		data []byte
		w    *io.PipeWriter
		done chan error
	}
	ups := make([]*upload, n)
	for i := range ups {
		data := make([]byte, size)
		if _, err := rand.Read(data); err != nil {
			t.Fatal(err)
		}
		r, w := io.Pipe()
		u := &upload{data: data, w: w, done: make(chan error, 1)}
		ups[i] = u
		c := devClient(a.base, "ada", fmt.Sprint("up-", i))
		go func() {
			u.done <- c.UploadBlob(context.Background(), blobstore.IDOf(data), "application/octet-stream", r, size)
		}()
		go func() { _, _ = w.Write(data[:size/2]) }() // half now; the rest after prune
	}
	tmp := filepath.Join(dir, "blobs", ".tmp")
	deadline := time.Now().Add(20 * time.Second)
	for {
		ents, _ := os.ReadDir(tmp)
		if len(ents) == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d uploads in %s, want %d in flight", len(ents), tmp, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	code, out := synclaneRun(t, "prune", "--data", dir)
	want := fmt.Sprintf("blob sweep skipped: the server (pid %d) sweeps blobs itself", a.cmd.Process.Pid)
	if code != 0 || !strings.Contains(out, want) {
		t.Fatalf("prune next to the server: exit %d, want 0 with %q\n%s", code, want, out)
	}
	if ents, _ := os.ReadDir(tmp); len(ents) != n {
		t.Fatalf("after prune %d uploads in %s, want %d", len(ents), tmp, n)
	}
	for i, u := range ups {
		go func() { _, _ = u.w.Write(u.data[size/2:]); _ = u.w.Close() }()
		select {
		case err := <-u.done:
			if err != nil {
				t.Fatalf("upload %d: %v", i, err)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("upload %d did not finish", i)
		}
		h := strings.TrimPrefix(blobstore.IDOf(u.data), "sha256:")
		got, err := os.ReadFile(filepath.Join(dir, "blobs", h[:2], h)) // the filesystem store's layout
		if err != nil {
			t.Fatalf("upload %d: %v", i, err)
		}
		if !bytes.Equal(got, u.data) {
			t.Fatalf("upload %d: stored %d bytes, want its %d", i, len(got), len(u.data))
		}
	}
	// Offline, prune holds the directory itself and sweeps blobs.
	a.kill(t)
	code, out = synclaneRun(t, "prune", "--data", dir)
	if code != 0 || strings.Contains(out, "blob sweep skipped") || !strings.Contains(out, "swept 0 orphan blobs") {
		t.Fatalf("offline prune: exit %d\n%s", code, out)
	}
}

// What prune and restore do while each kind of holder has the data
// directory: only a server lets prune go on (without the blob sweep);
// restore goes on only when the directory is free.
func TestMaintenanceCommandsAgainstEachHolder(t *testing.T) {
	cases := []struct {
		holder string // "" for none
		cmd    []string
		code   int
		want   string
	}{
		{"", []string{"prune"}, 0, "swept 0 orphan blobs"},
		{"synclane serve", []string{"prune"}, 0, fmt.Sprintf("blob sweep skipped: the server (pid %d) sweeps blobs itself", os.Getpid())},
		{"synclane serve", []string{"prune", "--blob-store", "off"}, 0, "swept 0 orphan blobs"},
		{"synclane restore", []string{"prune"}, 1, "is in use by `synclane restore`"},
		{"synclane prune", []string{"prune"}, 1, "is in use by `synclane prune`"},
		{"", []string{"restore", "--rotate-epochs"}, 0, "rotated the log epoch"},
		{"synclane serve", []string{"restore", "--rotate-epochs"}, 1, "is in use by `synclane serve`"},
		{"synclane prune", []string{"restore", "--rotate-epochs"}, 1, "is in use by `synclane prune`"},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%v held by %q", tc.cmd, tc.holder), func(t *testing.T) {
			dir := t.TempDir()
			if code, out, errOut := runCmd(t, "prune", "--data", dir); code != 0 { // creates the database
				t.Fatalf("setup prune: exit %d\n%s%s", code, out, errOut)
			}
			if tc.holder != "" {
				l, err := datadir.Acquire(dir, tc.holder)
				if err != nil {
					t.Fatal(err)
				}
				defer l.Release()
			}
			code, out, errOut := runCmd(t, append(tc.cmd, "--data", dir)...)
			if code != tc.code || !strings.Contains(out+errOut, tc.want) {
				t.Fatalf("exit %d, want %d with %q\n%s%s", code, tc.code, tc.want, out, errOut)
			}
		})
	}
}
