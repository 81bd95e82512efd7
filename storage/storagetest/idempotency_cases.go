package storagetest

import (
	"bytes"

	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage"
)

func (e *env) wantIdem(what string, got *storage.IdempotencyRecord, err error, want *storage.IdempotencyRecord) {
	e.t.Helper()
	if err != nil {
		e.t.Fatalf("%s: %v", what, err)
	}
	if want == nil {
		if got != nil {
			e.t.Fatalf("%s: got %+v, want nil", what, got)
		}
		return
	}
	if got == nil || got.ClientID != want.ClientID || got.ClientCommitID != want.ClientCommitID ||
		got.Status != want.Status || got.CommitSeq != want.CommitSeq || !bytes.Equal(got.Result, want.Result) {
		e.t.Fatalf("%s: got %+v, want %+v", what, got, want)
	}
}

var idempotencyTests = []test{
	{name: "AppliedAndRejected", fn: func(e *env) {
		applied := storage.IdempotencyRecord{ClientID: "c1", ClientCommitID: "k1", Status: ssp2.CommitApplied, CommitSeq: 1, Result: []byte{1, 0, 2, 0xff}}
		rejected := storage.IdempotencyRecord{ClientID: "c1", ClientCommitID: "k2", Status: ssp2.CommitRejected, Result: []byte("rejected: sync.forbidden")}
		e.touch("p")
		tx := e.begin("p")
		defer func() { _ = tx.Rollback(e.ctx) }()
		r, err := tx.LookupIdempotency(e.ctx, "c1", "k1")
		e.wantIdem("tx lookup before put", r, err, nil)
		e.appendNext(tx)
		for _, rec := range []storage.IdempotencyRecord{applied, rejected} {
			if err := tx.PutIdempotency(e.ctx, rec); err != nil {
				e.t.Fatal(err)
			}
		}
		r, err = tx.LookupIdempotency(e.ctx, "c1", "k1")
		e.wantIdem("tx lookup of own applied", r, err, &applied)
		r, err = tx.LookupIdempotency(e.ctx, "c1", "k2")
		e.wantIdem("tx lookup of own rejected", r, err, &rejected)
		r, err = e.b.Log.LookupIdempotency(e.ctx, "p", "c1", "k1")
		e.wantIdem("store lookup of uncommitted", r, err, nil)
		if err := tx.Commit(e.ctx); err != nil {
			e.t.Fatal(err)
		}
		r, err = e.b.Log.LookupIdempotency(e.ctx, "p", "c1", "k1")
		e.wantIdem("store lookup applied", r, err, &applied)
		r, err = e.b.Log.LookupIdempotency(e.ctx, "p", "c1", "k2")
		e.wantIdem("store lookup rejected", r, err, &rejected)
		r, err = e.b.Log.LookupIdempotency(e.ctx, "p", "c2", "k1")
		e.wantIdem("other client same commit id", r, err, nil)
		r, err = e.b.Log.LookupIdempotency(e.ctx, "p", "c1", "k3")
		e.wantIdem("unknown commit id", r, err, nil)
		r, err = e.b.Log.LookupIdempotency(e.ctx, "never", "c1", "k1")
		e.wantIdem("untouched partition", r, err, nil)

		tx2 := e.begin("p")
		defer func() { _ = tx2.Rollback(e.ctx) }()
		r, err = tx2.LookupIdempotency(e.ctx, "c1", "k1")
		e.wantIdem("later tx lookup applied", r, err, &applied)
		r, err = tx2.LookupIdempotency(e.ctx, "c1", "k2")
		e.wantIdem("later tx lookup rejected", r, err, &rejected)
	}},
}
