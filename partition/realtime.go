package partition

import (
	"context"
	"encoding/json"

	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage"
)

// Realtime (§8) asks three things of a partition's actor, each a job so
// that only the actor reads its client records and log tail and writes
// client records: the state a connecting socket starts from (ClientJob),
// the sections of realtime deltas built from the log (DeltaJob), and
// cursor acknowledgements (AckJob). Everything about sockets lives in
// package transport/realtime.

// Registration is what a served round recorded for its client, reported
// through Config.OnRegistration: the wire version, and, when the round
// carried a pull (Pulled), the registered subscription list that replaced
// the previous one, with each subscription's nextCursor.
type Registration struct {
	ClientID    string
	ActorID     string
	WireVersion uint16
	// LogEpoch is the partition's epoch the round was served under.
	LogEpoch string
	// Pulled reports that the round carried a PULL_HEADER; Subscriptions
	// is then the new registered list (in request order).
	Pulled        bool
	Subscriptions []RegisteredSubscription
}

// RegisteredSubscription is one registered subscription of a client.
type RegisteredSubscription struct {
	ID    string
	Table string
	// Effective holds the effective scopes of an active subscription (nil
	// when it is revoked or reset).
	Effective map[string][]string
	// Cursor is the subscription's cursor: its last nextCursor.
	Cursor int64
	// Active reports SUB_START status active at the last pull.
	Active bool
	// Ready reports that deltas may continue the subscription from Cursor:
	// it is active and its bootstrap is complete.
	Ready bool
}

// StoredSubscription is a registered subscription as loaded from a client
// record: requested scopes (effective scopes are resolved again on every
// connect) and its cursor. Pending marks one deltas must not continue.
type StoredSubscription struct {
	ID      string
	Table   string
	Scopes  map[string][]string
	Cursor  int64
	Pending bool
}

// CommitKeys are the scope keys one commit touches, reported through
// Config.OnCommitKeys: "prefix:value" (schema.ScopeVar.Key) for
// the stored scope value of every scope variable of each of its changes,
// distinct. A delete's are the deleted row's, and scope columns never
// change after insert, so a subscription a commit matches holds at least
// one of them (a change matches when every variable of its effective
// scopes matches, and an effective scope map is never empty). Any is set
// when a change names a table or scope variable the schema does not know:
// the commit may then touch any key.
type CommitKeys struct {
	Seq  int64
	Keys []string
	Any  bool
}

// commitKeys lists the scope keys of recs.
func commitKeys(sch *schema.Schema, recs []storage.CommitRecord) []CommitKeys {
	out := make([]CommitKeys, len(recs))
	var seen map[string]struct{}
	for i := range recs {
		c := &out[i]
		c.Seq = recs[i].Seq
		clear(seen)
		var lastVar *schema.ScopeVar
		var lastVal string
		for _, ch := range recs[i].Changes {
			t := sch.Table(ch.Table)
			if t == nil {
				c.Any = true
				continue
			}
			for v, val := range ch.Scopes {
				sv := t.ScopeVar(v)
				if sv == nil {
					c.Any = true
					continue
				}
				if sv == lastVar && val == lastVal {
					continue // consecutive changes mostly share their keys
				}
				lastVar, lastVal = sv, val
				k := sv.Key(val)
				if seen == nil {
					seen = map[string]struct{}{}
				}
				if _, dup := seen[k]; dup {
					continue
				}
				seen[k] = struct{}{}
				c.Keys = append(c.Keys, k)
			}
		}
	}
	return out
}

// ClientState is what a connecting socket starts from: the partition's
// registry entry and the client's record.
type ClientState struct {
	Info storage.PartitionInfo
	// Exists reports that the client has a record.
	Exists bool
	// ActorID is the actor the clientId is bound to ("" when unbound).
	ActorID       string
	Cursor        int64
	WireVersion   uint16
	Subscriptions []StoredSubscription
}

// ClientJob reads a client's state for a connecting realtime socket.
type ClientJob struct {
	ctx      context.Context
	clientID string
	completion[ClientState]
}

// NewClientJob returns the job reading clientID's state.
func NewClientJob(ctx context.Context, clientID string) *ClientJob {
	j := &ClientJob{ctx: ctx, clientID: clientID}
	j.init()
	return j
}

// Wait returns the state, or the job's error, or ctx's end.
func (j *ClientJob) Wait(ctx context.Context) (ClientState, error) { return j.wait(ctx, "") }

// Batchable is false: the job runs alone.
func (j *ClientJob) Batchable() bool { return false }

func (j *ClientJob) push() *SyncJob { return nil }

