package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/engine/events"
	"github.com/synclane/synclane/engine/lease"
	"github.com/synclane/synclane/engine/reactions"
	partitionpkg "github.com/synclane/synclane/partition"
	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage"
)

// Views of the features that plug into the engine (durable reactions,
// auth leases, blobs). A read of a feature the engine runs without
// answers "enabled": false (or no lease) rather than failing, so the
// console can say so in words; an action on it is ErrFeatureOff.

// LeaseRevoked is the event kind of an operator's lease revocation.
const LeaseRevoked events.Kind = "lease.revoked"

// ErrFeatureOff reports an action on a feature the engine runs without
// (no reaction handlers, leases off). The transport maps it to 409.
var ErrFeatureOff = errors.New("admin: feature is off")

// ReactionView is one stored reaction. State is "pending" (never
// attempted, or being attempted for the first time), "retrying" (pending
// after at least one failed attempt) or "dead" (dead-lettered).
type ReactionView struct {
	ID              int64  `json:"id"`
	Partition       string `json:"partition"`
	CommitSeq       int64  `json:"commitSeq"`
	Name            string `json:"name"`
	State           string `json:"state"`
	Attempts        int    `json:"attempts"`
	MaxAttempts     int    `json:"maxAttempts"`
	NextAttemptAtMs int64  `json:"nextAttemptAtMs"`
	LastError       string `json:"lastError"`
	PayloadBytes    int    `json:"payloadBytes"`
	CreatedAtMs     int64  `json:"createdAtMs"`
	UpdatedAtMs     int64  `json:"updatedAtMs"`
}

// ReactionsView is a page of reactions with the queue's counters.
type ReactionsView struct {
	Enabled bool             `json:"enabled"`
	Stats   *reactions.Stats `json:"stats,omitempty"`
	Items   []ReactionView   `json:"items"`
	Next    string           `json:"next"`
}

// ReactionStates are the state filters Reactions accepts ("" is all).
var ReactionStates = []string{"", "pending", "retrying", "dead"}

// Reactions returns a page of stored reactions by ascending id, after the
// cursor after (a reaction id, "" from the start), of one partition when
// partition is non-empty, of one state when state is non-empty. The page
// holds at most limit entries (DefaultPage when 0, at most MaxPage); with
// the "retrying" filter a page may hold fewer entries than asked while
// Next is non-empty (retrying is a filter over the stored pending state).
// An engine without reaction handlers answers Enabled false, no items.
func (s *Service) Reactions(ctx context.Context, partition, state, after string, limit int) (*ReactionsView, error) {
	f := storage.ReactionFilter{Partition: partition, Limit: clampPage(limit)}
	switch state {
	case "":
	case "pending", "retrying":
		p := storage.ReactionPending
		f.State = &p
	case "dead":
		d := storage.ReactionDead
		f.State = &d
	default:
		return nil, fmt.Errorf("%w: reaction state %q (want pending, retrying or dead)", ErrInvalid, state)
	}
	if after != "" {
		id, err := strconv.ParseInt(after, 10, 64)
		if err != nil || id < 0 {
			return nil, fmt.Errorf("%w: reaction cursor %q is not a reaction id", ErrInvalid, after)
		}
		f.AfterID = id
	}
	st, err := s.eng.Reactions().Stats(ctx)
	if errors.Is(err, reactions.ErrNoReactions) {
		return &ReactionsView{Items: []ReactionView{}}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("admin: reaction stats: %w", err)
	}
	rs, err := s.eng.Reactions().List(ctx, f)
	if err != nil {
		return nil, fmt.Errorf("admin: reactions: %w", err)
	}
	v := &ReactionsView{Enabled: true, Stats: &st, Items: []ReactionView{}}
	for _, r := range rs {
		rv := reactionView(r)
		if state == "retrying" && rv.State != "retrying" {
			continue
		}
		v.Items = append(v.Items, rv)
	}
	if len(rs) == f.Limit {
		v.Next = strconv.FormatInt(rs[len(rs)-1].ID, 10)
	}
	return v, nil
}

func reactionView(r storage.Reaction) ReactionView {
	state := "pending"
	switch {
	case r.State == storage.ReactionDead:
		state = "dead"
	case r.Attempts > 0 && r.LastError != "":
		state = "retrying"
	}
	return ReactionView{ID: r.ID, Partition: r.Partition, CommitSeq: r.CommitSeq, Name: r.Name, State: state,
		Attempts: r.Attempts, MaxAttempts: r.MaxAttempts, NextAttemptAtMs: r.NextAttemptAtMs, LastError: r.LastError,
		PayloadBytes: len(r.Payload), CreatedAtMs: r.CreatedAtMs, UpdatedAtMs: r.UpdatedAtMs}
}

