package engine_test

import (
	"sync/atomic"
	"testing"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage/memory"
)

// recordingExtension installs an OnCommit hook and records the engine it
// is started with.
type recordingExtension struct {
	commits    atomic.Int64
	configured bool
	started    *engine.Engine
}

func (x *recordingExtension) Configure(cfg *engine.Config) {
	x.configured = true
	prev := cfg.OnCommit
	cfg.OnCommit = func(p string, seq int64) {
		if prev != nil {
			prev(p, seq)
		}
		x.commits.Add(1)
	}
}

func (x *recordingExtension) Start(e *engine.Engine) { x.started = e }

// An extension listed in Config.Extensions has its hooks installed before
// the engine is built (a commit reaches them, next to a hook the host set
// itself) and is started with the engine New returns.
func TestExtensionsAreWiredByNew(t *testing.T) {
	x := &recordingExtension{}
	var own atomic.Int64
	f := newFixture(t, memory.New(), func(c *engine.Config) {
		c.OnCommit = func(string, int64) { own.Add(1) }
		c.Extensions = []engine.Extension{x}
	})
	if !x.configured || x.started != f.eng {
		t.Fatalf("configured %v, started with %p; want configured and started with the engine %p", x.configured, x.started, f.eng)
	}
	c := f.client("u1", "c1")
	if pr := c.push("k1", upsert("tasks", "t1", f.row("t1", "P", "one"), nil)); pr.Status != ssp2.CommitApplied {
		t.Fatalf("push: %+v", pr)
	}
	if x.commits.Load() != 1 || own.Load() != 1 {
		t.Fatalf("commits seen: extension %d, host hook %d; want 1 and 1", x.commits.Load(), own.Load())
	}
}
