package datadir

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// holdEnv makes the test binary a lock holder: it takes the lock of the
// directory the variable names, prints "locked", and holds it until its
// stdin closes.
const holdEnv = "DATADIR_TEST_HOLD"

func TestMain(m *testing.M) {
	if dir := os.Getenv(holdEnv); dir != "" {
		l, err := Acquire(dir, "synclane serve")
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(3)
		}
		fmt.Println("locked")
		_, _ = bufio.NewReader(os.Stdin).ReadString('\n') // until EOF
		_ = l.Release()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// child is a holder process.
type child struct {
	cmd   *exec.Cmd
	stdin interface{ Close() error }
}

func startHolder(t *testing.T, dir string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), holdEnv+"="+dir)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd, stdin: in}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "locked" {
		t.Fatalf("holder process: %q %v", line, err)
	}
	return c
}

func TestAcquire(t *testing.T) {
	cases := []struct {
		name string
		// hold sets the directory up and returns the pid expected to hold
		// it (0: free).
		hold func(t *testing.T, dir string) int
	}{
		{"free, no directory yet", func(t *testing.T, dir string) int { return 0 }},
		{"free, lock file of a released holder", func(t *testing.T, dir string) int {
			l, err := Acquire(dir, "synclane prune")
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Release(); err != nil {
				t.Fatal(err)
			}
			return 0
		}},
		{"held by this process (another open file description)", func(t *testing.T, dir string) int {
			l, err := Acquire(dir, "synclane serve")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = l.Release() })
			return os.Getpid()
		}},
		{"held by another process", func(t *testing.T, dir string) int {
			return startHolder(t, dir).cmd.Process.Pid
		}},
		{"free after the holder process was killed (kill -9)", func(t *testing.T, dir string) int {
			c := startHolder(t, dir)
			if err := c.cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			_ = c.cmd.Wait()
			return 0
		}},
		{"free after the holder process exited", func(t *testing.T, dir string) int {
			c := startHolder(t, dir)
			c.stdin.Close()
			if err := c.cmd.Wait(); err != nil {
				t.Fatal(err)
			}
			return 0
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "data")
			holder := tc.hold(t, dir)

			info, held, err := Holder(dir)
			if err != nil || held != (holder != 0) || info.PID != holder {
				t.Fatalf("Holder: %+v held=%v %v; want pid %d", info, held, err, holder)
			}
			before, _ := os.ReadFile(filepath.Join(dir, FileName))

			l, err := Acquire(dir, "synclane restore")
			if holder != 0 {
				var he *HeldError
				if !errors.As(err, &he) || he.Holder.PID != holder || he.Dir != dir {
					t.Fatalf("Acquire of a held directory: %v, want a *HeldError naming pid %d", err, holder)
				}
				want := fmt.Sprintf("data directory %s is in use by `synclane serve` (pid %d, since ", dir, holder)
				if !strings.HasPrefix(err.Error(), want) {
					t.Fatalf("message %q, want prefix %q", err, want)
				}
				if after, _ := os.ReadFile(filepath.Join(dir, FileName)); string(after) != string(before) {
					t.Fatalf("a refused Acquire changed the holder's record: %q → %q", before, after)
				}
				return
			}
			if err != nil {
				t.Fatalf("Acquire of a free directory: %v", err)
			}
			defer l.Release()
			fi, err := os.Stat(l.Path())
			if err != nil || fi.Mode().Perm() != 0o600 {
				t.Fatalf("lock file: %v %v, want mode 0600", fi, err)
			}
			b, _ := os.ReadFile(l.Path())
			var rec Info
			if err := json.Unmarshal(b, &rec); err != nil || rec.PID != os.Getpid() || rec.Command != "synclane restore" || time.Since(rec.StartedAt) > time.Minute {
				t.Fatalf("record %q: %+v %v", b, rec, err)
			}
			if info, held, err := Holder(dir); err != nil || !held || info != rec {
				t.Fatalf("Holder while held: %+v %v %v, want %+v", info, held, err, rec)
			}
			if err := l.Release(); err != nil {
				t.Fatal(err)
			}
			if err := l.Release(); err != nil {
				t.Fatalf("second Release: %v", err)
			}
			if _, held, err := Holder(dir); err != nil || held {
				t.Fatalf("Holder after Release: held=%v %v", held, err)
			}
		})
	}
}

// A holder that has not written its record yet is still a holder.
func TestHeldWithoutRecord(t *testing.T) {
	dir := t.TempDir()
	f, err := os.OpenFile(filepath.Join(dir, FileName), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if ok, err := tryLock(f); !ok || err != nil {
		t.Fatalf("tryLock: %v %v", ok, err)
	}
	_, err = Acquire(dir, "synclane serve")
	var he *HeldError
	if !errors.As(err, &he) || !strings.Contains(err.Error(), "in use by another process") {
		t.Fatalf("Acquire: %v, want a *HeldError", err)
	}
	if _, held, err := Holder(dir); !held || err != nil {
		t.Fatalf("Holder: %v %v", held, err)
	}
}