func (j *ClientJob) run(ctx context.Context, p *Partition) {
	if err := j.ctx.Err(); err != nil {
		j.Fail(err)
		return
	}
	if _, err := p.cfg.Gate.Open(ctx, p.gateReader(), p.name); err != nil {
		j.Fail(err)
		return
	}
	info, err := p.read(ctx)
	if err != nil {
		j.Fail(storageErr(err))
		return
	}
	st := ClientState{Info: info, Cursor: -1}
	ce, err := p.client(ctx, j.clientID)
	if err != nil {
		j.Fail(storageErr(err))
		return
	}
	if ce != nil {
		ce.settle()
		st.Exists, st.ActorID, st.Cursor, st.WireVersion = true, ce.rec.ActorID, ce.rec.Cursor, ce.rec.WireVersion
		var subs []registeredSub
		if len(ce.rec.Subscriptions) > 0 && json.Unmarshal(ce.rec.Subscriptions, &subs) == nil {
			for _, s := range subs {
				st.Subscriptions = append(st.Subscriptions, StoredSubscription{ID: s.ID, Table: s.Table, Scopes: s.Scopes, Cursor: s.Cursor, Pending: s.Pending})
			}
		}
	}
	j.answer(st, nil)
}

func (j *ClientJob) requestContext() context.Context { return j.ctx }

// DeltaSub is one subscription a delta continues: its table, effective
// scopes and cursor.
type DeltaSub struct {
	ID        string
	Table     string
	Effective map[string][]string
	Cursor    int64
}

// DeltaGroup is the subscription set of one or more sockets that share
// it (same subscriptions, scopes and cursors): its sections are built once.
type DeltaGroup struct {
	Subs []DeltaSub
}

// DeltaRequest asks for the sections of every group's delta up to the
// partition's newest commit.
type DeltaRequest struct {
	Groups []DeltaGroup
	// LimitChanges caps the changes of one subscription's section (default
	// 1000); MaxBytes the estimated bytes of one group's commits (default
	// 1 MiB). A group beyond either is answered Incomplete or TooLarge.
	LimitChanges int
	MaxBytes     int
}

// DeltaSections is one group's answer: per subscription SUB_START (active,
// not bootstrap), its COMMITs after the cursor and SUB_END at UpTo.
type DeltaSections struct {
	Frames []ssp2.Frame
	// Commits counts the COMMIT frames (0: nothing for these sockets).
	Commits int
	// Incomplete: the window cannot be sent whole as a delta (a cursor
	// outside the incremental range, or more changes than LimitChanges).
	Incomplete bool
	// TooLarge: the commits exceed MaxBytes.
	TooLarge bool
}

// DeltaResult answers a DeltaRequest.
type DeltaResult struct {
	// LogEpoch and UpTo are the partition's epoch and newest commit seq the
	// sections were built under.
	LogEpoch string
	UpTo     int64
	Groups   []DeltaSections
}

// DeltaJob builds realtime delta sections from the partition's log (its
// in-memory tail when it covers the window, storage otherwise), under an
// open serve gate; it writes nothing.
type DeltaJob struct {
	ctx context.Context
	req DeltaRequest
	completion[*DeltaResult]
}

// NewDeltaJob returns the job for req.
func NewDeltaJob(ctx context.Context, req DeltaRequest) *DeltaJob {
	j := &DeltaJob{ctx: ctx, req: req}
	j.init()
	return j
}

// Wait returns the result, or the job's error, or ctx's end.
func (j *DeltaJob) Wait(ctx context.Context) (*DeltaResult, error) { return j.wait(ctx, "") }

// Batchable is false: the job runs alone.
func (j *DeltaJob) Batchable() bool { return false }

func (j *DeltaJob) push() *SyncJob { return nil }

func (j *DeltaJob) run(ctx context.Context, p *Partition) {
	if err := j.ctx.Err(); err != nil {
		j.Fail(err)
		return
	}
	token, err := p.cfg.Gate.Open(ctx, p.gateReader(), p.name)
	if err != nil {
		j.Fail(err)
		return
	}
	info, err := p.read(ctx)
	if err != nil {
		j.Fail(storageErr(err))
		return
	}
	limit, budget := j.req.LimitChanges, j.req.MaxBytes
	if limit <= 0 {
		limit = 1000
	}
	if budget <= 0 {
		budget = 1 << 20
	}
	res := &DeltaResult{LogEpoch: info.LogEpoch, UpTo: info.MaxCommitSeq, Groups: make([]DeltaSections, len(j.req.Groups))}
	if token.LogEpoch == info.LogEpoch {
		for i, g := range j.req.Groups {
			if res.Groups[i], err = p.deltaSections(ctx, info, g, limit, budget); err != nil {
				j.Fail(storageErr(err))
				return
			}
		}
	}
	// (A rotation between the two reads leaves every group empty: the
	// sockets see the new epoch and are told to reset.)
	_, horizon, err := p.cfg.Gate.Verify(ctx, p.gateReader(), p.name, token)
	if err != nil {
		j.Fail(err)
		return
	}
	p.tail.dropThrough(horizon)
	// A group with a cursor the horizon passed while it was built may miss
	// pruned commits: it is not sent as a delta (the client's pull then
	// answers sync.cursor_expired).
	for i, g := range j.req.Groups {
		for _, sub := range g.Subs {
			if sub.Cursor < horizon {
				res.Groups[i] = DeltaSections{Incomplete: true}
				break
			}
		}
	}
	j.answer(res, nil)
}

