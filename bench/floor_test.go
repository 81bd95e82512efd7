package main

import (
	"strings"
	"testing"
)

// TestFloorQuick: the floor workload measures every call kind the floor
// table uses, each with a positive wall time per call and a CPU time
// that is not negative (the two-thread cases subtract nothing they did
// not count).
func TestFloorQuick(t *testing.T) {
	cfg := &Config{Quick: true, DataDir: t.TempDir()}
	rs, err := runFloor(t.Context(), cfg, "")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"tcp write 512 B", "tcp read 512 B", "tcp write 65536 B", "tcp write 1048576 B",
		"sendfile 1048576 B", "epoll_wait", "pingpong", "futex", "pwrite 4096 B + fdatasync", "pwrite 4096 B", "memcpy 4096 B"}
	for _, w := range want {
		found := false
		for _, r := range rs {
			if !strings.HasPrefix(r.Case, w) {
				continue
			}
			found = true
			if cpu, wall := r.metric("CPU/call"), r.metric("wall/call"); cpu < 0 || wall <= 0 {
				t.Errorf("%s: CPU/call %v µs, wall/call %v µs", r.Case, cpu, wall)
			}
		}
		if !found {
			t.Errorf("no case %q in %d results", w, len(rs))
		}
	}
}
