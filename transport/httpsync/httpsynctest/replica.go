// Package httpsynctest holds test support for code that syncs over
// package httpsync: a minimal in-memory client database (Replica) that
// applies pull responses, for convergence tests and benchmarks.
package httpsynctest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/transport/httpsync"
)

// ReplicaRow is one row held by a Replica.
type ReplicaRow struct {
	Version int64
	Values  ssp2.Row
}

// ReplicaSub is one subscription of a Replica with its sync state.
type ReplicaSub struct {
	ID     string
	Table  string
	Scopes map[string][]string
	Cursor int64
	Token  json.RawMessage
	// Status is the last SUB_START status seen.
	Status ssp2.SubStatus
}

// Replica is a minimal client-side model of a synced database, used by
// tests and benchmarks to check convergence: it applies pull responses
// (bootstrap segments, commits, revocations, resets) to in-memory tables.
// It applies whole sections only after their SUB_END, like a real client.
type Replica struct {
	Client *httpsync.Client
	Schema *schema.Schema
	Limits ssp2.PullHeader
	Subs   []*ReplicaSub
	Rows   map[string]map[string]ReplicaRow // table → rowId → row
	codecs map[string]*ssp2.RowCodec
}

// NewReplica returns an empty replica syncing through c.
func NewReplica(c *httpsync.Client, s *schema.Schema) *Replica {
	r := &Replica{Client: c, Schema: s, Rows: map[string]map[string]ReplicaRow{}, codecs: map[string]*ssp2.RowCodec{},
		Limits: ssp2.PullHeader{Accept: ssp2.AcceptInlineRows | ssp2.AcceptRefRows}}
	if c != nil && c.Schema == nil {
		c.Schema = s // to apply SQLite segment images
	}
	for _, t := range s.Tables {
		r.codecs[t.Name] = ssp2.NewRowCodec(t.Columns)
		r.Rows[t.Name] = map[string]ReplicaRow{}
	}
	return r
}

// Subscribe adds a never-synced subscription.
func (r *Replica) Subscribe(id, table string, scopes map[string][]string) {
	r.Subs = append(r.Subs, &ReplicaSub{ID: id, Table: table, Scopes: scopes, Cursor: -1})
}

// PullStats summarizes one pull.
type PullStats struct {
	Commits, Changes, SegmentRows int
	Incomplete                    bool // some bootstrap has a resume token
}

// Pull performs one pull round and applies it. An epoch reset clears every
// table and subscription cursor (the caller pulls again).
func (r *Replica) Pull(ctx context.Context) (PullStats, error) {
	subs := make([]*ssp2.Subscription, len(r.Subs))
	for i, s := range r.Subs {
		subs[i] = &ssp2.Subscription{ID: s.ID, Table: s.Table, Scopes: s.Scopes, Cursor: s.Cursor, BootstrapState: s.Token}
	}
	resp, err := r.Client.Pull(ctx, r.Limits, subs...)
	if errors.Is(err, httpsync.ErrResetRequired) {
		r.Reset()
		return PullStats{Incomplete: true}, nil
	}
	if err != nil {
		return PullStats{}, err
	}
	// Follow SEGMENT_REFs: download each segment (a failure, such as an
	// expired segment, leaves the replica's state untouched: pull again).
	if err := r.Client.ResolveSegments(ctx, resp, subs...); err != nil {
		return PullStats{}, err
	}
	return r.Apply(resp)
}

// Reset drops all synced state (rows, cursors, tokens).
func (r *Replica) Reset() {
	for t := range r.Rows {
		r.Rows[t] = map[string]ReplicaRow{}
	}
	for _, s := range r.Subs {
		s.Cursor, s.Token = -1, nil
	}
}

type pendingOp struct {
	table, rowID string
	del          bool
	row          ReplicaRow
}

// Apply applies a pull response. Sections are applied at their SUB_END; a
// section cut by an ERROR frame is dropped.
func (r *Replica) Apply(resp *ssp2.Message) (PullStats, error) {
	a := r.Applier()
	for _, f := range resp.Frames {
		if err := a.Frame(f); err != nil {
			return a.Stats(), err
		}
	}
	return a.Stats(), nil
}

// Applier applies a pull response frame by frame, as Apply does for a
// whole one, so that a client reading a streamed response decodes each
// bootstrap page while the server builds the next. Sections still apply
// at their SUB_END.
type Applier struct {
	r          *Replica
	st         PullStats
	byID       map[string]*ReplicaSub
	cur        *ReplicaSub
	start      *ssp2.SubStart
	ops        [][]pendingOp // one chunk per frame: a page's rows are never copied to grow one slice
	clearFirst bool
}

// Applier returns an Applier for one response.
func (r *Replica) Applier() *Applier {
	a := &Applier{r: r, byID: map[string]*ReplicaSub{}}
	for _, s := range r.Subs {
		a.byID[s.ID] = s
	}
	return a
}

// Stats reports what the frames applied so far brought.
func (a *Applier) Stats() PullStats { return a.st }