// LeaseView is a client's auth lease as stored (its signature is checked
// when it is used, not here).
type LeaseView struct {
	LeaseID     string `json:"leaseId"`
	Actor       string `json:"actor"`
	IssuedAtMs  int64  `json:"issuedAtMs"`
	ExpiresAtMs int64  `json:"expiresAtMs"`
	RevokedAtMs int64  `json:"revokedAtMs"`
	// AllowedScopes is the resolver's grant at the last slide (JSON).
	AllowedScopes json.RawMessage `json:"allowedScopes"`
}

// ClientLease returns the stored lease of clientID in partition: nil
// when the client has none or when leases are off (an engine with leases
// on has the Leases role).
func (s *Service) ClientLease(ctx context.Context, partition, clientID string) (*LeaseView, error) {
	ls := s.eng.Backend().Leases
	if !s.eng.Leases().Enabled() || ls == nil {
		return nil, nil
	}
	rec, err := ls.GetLease(ctx, partition, clientID)
	if err != nil {
		return nil, fmt.Errorf("admin: lease of client %q: %w", clientID, err)
	}
	if rec == nil {
		return nil, nil
	}
	v := &LeaseView{LeaseID: rec.LeaseID, Actor: rec.ActorID, IssuedAtMs: rec.IssuedAtMs, ExpiresAtMs: rec.ExpiresAtMs,
		RevokedAtMs: rec.RevokedAtMs, AllowedScopes: json.RawMessage("null")}
	if json.Valid(rec.AllowedScopes) {
		v.AllowedScopes = rec.AllowedScopes
	}
	return v, nil
}

// RevokeLease revokes the auth lease of clientID in partition
// (lease.Service.Revoke) and returns its id. A client without a lease
// is ErrNotFound; an engine without leases, ErrFeatureOff. The revocation
// is published to the event ring.
func (s *Service) RevokeLease(ctx context.Context, partition, clientID string) (string, error) {
	id, err := s.eng.Leases().Revoke(ctx, partition, clientID)
	switch {
	case errors.Is(err, lease.ErrLeasesOff):
		return "", fmt.Errorf("%w: %w", ErrFeatureOff, err)
	case errors.Is(err, lease.ErrNoLease):
		return "", fmt.Errorf("%w: client %q in partition %q has no auth lease", ErrNotFound, clientID, partition)
	case err != nil:
		return "", fmt.Errorf("admin: revoke lease: %w", err)
	}
	s.eng.Events().Emit(events.Event{Kind: LeaseRevoked, Source: "admin", Partition: partition,
		Message: "auth lease " + id + " of client " + clientID + " revoked"})
	return id, nil
}

// BlobSection is the "blobs" section: this process's blob counters
// (blobs.Stats), the size cap, and, when the engine's storage
// backend has the Blobs role, the stored blobs by state with the present
// bytes and the reference entries ("stored"; a failed count is
// "storedError", the counters are still shown). Register it when the
// engine has a blob store (blobs.Service.Enabled).
func BlobSection(eng *engine.Engine) Section {
	bc := eng.Backend().Blobs
	return Section{Name: "blobs", Stats: func(ctx context.Context) (any, error) {
		out := map[string]any{"maxBlobBytes": eng.Blobs().MaxBytes(), "counters": eng.Blobs().Stats()}
		if bc != nil {
			if c, err := bc.CountBlobs(ctx); err != nil {
				out["storedError"] = err.Error()
			} else {
				out["stored"] = c
			}
		}
		return out, nil
	}}
}

// ReactionSection is the "reactions" section: the queue's sizes and this
// process's delivery counters. Register it when reactions are on.
func ReactionSection(eng *engine.Engine) Section {
	return Section{Name: "reactions", Stats: func(ctx context.Context) (any, error) {
		st, err := eng.Reactions().Stats(ctx)
		if err != nil {
			return nil, fmt.Errorf("reaction stats: %w", err)
		}
		return st, nil
	}}
}

// FeatureSections returns the sections of the features eng runs with:
// "reactions" when it has reaction handlers, "blobs" when it has a blob
// store, "operations" when it has registered remote operations.
func FeatureSections(eng *engine.Engine) []Section {
	var out []Section
	if _, err := eng.Reactions().Stats(context.Background()); !errors.Is(err, reactions.ErrNoReactions) {
		out = append(out, ReactionSection(eng))
	}
	if eng.Blobs().Enabled() {
		out = append(out, BlobSection(eng))
	}
	if r := eng.Operations().Registered(); len(r.Queries)+len(r.Commands) > 0 {
		out = append(out, OperationSection(eng))
	}
	return out
}

