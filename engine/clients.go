package engine

import (
	"context"
	"encoding/json"

	"go.uber.org/zap"

	"github.com/synclane/synclane/engine/ssp2"
	"github.com/synclane/synclane/storage"
)

// registeredSub is the stored form of one registered subscription.
type registeredSub struct {
	ID     string              `json:"id"`
	Table  string              `json:"table"`
	Scopes map[string][]string `json:"scopes"`
	Cursor int64               `json:"cursor"`
}

// boundActor returns the actor a clientId is bound to in this partition
// ("" when unbound), from the worker's cache or storage.
func (w *worker) boundActor(ctx context.Context, clientID string) (string, error) {
	if a, ok := w.bindings[clientID]; ok {
		return a, nil
	}
	rec, err := w.e.cfg.Store.GetClient(ctx, w.partition, clientID)
	if err != nil {
		return "", err
	}
	if rec == nil {
		return "", nil
	}
	if len(w.bindings) >= 100_000 {
		clear(w.bindings)
	}
	w.bindings[clientID] = rec.ActorID
	return rec.ActorID, nil
}

// recordClient buffers the client's record after a served request: its
// actor binding, wire version and, for pulls, the registered subscriptions
// (the request's list replaces the stored one) and the cursor watermark
// (minimum nextCursor over active subscriptions; kept when none is active).
func (w *worker) recordClient(j *syncJob, rep *Reply) {
	cid := j.req.Header.ClientID
	w.bindings[cid] = j.id.ActorID
	rec, ok := w.dirty[cid]
	if !ok {
		rec = storage.ClientRecord{ClientID: cid, ActorID: j.id.ActorID, Cursor: -1}
		if prev, err := w.e.cfg.Store.GetClient(context.Background(), w.partition, cid); err == nil && prev != nil {
			rec = *prev
		}
	}
	rec.ActorID = j.id.ActorID
	rec.WireVersion = j.req.WireVersion
	rec.UpdatedAtMs = w.e.cfg.Now().UnixMilli()
	if j.req.Pull != nil {
		subs := make([]registeredSub, 0, len(j.req.Subscriptions))
		cursors := map[string]int64{}
		active := map[string]bool{}
		var cur *ssp2.SubStart
		for _, f := range rep.Frames {
			switch x := f.(type) {
			case *ssp2.SubStart:
				cur = x
			case *ssp2.SubEnd:
				if cur != nil {
					cursors[cur.ID] = x.NextCursor
					active[cur.ID] = cur.Status == ssp2.SubActive
				}
			}
		}
		watermark := int64(-1)
		any := false
		for _, s := range j.req.Subscriptions {
			subs = append(subs, registeredSub{ID: s.ID, Table: s.Table, Scopes: s.Scopes, Cursor: cursors[s.ID]})
			if active[s.ID] {
				if !any || cursors[s.ID] < watermark {
					watermark = cursors[s.ID]
				}
				any = true
			}
		}
		if b, err := json.Marshal(subs); err == nil {
			rec.Subscriptions = b
		}
		if any {
			rec.Cursor = watermark
		}
	}
	w.dirty[cid] = rec
}

func (w *worker) maybeFlushClients(ctx context.Context) {
	if len(w.dirty) == 0 {
		return
	}
	if len(w.dirty) < 512 && w.e.cfg.Now().Sub(w.lastFlush) < w.e.cfg.ClientFlushInterval {
		return
	}
	w.flushClients(ctx)
}

// flushClients writes buffered client records back to storage. A failed
// write keeps the record buffered for the next flush.
func (w *worker) flushClients(ctx context.Context) {
	w.lastFlush = w.e.cfg.Now()
	for cid, rec := range w.dirty {
		if err := w.e.cfg.Store.PutClient(ctx, w.partition, rec); err != nil {
			w.log.Warn("client record write failed; will retry", zap.String("client_id", cid), zap.Error(err))
			continue
		}
		delete(w.dirty, cid)
	}
}