func (j *DeltaJob) requestContext() context.Context { return j.ctx }

// deltaSections builds one group's sections up to info.MaxCommitSeq.
func (p *Partition) deltaSections(ctx context.Context, info storage.PartitionInfo, g DeltaGroup, limit, budget int) (DeltaSections, error) {
	var out DeltaSections
	built := 0
	for _, sub := range g.Subs {
		t := p.cfg.Schema.Table(sub.Table)
		if t == nil || ChoosePullMode(sub.Cursor, false, info.HorizonSeq, info.MaxCommitSeq) != Incremental {
			return DeltaSections{Incomplete: true}, nil
		}
		out.Frames = append(out.Frames, &ssp2.SubStart{ID: sub.ID, Status: ssp2.SubActive, EffectiveScopes: sub.Effective})
		if sub.Cursor < info.MaxCommitSeq {
			scan, err := p.scanChanges(ctx, storage.ChangeQuery{Table: t.Name, Scopes: sub.Effective, AfterSeq: sub.Cursor,
				UpToSeq: info.MaxCommitSeq, LimitChanges: limit})
			if err != nil {
				return DeltaSections{}, err
			}
			if scan.Truncated {
				return DeltaSections{Incomplete: true}, nil
			}
			n := len(out.Frames)
			out.Frames, built, scan = appendCommits(out.Frames, built, budget, t.Name, scan)
			if scan.Truncated {
				return DeltaSections{TooLarge: true}, nil
			}
			out.Commits += len(out.Frames) - n
		}
		out.Frames = append(out.Frames, &ssp2.SubEnd{NextCursor: max(sub.Cursor, info.MaxCommitSeq)})
	}
	if built > budget {
		return DeltaSections{TooLarge: true}, nil
	}
	return out, nil
}

// Ack is one client's acknowledgement of realtime deltas through Cursor,
// on a socket of ActorID registered under log epoch LogEpoch (the epoch
// its deltas were built under).
type Ack struct {
	ClientID string
	ActorID  string
	Cursor   int64
	LogEpoch string
}

// AckJob records acknowledgements (SPEC §8.2): each raises its client's
// cursor (and the cursors of its ready registered subscriptions) to the
// acked cursor, never lowering one, and its activity timestamp to now. An
// ack is taken only from the session of the actor the clientId is bound
// to, under the partition's current log epoch (a delayed ack from before
// a rotation is dropped), and only for a client with a record (none is
// created). The acks are written back with the other buffered client
// records, as advances of the stored cursor and timestamp alone
// (storage.Clients.AdvanceClients checks actor and epoch again, in the
// write's transaction) unless a round of this process rewrites the whole
// record anyway.
type AckJob struct {
	ctx  context.Context
	acks []Ack
	completion[struct{}]
}

// NewAckJob returns the job recording acks.
func NewAckJob(ctx context.Context, acks []Ack) *AckJob {
	j := &AckJob{ctx: ctx, acks: acks}
	j.init()
	return j
}

// Wait returns once the acks are recorded (or failed), or ctx ends.
func (j *AckJob) Wait(ctx context.Context) error {
	_, err := j.wait(ctx, "")
	return err
}

// Batchable is false: the job runs alone.
func (j *AckJob) Batchable() bool { return false }

func (j *AckJob) push() *SyncJob { return nil }

func (j *AckJob) run(ctx context.Context, p *Partition) {
	now := p.cfg.Now().UnixMilli()
	for _, a := range j.acks {
		if a.LogEpoch == "" || a.LogEpoch != p.token.LogEpoch {
			continue // a session of another epoch than the one this actor serves
		}
		ce, err := p.client(ctx, a.ClientID)
		if err != nil {
			j.Fail(storageErr(err))
			return
		}
		if ce == nil || ce.rec.ActorID != a.ActorID {
			continue
		}
		if a.Cursor > ce.rec.Cursor {
			ce.rec.Cursor = a.Cursor
			ce.acked = max(ce.acked, a.Cursor) // folded into the subscriptions when read
		}
		ce.rec.UpdatedAtMs = max(ce.rec.UpdatedAtMs, now)
		p.markAdvanced(ce, a, now)
	}
	j.answer(struct{}{}, nil)
}

func (j *AckJob) requestContext() context.Context { return j.ctx }
