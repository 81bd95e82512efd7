package engine_test

import (
	"slices"
	"testing"

	"github.com/synclane/synclane/engine"
)

// Hooks added side by side are all called, the earlier first; a nil field
// leaves the hook already set alone.
func TestAddCommitHooksChains(t *testing.T) {
	var got []string
	cfg := engine.Config{OnCommit: func(p string, _ int64) { got = append(got, "host "+p) }}
	cfg.AddCommitHooks(engine.CommitHooks{OnCommit: func(p string, _ int64) { got = append(got, "a "+p) }})
	cfg.AddCommitHooks(engine.CommitHooks{OnCommitOutcome: func(p string, _ bool) { got = append(got, "outcome "+p) }})
	cfg.AddCommitHooks(engine.CommitHooks{OnCommit: func(p string, _ int64) { got = append(got, "b "+p) }})
	cfg.OnCommit("p", 1)
	cfg.OnCommitOutcome("p", true)
	if cfg.OnCommitKeys != nil || cfg.OnRegistration != nil {
		t.Fatal("a hook nobody added was installed")
	}
	if want := []string{"host p", "a p", "b p", "outcome p"}; !slices.Equal(got, want) {
		t.Fatalf("calls %q, want %q", got, want)
	}
}
