package engine

import (
	"context"
	"encoding/json"

	"go.uber.org/zap"

	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage"
)

// registeredSub is the stored form of one registered subscription.
type registeredSub struct {
	ID     string              `json:"id"`
	Table  string              `json:"table"`
	Scopes map[string][]string `json:"scopes"`
	Cursor int64               `json:"cursor"`
}

// clientEntry is a cached client record; dirty ones await write-back.
type clientEntry struct {
	rec   storage.ClientRecord
	dirty bool
}

// maxCachedClients bounds the per-partition client cache; past it, clean
// entries are dropped (they are re-read from storage on demand).
const maxCachedClients = 50_000

// client returns the cached record of clientID, reading it from storage
// on a miss; nil when the client has no record.
func (w *worker) client(ctx context.Context, clientID string) (*clientEntry, error) {
	if ce, ok := w.clients[clientID]; ok {
		return ce, nil
	}
	rec, err := w.e.cfg.Store.GetClient(ctx, w.partition, clientID)
	if err != nil || rec == nil {
		return nil, err
	}
	return w.cache(&clientEntry{rec: *rec}), nil
}

func (w *worker) cache(ce *clientEntry) *clientEntry {
	if w.clients == nil {
		w.clients = map[string]*clientEntry{}
	}
	if len(w.clients) >= maxCachedClients {
		for id, c := range w.clients {
			if !c.dirty {
				delete(w.clients, id)
			}
		}
	}
	w.clients[ce.rec.ClientID] = ce
	return ce
}

// boundActor returns the actor a clientId is bound to in this partition
// ("" when unbound).
func (w *worker) boundActor(ctx context.Context, clientID string) (string, error) {
	ce, err := w.client(ctx, clientID)
	if err != nil || ce == nil {
		return "", err
	}
	return ce.rec.ActorID, nil
}

// recordClient buffers the client's record after a served request: its
// actor binding, wire version and, for pulls, the registered subscriptions
// (the request's list replaces the stored one) and the cursor watermark
// (minimum nextCursor over active subscriptions; kept when none is active).
func (w *worker) recordClient(j *syncJob, rep *Reply) {
	cid := j.req.Header.ClientID
	ce, err := w.client(context.Background(), cid)
	if err != nil || ce == nil {
		// Unknown (or unreadable) record: start a fresh one; a later flush
		// writes it.
		ce = w.cache(&clientEntry{rec: storage.ClientRecord{ClientID: cid, Cursor: -1}})
	}
	rec := &ce.rec
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
		anyActive := false
		for _, s := range j.req.Subscriptions {
			subs = append(subs, registeredSub{ID: s.ID, Table: s.Table, Scopes: s.Scopes, Cursor: cursors[s.ID]})
			if active[s.ID] {
				if !anyActive || cursors[s.ID] < watermark {
					watermark = cursors[s.ID]
				}
				anyActive = true
			}
		}
		if b, err := json.Marshal(subs); err == nil {
			rec.Subscriptions = b
		}
		if anyActive {
			rec.Cursor = watermark
		}
	}
	if !ce.dirty {
		ce.dirty = true
		w.dirty++
	}
}

func (w *worker) maybeFlushClients(ctx context.Context) {
	if w.dirty == 0 {
		return
	}
	if w.dirty < 512 && w.e.cfg.Now().Sub(w.lastFlush) < w.e.cfg.ClientFlushInterval {
		return
	}
	w.flushClients(ctx)
}

// flushClients writes buffered client records back to storage in one
// transaction. A failed write keeps them buffered for the next flush.
func (w *worker) flushClients(ctx context.Context) {
	w.lastFlush = w.e.cfg.Now()
	if w.dirty == 0 {
		return
	}
	recs := make([]storage.ClientRecord, 0, w.dirty)
	for _, ce := range w.clients {
		if ce.dirty {
			recs = append(recs, ce.rec)
		}
	}
	if err := w.e.cfg.Store.PutClient(ctx, w.partition, recs...); err != nil {
		w.log().Warn("client records write failed; will retry", zap.Int("clients", len(recs)), zap.Error(err))
		return
	}
	for _, ce := range w.clients {
		ce.dirty = false
	}
	w.dirty = 0
}
