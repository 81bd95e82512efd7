package storagetest

import (
	"context"

	"github.com/synclane/synclane/storage"
)

// claimPartition claims partition for owner on b and checks the generation.
func (e *env) claimPartition(b storage.Backend, partition, owner string, want int64) {
	e.t.Helper()
	got, err := b.Ownership.ClaimPartition(e.ctx, partition, owner, 1000)
	if err != nil || got != want {
		e.t.Fatalf("ClaimPartition(%q, %q) = %d, %v; want %d", partition, owner, got, err, want)
	}
}

// wantOwner checks PartitionOwner on b.
func (e *env) wantOwner(b storage.Backend, partition, owner string, gen int64) {
	e.t.Helper()
	o, g, err := b.Ownership.PartitionOwner(e.ctx, partition)
	if err != nil || o != owner || g != gen {
		e.t.Fatalf("PartitionOwner(%q) = %q, %d, %v; want %q, %d", partition, o, g, err, owner, gen)
	}
}

// fencedPush appends one commit on b under ctx and returns the
// BeginPush or Commit error.
func (e *env) fencedPush(ctx context.Context, b storage.Backend, partition string) error {
	e.t.Helper()
	tx, err := b.Log.BeginPush(ctx, partition)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	e.appendNext(tx)
	return tx.Commit(ctx)
}

var ownershipTests = []test{
	{name: "ClaimGenerations", fn: func(e *env) {
		e.wantOwner(e.b, "p", "", 0)
		e.claimPartition(e.b, "p", "member-a", 1)
		p := e.readPartition("p")
		if !p.Exists || p.LogEpoch == "" || p.MaxCommitSeq != 0 {
			e.t.Fatalf("partition after its first claim = %+v, want created with a fresh epoch", p)
		}
		e.wantOwner(e.b, "p", "member-a", 1)
		e.claimPartition(e.b, "p", "member-b", 2)
		e.claimPartition(e.b, "p", "member-a", 3)
		e.wantOwner(e.b, "p", "member-a", 3)
		if again := e.touch("p"); again.LogEpoch != p.LogEpoch {
			e.t.Fatalf("claims changed the log epoch: %q, then %q", p.LogEpoch, again.LogEpoch)
		}
		e.wantOwner(e.b, "q", "", 0) // per partition
		e.touch("q")
		e.wantOwner(e.b, "q", "", 0) // touched, never claimed
		e.claimPartition(e.b, "q", "member-b", 1)
		e.wantOwner(e.b, "p", "member-a", 3)
	}},
	{name: "ClaimRefusesUnstorable", fn: func(e *env) {
		for _, c := range []struct{ partition, owner string }{{"p", ""}, {"p", "a\x00b"}, {"p\x00", "a"}} {
			_, err := e.b.Ownership.ClaimPartition(e.ctx, c.partition, c.owner, 1000)
			wantErrIs(e, "ClaimPartition("+c.partition+", "+c.owner+")", err, storage.ErrUnstorable)
		}
		e.wantOwner(e.b, "p", "", 0)
	}},
	{name: "FencedPush", roles: []string{"Log"}, fn: func(e *env) {
		e.claimPartition(e.b, "p", "member-a", 1)
		if err := e.fencedPush(storage.WithFence(e.ctx, 1), e.b, "p"); err != nil {
			e.t.Fatalf("push fenced with the current generation: %v", err)
		}
		e.claimPartition(e.b, "p", "member-b", 2)
		err := e.fencedPush(storage.WithFence(e.ctx, 1), e.b, "p")
		wantErrIs(e, "push fenced with the old generation", err, storage.ErrOwnershipLost)
		if got := e.readPartition("p").MaxCommitSeq; got != 1 {
			e.t.Fatalf("MaxCommitSeq after the refused push = %d, want 1", got)
		}
		if err := e.fencedPush(storage.WithFence(e.ctx, 2), e.b, "p"); err != nil {
			e.t.Fatalf("push fenced with the new generation: %v", err)
		}
		if err := e.fencedPush(e.ctx, e.b, "p"); err != nil {
			e.t.Fatalf("unfenced push: %v", err)
		}
		if got := e.readPartition("p").MaxCommitSeq; got != 3 {
			e.t.Fatalf("MaxCommitSeq = %d, want 3", got)
		}
		// A fence on a partition never claimed is no partition's generation.
		err = e.fencedPush(storage.WithFence(e.ctx, 1), e.b, "never-claimed")
		wantErrIs(e, "push fenced on an unclaimed partition", err, storage.ErrOwnershipLost)
		if p := e.readPartition("never-claimed"); p.Exists {
			e.t.Fatalf("a refused fenced push created the partition: %+v", p)
		}
	}},
	{name: "SharedClaims", shared: true, roles: []string{"Log"}, fn: func(e *env) {
		b := e.share()
		if err := b.Lifecycle.EnsureSchema(e.ctx, e.sch); err != nil {
			e.t.Fatalf("second handle EnsureSchema: %v", err)
		}
		e.claimPartition(e.b, "p", "member-a", 1)
		e.claimPartition(b, "p", "member-b", 2)
		e.wantOwner(e.b, "p", "member-b", 2)
		err := e.fencedPush(storage.WithFence(e.ctx, 1), e.b, "p")
		wantErrIs(e, "deposed member's push", err, storage.ErrOwnershipLost)
		if err := e.fencedPush(storage.WithFence(e.ctx, 2), b, "p"); err != nil {
			e.t.Fatalf("new owner's push: %v", err)
		}
		if got := e.readPartition("p").MaxCommitSeq; got != 1 {
			e.t.Fatalf("MaxCommitSeq = %d, want 1 (only the new owner's push)", got)
		}
	}},
}
