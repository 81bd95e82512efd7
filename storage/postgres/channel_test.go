package postgres

import (
	"strings"
	"testing"
)

func TestNotifyChannelFor(t *testing.T) {
	long := strings.Repeat("s", 60)
	cases := []struct {
		schema, want string
	}{
		{"", DefaultNotifyChannel},
		{"tenant_a", DefaultNotifyChannel + "_tenant_a"},
		{strings.Repeat("s", 46), DefaultNotifyChannel + "_" + strings.Repeat("s", 46)}, // 63 bytes: kept
	}
	for _, c := range cases {
		if got := NotifyChannelFor(c.schema); got != c.want {
			t.Errorf("NotifyChannelFor(%q) = %q, want %q", c.schema, got, c.want)
		}
	}
	// Longer names hash to a fixed-length identifier under PostgreSQL's
	// 63-byte limit, distinct per schema.
	a, b := NotifyChannelFor(long), NotifyChannelFor(long+"x")
	if len(a) > 63 || len(b) > 63 || a == b || strings.Contains(a, long) {
		t.Fatalf("long schema channels %q, %q: want distinct hashed names of at most 63 bytes", a, b)
	}
	if NotifyChannelFor("a") == NotifyChannelFor("b") {
		t.Fatal("two schemas share a channel")
	}
}