// Frame applies the response's next frame.
func (a *Applier) Frame(f ssp2.Frame) error {
	r, st := a.r, &a.st
	switch x := f.(type) {
	case *ssp2.SubStart:
		a.cur, a.start, a.ops = a.byID[x.ID], x, nil
		if a.cur == nil {
			return fmt.Errorf("replica: section for unknown subscription %q", x.ID)
		}
		a.clearFirst = x.Bootstrap && a.cur.Cursor < 0 && a.cur.Token == nil
	case *ssp2.Commit:
		st.Commits++
		chunk := make([]pendingOp, 0, len(x.Changes))
		for _, ch := range x.Changes {
			st.Changes++
			t := x.Tables[ch.TableIndex]
			op := pendingOp{table: t, rowID: ch.RowID, del: ch.Op == ssp2.OpDelete}
			if !op.del {
				vals, err := r.codecs[t].Decode(ch.Row)
				if err != nil {
					return fmt.Errorf("replica: commit %d row %s: %w", x.CommitSeq, ch.RowID, err)
				}
				op.row = ReplicaRow{Version: *ch.RowVersion, Values: vals}
			}
			chunk = append(chunk, op)
		}
		a.ops = append(a.ops, chunk)
	case *ssp2.SegmentInline:
		seg := x.Segment // decoded by a Decoder asked to, or by the caller
		if seg == nil {
			var err error
			if seg, err = ssp2.DecodeSegment(x.Payload); err != nil {
				return fmt.Errorf("replica: segment: %w", err)
			}
		}
		t := r.Schema.Table(seg.Table)
		n := 0
		for _, b := range seg.Blocks {
			n += len(b)
		}
		chunk := make([]pendingOp, 0, n)
		for _, b := range seg.Blocks {
			for _, row := range b {
				st.SegmentRows++
				id, ok := t.RowID(row.Values)
				if !ok {
					return fmt.Errorf("replica: segment %s row: key %v renders no row id", seg.Table, row.Values[t.PK])
				}
				chunk = append(chunk, pendingOp{table: seg.Table, rowID: id, row: ReplicaRow{Version: row.ServerVersion, Values: row.Values}})
			}
		}
		a.ops = append(a.ops, chunk)
	case *ssp2.SegmentRef:
		return errors.New("replica: unresolved SEGMENT_REF (Pull follows refs; callers of Apply use Client.ResolveSegments first)")
	case *ssp2.SubEnd:
		cur := a.cur
		if cur == nil {
			return nil
		}
		cur.Status = a.start.Status
		switch a.start.Status {
		case ssp2.SubRevoked:
			r.purge(cur)
		case ssp2.SubReset:
			r.purge(cur)
			cur.Cursor, cur.Token = -1, nil
			st.Incomplete = true
			a.cur = nil
			return nil
		}
		if a.clearFirst {
			r.purge(cur)
		}
		if len(r.Rows[cur.Table]) == 0 {
			// An empty table (a first bootstrap) is sized once for the
			// section's rows instead of growing through every power of two.
			n := 0
			for _, chunk := range a.ops {
				n += len(chunk)
			}
			r.Rows[cur.Table] = make(map[string]ReplicaRow, n)
		}
		for _, chunk := range a.ops {
			for _, op := range chunk {
				if op.del {
					delete(r.Rows[op.table], op.rowID)
				} else {
					r.Rows[op.table][op.rowID] = op.row
				}
			}
		}
		cur.Cursor = x.NextCursor
		cur.Token = x.BootstrapState
		if cur.Token != nil {
			st.Incomplete = true
		}
		a.cur, a.ops = nil, nil
	}
	return nil
}

// purge deletes the rows of sub's table that its scopes select.
func (r *Replica) purge(sub *ReplicaSub) {
	t := r.Schema.Table(sub.Table)
	for id, row := range r.Rows[sub.Table] {
		match := true
		for v, vals := range sub.Scopes {
			sv := t.ScopeVar(v)
			if sv == nil {
				continue
			}
			got := fmt.Sprint(row.Values[sv.Column])
			found := false
			for _, x := range vals {
				found = found || x == got
			}
			match = match && found
		}
		if match {
			delete(r.Rows[sub.Table], id)
		}
	}
}

// SyncUntilIdle pulls until a round brings nothing new and no bootstrap is
// incomplete, at most maxRounds times.
func (r *Replica) SyncUntilIdle(ctx context.Context, maxRounds int) error {
	for range maxRounds {
		st, err := r.Pull(ctx)
		if err != nil {
			return err
		}
		if !st.Incomplete && st.Commits == 0 && st.SegmentRows == 0 {
			return nil
		}
	}
	return fmt.Errorf("replica: not idle after %d rounds", maxRounds)
}

// The methods below make a Replica a realtime.Follower.

// ApplyDelta applies a realtime delta (a whole SSP2 response).
func (r *Replica) ApplyDelta(msg *ssp2.Message) error {
	_, err := r.Apply(msg)
	return err
}

// CatchUp pulls until idle (at most 100 rounds).
func (r *Replica) CatchUp(ctx context.Context) error { return r.SyncUntilIdle(ctx, 100) }

// Cursor returns the lowest cursor of the active subscriptions (-1 when
// none has synced).
func (r *Replica) Cursor() int64 {
	c, any := int64(-1), false
	for _, s := range r.Subs {
		if s.Status != ssp2.SubActive || s.Cursor < 0 {
			continue
		}
		if !any || s.Cursor < c {
			c = s.Cursor
		}
		any = true
	}
	return c
}

// ResetEpoch drops the synced state and re-acquires the log epoch.
func (r *Replica) ResetEpoch(ctx context.Context) error {
	r.Reset()
	return r.Client.Handshake(ctx)
}