// OperationSection is the "operations" section: the registered remote
// queries and commands and this process's operation counters (executed
// by kind, refused by kind and code). Register it when the engine has
// registered operations.
func OperationSection(eng *engine.Engine) Section {
	return Section{Name: "operations", Stats: func(context.Context) (any, error) {
		s := eng.Operations().Stats()
		return map[string]any{"registered": eng.Operations().Registered(), "executed": s.Executed, "refused": s.Refused}, nil
	}}
}

// MaxBlobRowRefs bounds the referencing rows a row's blob view lists per
// blob.
const MaxBlobRowRefs = 20

// RowBlobView is one blob a row's blob_ref column names: the blob's
// metadata (State "missing" when the store has none) and up to
// MaxBlobRowRefs rows of the same partition referencing it (table, row id
// order).
type RowBlobView struct {
	Column     string   `json:"column"`
	BlobID     string   `json:"blobId"`
	State      string   `json:"state"`
	ByteLength int64    `json:"byteLength"`
	MediaType  string   `json:"mediaType"`
	Rows       []RowRef `json:"rows"`
}

// rowBlobs lists the blobs of a stored row's blob_ref columns (none when
// the storage backend has no Blobs role).
func (s *Service) rowBlobs(ctx context.Context, partition string, t *schema.Table, values ssp2.Row) ([]RowBlobView, error) {
	bi := s.eng.Backend().Blobs
	if bi == nil {
		return nil, nil
	}
	var out []RowBlobView
	for i, c := range t.Columns {
		if c.Type != ssp2.TypeBlobRef || i >= len(values) {
			continue
		}
		id, ok := partitionpkg.BlobIDOf(values[i])
		if !ok {
			continue
		}
		v := RowBlobView{Column: c.Name, BlobID: id, State: "missing", Rows: []RowRef{}}
		m, err := bi.GetBlob(ctx, id)
		if err != nil {
			return nil, fmt.Errorf("blob %s: %w", id, err)
		}
		if m != nil {
			v.State, v.ByteLength, v.MediaType = blobStateName(m.State), m.ByteLength, m.MediaType
		}
		refs, err := bi.BlobRefs(ctx, partition, id, MaxBlobRowRefs)
		if err != nil {
			return nil, fmt.Errorf("blob %s: references: %w", id, err)
		}
		for _, r := range refs {
			v.Rows = append(v.Rows, RowRef{Table: r.Table, RowID: r.RowID})
		}
		out = append(out, v)
	}
	return out, nil
}

func blobStateName(st storage.BlobState) string {
	switch st {
	case storage.BlobPresent:
		return "present"
	case storage.BlobUploading:
		return "uploading"
	case storage.BlobDeleting:
		return "deleting"
	}
	return "unknown"
}

// ReactionAction is a dead-letter action: "redrive" (pending again with a
// full set of attempts, due now) or "delete" (removed for good). An id
// that is not a dead-lettered reaction is ErrNotFound; an engine without
// reaction handlers, ErrFeatureOff. The action is published to the event
// ring.
func (s *Service) ReactionAction(ctx context.Context, id, action string) error {
	n, err := strconv.ParseInt(id, 10, 64)
	if err != nil || n < 1 {
		return fmt.Errorf("%w: reaction id %q is not a positive integer", ErrInvalid, id)
	}
	switch action {
	case "redrive":
		err = s.eng.Reactions().Redrive(ctx, n)
	case "delete":
		err = s.eng.Reactions().DeleteDead(ctx, n)
	default:
		return fmt.Errorf("%w: reaction action %q (want redrive or delete)", ErrInvalid, action)
	}
	switch {
	case errors.Is(err, reactions.ErrNoReactions):
		return fmt.Errorf("%w: %w", ErrFeatureOff, err)
	case errors.Is(err, reactions.ErrNotDeadLettered):
		return fmt.Errorf("%w: reaction %d is not dead-lettered (unknown, pending or already removed)", ErrNotFound, n)
	case err != nil:
		return fmt.Errorf("admin: %s reaction %d: %w", action, n, err)
	}
	s.eng.Events().Emit(events.Event{Kind: ReactionActed, Source: "admin", Message: fmt.Sprintf("dead-lettered reaction %d: %s", n, action)})
	return nil
}

// ReactionActed is the event kind of an operator's dead-letter action.
const ReactionActed events.Kind = "reaction.dead_letter_action"
