package partition

import (
	"context"
	"fmt"
	"testing"

	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage"
	"github.com/synclane/synclane/storage/memory"
)

// fenceRefusingClients refuses every fenced write of client records, as a
// store does once another member claimed the partition.
type fenceRefusingClients struct{ storage.Clients }

func (c fenceRefusingClients) PutClient(ctx context.Context, partition string, recs ...storage.ClientRecord) error {
	if _, ok := storage.FenceFrom(ctx); ok {
		return fmt.Errorf("test: %w", storage.ErrOwnershipLost)
	}
	return c.Clients.PutClient(ctx, partition, recs...)
}

// watchedHandOver records whether a hand-over came with a fence.
type watchedHandOver struct {
	storage.ClientHandOver
	calls, fenced *int
}

func (h watchedHandOver) HandOverClients(ctx context.Context, partition, logEpoch string, recs ...storage.ClientRecord) (int, error) {
	*h.calls++
	if _, ok := storage.FenceFrom(ctx); ok {
		*h.fenced++
	}
	return h.ClientHandOver.HandOverClients(ctx, partition, logEpoch, recs...)
}

// claimingPartition returns partition "p" on st in cluster mode (Claim
// counts its claims in claims), loaded, and its log epoch.
func claimingPartition(t *testing.T, st *memory.Store, b storage.Backend, claims *int) (*Partition, string) {
	t.Helper()
	ctx := context.Background()
	s := testSchema(t)
	if err := st.EnsureSchema(ctx, s); err != nil {
		t.Fatal(err)
	}
	pc := NewConfig(s, b, Gate{Running: s.Version})
	pc.Claim = func(context.Context, string) (int64, error) { *claims++; return int64(*claims), nil }
	p := New("p", pc)
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	p.load(ctx)
	return p, p.token.LogEpoch
}

// pushFrom serves one push of client cid on p and checks it applied.
func pushFrom(t *testing.T, p *Partition, cid, epoch string) {
	t.Helper()
	payload, err := p.cfg.Codecs["tasks"].Append(nil, ssp2.Row{cid + "-r", "P", "T", "t"})
	if err != nil {
		t.Fatal(err)
	}
	req := &ssp2.Request{WireVersion: ssp2.WireV2, Header: &ssp2.ReqHeader{ClientID: cid, SchemaVersion: 1, LogEpoch: &epoch},
		Commits: []*ssp2.PushCommit{{ClientCommitID: "k", Operations: []ssp2.Operation{{Table: "tasks", RowID: cid + "-r", Op: ssp2.OpUpsert, Payload: payload}}}}}
	j := NewSyncJob(context.Background(), "u", req, Allowed{"project_id": {"*"}, "team_id": {"*"}}, true)
	p.Handle(context.Background(), []Job{j})
	if rep, err := j.Wait(context.Background()); err != nil || rep.Applied != 1 {
		t.Fatalf("push of %s: %v, %+v", cid, err, rep)
	}
}

// A write-back job and a stop of an actor with nothing buffered claim
// nothing (a release must not make a member take a partition); with
// records buffered the job writes them back under the actor's claim.
func TestWriteBackClaimsOnlyWithRecordsBuffered(t *testing.T) {
	ctx := context.Background()
	st := memory.New()
	claims := 0
	p, epoch := claimingPartition(t, st, st.Backend(), &claims)
	j := NewWriteBackJob(ctx)
	p.Handle(ctx, []Job{j})
	if left, err := j.Wait(ctx); err != nil || left != 0 || claims != 0 {
		t.Fatalf("write-back of nothing: %d left, %v; %d claims, want none", left, err, claims)
	}
	p.Stop(ctx)
	if claims != 0 {
		t.Fatalf("a stop with nothing buffered claimed the partition (%d claims)", claims)
	}
	pushFrom(t, p, "c1", epoch)
	if rec, _ := st.GetClient(ctx, "p", "c1"); rec == nil || rec.WireVersion != 0 || p.clients.dirty != 1 {
		t.Fatalf("c1's round is not buffered: stored %+v, %d buffered", rec, p.clients.dirty)
	}
	j = NewWriteBackJob(ctx)
	p.Handle(ctx, []Job{j})
	if left, err := j.Wait(ctx); err != nil || left != 0 || claims != 1 {
		t.Fatalf("write-back: %d left, %v; %d claims, want the push's one", left, err, claims)
	}
	if rec, _ := st.GetClient(ctx, "p", "c1"); rec == nil || rec.WireVersion != ssp2.WireV2 {
		t.Fatalf("c1's round not written back: %+v", rec)
	}
}

// Records whose write-back the fence refuses are handed over without the
// fence, at the actor's log epoch; a store without the role cannot take
// them and they are dropped (not retried forever against the fence).
func TestFencedWriteBackIsHandedOver(t *testing.T) {
	for _, c := range []struct {
		name       string
		handOver   bool
		wantStored bool
	}{
		{"store with the hand-over role", true, true},
		{"store without it", false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			st := memory.New()
			calls, fenced, claims := 0, 0, 0
			b := st.Backend()
			b.Clients = fenceRefusingClients{b.Clients}
			b.HandOver = nil
			if c.handOver {
				b.HandOver = watchedHandOver{ClientHandOver: st, calls: &calls, fenced: &fenced}
			}
			p, epoch := claimingPartition(t, st, b, &claims)
			pushFrom(t, p, "c1", epoch)
			p.Stop(ctx) // the actor stops: its write-back is refused
			rec, err := st.GetClient(ctx, "p", "c1")
			if err != nil {
				t.Fatal(err)
			}
			if stored := rec != nil && rec.WireVersion == ssp2.WireV2; stored != c.wantStored {
				t.Fatalf("c1's round stored: %v (%+v), want %v", stored, rec, c.wantStored)
			}
			if p.clients.dirty != 0 {
				t.Fatalf("%d records still buffered after the refused write-back", p.clients.dirty)
			}
			if c.handOver && (calls != 1 || fenced != 0) {
				t.Fatalf("hand-overs: %d calls, %d with a fence; want one, without", calls, fenced)
			}
		})
	}
}
