//go:build unix

package main

import (
	"errors"
	"net"
	"net/http"
	"syscall"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// raiseFDLimit raises the soft limit to what is needed (never lowers it),
// the hard limit too when the process may, and says what it did; serve
// logs it once at start. (The test changes this process's limit and puts
// it back.)
func TestRaiseFDLimit(t *testing.T) {
	var orig syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &orig); err != nil {
		t.Fatal(err)
	}
	if orig.Cur < 512 {
		t.Skipf("soft open-file limit %d is too low to lower for the test (by design: no variable enables it; raise ulimit -n)", orig.Cur)
	}
	t.Cleanup(func() { _ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &orig) })
	low := uint64(orig.Cur) - 256
	for _, tc := range []struct {
		name     string
		need     uint64
		soft     uint64 // want after (0: checked below)
		raised   bool
		overHard bool
	}{
		{"need below the soft limit", low - 10, low, false, false},
		{"need between soft and hard", low + 100, low + 100, true, false},
		{"need above the hard limit", uint64(orig.Max) + 1000, 0, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: low, Max: orig.Max}); err != nil {
				t.Fatal(err)
			}
			r := raiseFDLimit(tc.need)
			if r.SoftBefore != low || r.HardBefore != uint64(orig.Max) || r.Need != tc.need {
				t.Fatalf("before: %+v", r)
			}
			if got := r.SoftAfter > r.SoftBefore; got != tc.raised {
				t.Fatalf("raised %v, want %v: %+v", got, tc.raised, r)
			}
			if r.SoftAfter != fdLimit() {
				t.Fatalf("soft after %d, the process has %d", r.SoftAfter, fdLimit())
			}
			switch {
			case !tc.overHard:
				if r.SoftAfter != tc.soft || r.HardAfter != uint64(orig.Max) || r.Err != nil {
					t.Fatalf("after: %+v, want soft %d and the hard limit unchanged", r, tc.soft)
				}
			case r.Err == nil: // privileged: the hard limit was raised too
				if want := min(tc.need, nrOpenOr(tc.need)); r.SoftAfter != want || r.HardAfter != want {
					t.Fatalf("after: %+v, want soft and hard %d", r, want)
				}
			default: // unprivileged: as far as the hard limit
				if !errors.Is(r.Err, syscall.EPERM) || r.SoftAfter != uint64(orig.Max) || r.HardAfter != uint64(orig.Max) {
					t.Fatalf("after: %+v, want EPERM and soft = hard = %d", r, orig.Max)
				}
			}
		})
	}
	_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &orig)

	// serve: validate raises, wrap logs it once with the before and after.
	c, given := parseServe(t, nil, "--max-websockets", "1")
	if err := c.validate(given); err != nil {
		t.Fatal(err)
	}
	if c.conn.fdRaise == nil || c.conn.fdRaise.Need != fdNeed(0) {
		t.Fatalf("validate's raise: %+v", c.conn.fdRaise)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	core, logs := observer.New(zap.InfoLevel)
	c.conn.wrap(ln, &http.Server{}, c.maxWebsockets, zap.New(core))
	lines := logs.FilterMessage("open-file limit").All()
	if len(lines) != 1 {
		t.Fatalf("open-file limit logged %d times", len(lines))
	}
	m := lines[0].ContextMap()
	for _, k := range []string{"fd_soft_before", "fd_hard_before", "fd_soft_after", "fd_hard_after", "fd_needed", "fd_raised"} {
		if _, ok := m[k]; !ok {
			t.Errorf("field %s missing: %v", k, m)
		}
	}
	if m["fd_soft_after"] != fdLimit() || m["fd_needed"] != fdNeed(0) {
		t.Fatalf("logged %v; the process has %d", m, fdLimit())
	}
}

// nrOpenOr is fs.nr_open, or def where unknown.
func nrOpenOr(def uint64) uint64 {
	if n := nrOpen(); n > 0 {
		return n
	}
	return def
}
