package sqlite

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/synclane/synclane/storage/storagetest"
)

// fakeClock is a settable clock for the maintenance lease.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func openLeaseStore(t *testing.T, path string, opts Options) *Store {
	t.Helper()
	s, err := Open(t.Context(), path, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.EnsureSchema(t.Context(), storagetest.MustParse(storagetest.SchemaV1)); err != nil {
		t.Fatal(err)
	}
	return s
}

// A lease left behind by a holder that stopped renewing (its process
// died: here its store closed without unlocking) blocks another process
// until the lease's expiry and no longer; the holder is reported meanwhile.
func TestMaintenanceLeaseLapsesAfterHolderDies(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "sync.db")
	clock := &fakeClock{t: time.UnixMilli(1_700_000_000_000)}
	opts := Options{MaintenanceLease: time.Minute, Now: clock.now}
	dead := openLeaseStore(t, path, opts)
	if _, ok, err := dead.TryLockMaintenance(ctx); err != nil || !ok {
		t.Fatalf("first lock: ok=%v err=%v", ok, err)
	}
	dead.Close() // dies holding it: no unlock, no more renewals

	next := openLeaseStore(t, path, opts)
	h, held, err := next.MaintenanceHolder(ctx)
	if err != nil || !held {
		t.Fatalf("MaintenanceHolder: held=%v err=%v, want the dead holder's lease", held, err)
	}
	if h.PID != os.Getpid() || !h.Since.Equal(clock.now()) || !h.Expires.Equal(clock.now().Add(time.Minute)) {
		t.Fatalf("holder %+v: want pid %d, since %v, expires a minute later", h, os.Getpid(), clock.now())
	}
	clock.add(59 * time.Second)
	if _, ok, err := next.TryLockMaintenance(ctx); err != nil || ok {
		t.Fatalf("lock before the lease lapsed: ok=%v err=%v, want refused", ok, err)
	}
	clock.add(2 * time.Second)
	unlock, ok, err := next.TryLockMaintenance(ctx)
	if err != nil || !ok {
		t.Fatalf("lock after the lease lapsed: ok=%v err=%v, want taken", ok, err)
	}
	unlock()
	if _, held, err := next.MaintenanceHolder(ctx); err != nil || held {
		t.Fatalf("after unlock: held=%v err=%v, want free", held, err)
	}
}

// A live holder renews its lease, so it outlasts the lease's length.
func TestMaintenanceLeaseRenewedWhileHeld(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "sync.db")
	opts := Options{MaintenanceLease: 300 * time.Millisecond}
	a := openLeaseStore(t, path, opts)
	b := openLeaseStore(t, path, opts)
	unlock, ok, err := a.TryLockMaintenance(ctx)
	if err != nil || !ok {
		t.Fatalf("lock: ok=%v err=%v", ok, err)
	}
	defer unlock()
	h0, _, err := b.MaintenanceHolder(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Poll until the clock has passed the first expiry: the lease must
	// still be held, with a later expiry.
	deadline := time.Now().Add(10 * time.Second)
	for !time.Now().After(h0.Expires.Add(100 * time.Millisecond)) {
		if time.Now().After(deadline) {
			t.Fatal("clock did not pass the lease's first expiry")
		}
		time.Sleep(20 * time.Millisecond) // waiting for the wall clock itself, not for another goroutine
	}
	h1, held, err := b.MaintenanceHolder(ctx)
	if err != nil || !held || !h1.Expires.After(h0.Expires) {
		t.Fatalf("after the first expiry: held=%v %+v err=%v, want renewed past %v", held, h1, err, h0.Expires)
	}
	if _, ok, err := b.TryLockMaintenance(ctx); err != nil || ok {
		t.Fatalf("second process while renewed: ok=%v err=%v, want refused", ok, err)
	}
}

// Helper process of TestMaintenanceLeaseAfterKill9: takes the lease on
// the database SYNCLANE_LEASE_HOLD names and blocks.
func TestMain(m *testing.M) {
	if path := os.Getenv("SYNCLANE_LEASE_HOLD"); path != "" {
		holdLease(path)
		return
	}
	os.Exit(m.Run())
}

func holdLease(path string) {
	ctx := context.Background()
	s, err := Open(ctx, path, Options{MaintenanceLease: time.Second})
	if err == nil {
		err = s.EnsureSchema(ctx, storagetest.MustParse(storagetest.SchemaV1))
	}
	if err != nil {
		os.Stdout.WriteString("error " + err.Error() + "\n")
		os.Exit(1)
	}
	if _, ok, err := s.TryLockMaintenance(ctx); err != nil || !ok {
		os.Stdout.WriteString("not held\n")
		os.Exit(1)
	}
	os.Stdout.WriteString("held\n")
	select {} // until killed
}

// A process killed with SIGKILL while holding the maintenance lease (as
// during a pass) blocks the next pass for at most one lease (1 s here;
// 60 s by default), not an hour.
func TestMaintenanceLeaseAfterKill9(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "sync.db")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "SYNCLANE_LEASE_HOLD="+path)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "held" {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("helper: %q %v", line, err)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	s := openLeaseStore(t, path, Options{})
	h, held, err := s.MaintenanceHolder(ctx)
	if err != nil || !held || h.PID != cmd.Process.Pid {
		t.Fatalf("after kill -9: held=%v %+v err=%v, want the killed process's lease (pid %d) left behind", held, h, err, cmd.Process.Pid)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		unlock, ok, err := s.TryLockMaintenance(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			unlock()
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the killed process's lease never lapsed")
		}
		time.Sleep(50 * time.Millisecond) // polling the condition
	}
	if took := time.Since(h.Expires); took > 20*time.Second {
		t.Fatalf("took %v past the lease's expiry", took)
	}
}
