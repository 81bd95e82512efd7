package storage_test

import (
	"errors"
	"regexp"
	"slices"
	"testing"

	"github.com/synclane/synclane/storage"
)

func TestNewLogEpoch(t *testing.T) {
	format := regexp.MustCompile(`^[0-9a-f]{32}$`)
	seen := map[string]bool{}
	for range 1000 {
		ep := storage.NewLogEpoch()
		if !format.MatchString(ep) {
			t.Fatalf("NewLogEpoch() = %q, want 32 lowercase hex characters", ep)
		}
		if ep[12] != '4' {
			t.Fatalf("NewLogEpoch() = %q, not a version 4 UUID", ep)
		}
		if seen[ep] {
			t.Fatalf("NewLogEpoch() repeated %q", ep)
		}
		seen[ep] = true
	}
}

func TestMatchScopes(t *testing.T) {
	stored := map[string]string{"project": "p1", "owner": "7"}
	for _, c := range []struct {
		eff  map[string][]string
		want bool
	}{
		{nil, true},
		{map[string][]string{"project": {"p2", "p1"}}, true},
		{map[string][]string{"project": {"p1"}, "owner": {"7"}}, true},
		{map[string][]string{"project": {"p1"}, "owner": {"8"}}, false},
		{map[string][]string{"project": {}}, false},
		{map[string][]string{"team": {"p1"}}, false},
	} {
		if got := storage.MatchScopes(stored, c.eff); got != c.want {
			t.Errorf("MatchScopes(%v, %v) = %v, want %v", stored, c.eff, got, c.want)
		}
	}
}

func TestCanonicalInts(t *testing.T) {
	got := storage.CanonicalInts([]string{"7", "-3", "007", "+1", " 1", "1.0", "", "x", "9223372036854775807", "9223372036854775808", "-0", "0"})
	want := []int64{7, -3, 9223372036854775807, 0}
	if !slices.Equal(got, want) {
		t.Fatalf("CanonicalInts = %v, want %v", got, want)
	}
	if got := storage.CanonicalInts([]string{"a"}); got == nil || len(got) != 0 {
		t.Fatalf("CanonicalInts of nothing canonical = %#v, want empty non-nil", got)
	}
}

func TestCheckIncomplete(t *testing.T) {
	pending := []storage.CheckpointRef{{Partition: "a", Name: "x"}, {Partition: "b", Name: "y"}}
	if err := storage.CheckIncomplete(pending, []storage.CheckpointDeclaration{
		{Partition: "b", Name: "y", SchemaVersion: 2}, {Partition: "a", Name: "x", SchemaVersion: 2},
	}); err != nil {
		t.Fatalf("all declared: %v", err)
	}
	if err := storage.CheckIncomplete(nil, nil); err != nil {
		t.Fatalf("nothing pending: %v", err)
	}
	err := storage.CheckIncomplete(pending, []storage.CheckpointDeclaration{{Partition: "a", Name: "y", SchemaVersion: 2}})
	if !errors.Is(err, storage.ErrCheckpointIncomplete) {
		t.Fatalf("undeclared: err = %v, want ErrCheckpointIncomplete", err)
	}
	if want := "undeclared checkpoints a/x, b/y: " + storage.ErrCheckpointIncomplete.Error(); err.Error() != want {
		t.Fatalf("undeclared: err = %q, want %q", err, want)
	}
}
