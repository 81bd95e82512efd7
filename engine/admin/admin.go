// Package admin is synclane's operator surface, independent of any
// transport: read-only queries over a running engine and its store
// (partitions, clients, commits, rows, scope activity, serve gate and
// checkpoints, retention, the event ring) and the two mutating actions
// (rotate a partition's log epoch, run one maintenance pass).
//
// Reads go through the storage backend's Admin role (storage.AdminReader:
// the store's read path, never a partition's write lock) and the engine's counters, so they never block
// pushes for long. Every list is paged with a cursor and bounded: a page
// holds DefaultPage entries unless asked for fewer or more, and never more
// than MaxPage. Row history and scope activity scan a bounded number of
// the newest commits (MaxHistoryScan, MaxScopeWindow) and say when they
// stopped before the start of the log.
//
// Features plug in without this package knowing them: the host registers
// a Section (server-wide stats, e.g. blob store) or a PartitionSection
// (per-partition stats, e.g. realtime sockets), and publishes events to the
// engine's ring (engine.Engine.Events).
package admin

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage"
)

// Page sizes and scan bounds.
const (
	// DefaultPage is the page size when none is asked for.
	DefaultPage = 50
	// MaxPage is the largest page (storage.AdminMaxPage).
	MaxPage = storage.AdminMaxPage
	// DefaultHistory and MaxHistory bound the commits a row history lists.
	DefaultHistory = 20
	MaxHistory     = 100
	// DefaultHistoryScan and MaxHistoryScan bound how many of the newest
	// commits a row history looks through.
	DefaultHistoryScan = 2000
	MaxHistoryScan     = 10000
	// DefaultScopeWindow and MaxScopeWindow bound how many of the newest
	// commits scope activity counts.
	DefaultScopeWindow = 1000
	MaxScopeWindow     = 10000
	// MaxScopeValues bounds the scope values scope activity returns (the
	// busiest first).
	MaxScopeValues = 200
	// scanPage is the page size of the internal commit scans.
	scanPage = 200
)

// ErrNotFound reports an unknown partition, client, commit, table or row.
var ErrNotFound = errors.New("admin: not found")

// ErrInvalid reports a malformed argument (bad table name, cursor, ...).
var ErrInvalid = errors.New("admin: invalid argument")

// Section is a server-wide block of stats a feature contributes to the
// overview (segment store, blob store, realtime hub, ...). Stats must be
// cheap and must not block for long; its result is JSON-encoded as is.
type Section struct {
	Name  string
	Stats func(ctx context.Context) (any, error)
}

// PartitionSection is a per-partition block of stats shown with a
// partition's detail (for example its realtime sockets).
type PartitionSection struct {
	Name  string
	Stats func(ctx context.Context, partition string) (any, error)
}

// Service answers admin queries for one engine. It is safe for concurrent
// use.
type Service struct {
	eng    *engine.Engine
	reader storage.AdminReader
	homes  storage.HomeNamer // nil: one database, no home to name
	now    func() time.Time

	mu        sync.RWMutex
	sections  []Section
	psections []PartitionSection
}

// New returns the admin service of eng, with the feature sections the
// engine runs with registered (FeatureSections). The engine's storage
// backend must have the Admin role (every synclane backend has it):
// without it New fails, so the admin surface is refused at start.
func New(eng *engine.Engine) (*Service, error) {
	r := eng.Backend().Admin
	if r == nil {
		return nil, errors.New("admin: the storage backend has no Admin role (storage.AdminReader)")
	}
	s := &Service{eng: eng, reader: r, homes: eng.Backend().Homes, now: eng.Now}
	s.Register(FeatureSections(eng)...)
	return s, nil
}

// Register adds server-wide sections, shown in the overview in
// registration order. A later section with the same name replaces the
// earlier one.
func (s *Service) Register(secs ...Section) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, sec := range secs {
		s.sections = slices.DeleteFunc(s.sections, func(o Section) bool { return o.Name == sec.Name })
		s.sections = append(s.sections, sec)
	}
}

// RegisterPartition adds per-partition sections (same rules as Register).
func (s *Service) RegisterPartition(secs ...PartitionSection) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, sec := range secs {
		s.psections = slices.DeleteFunc(s.psections, func(o PartitionSection) bool { return o.Name == sec.Name })
		s.psections = append(s.psections, sec)
	}
}

// Engine returns the engine the service reads.
func (s *Service) Engine() *engine.Engine { return s.eng }

// clampPage bounds a requested page size.
func clampPage(n int) int {
	if n <= 0 {
		return DefaultPage
	}
	return min(n, MaxPage)
}

// Overview is the server-wide view.
type Overview struct {
	NowMs         int64            `json:"nowMs"`
	SchemaVersion int32            `json:"schemaVersion"`
	Tables        []TableView      `json:"tables"`
	Ready         bool             `json:"ready"`
	ReadyError    string           `json:"readyError,omitempty"`
	Requests      any              `json:"requests"`
	Actors        any              `json:"actors"`
	Retention     RetentionView    `json:"retention"`
	Segments      any              `json:"segments"`
	Checkpoints   []CheckpointView `json:"checkpoints"`
	Events        any              `json:"events"`
	Sections      []SectionView    `json:"sections"`
	// Cluster is this member and its view in cluster mode (absent in
	// single-process mode).
	Cluster *ClusterSummary `json:"cluster,omitempty"`
}

// TableView describes one synced table.
type TableView struct {
	Name    string   `json:"name"`
	Columns []string `json:"columns"`
	PK      string   `json:"primaryKey"`
	Scopes  []string `json:"scopes"`
}

// RetentionView is the retention policy and the pruning counters.
type RetentionView struct {
	ActiveWindowMs     int64 `json:"activeWindowMs"`
	AgeForceMs         int64 `json:"ageForceMs"`
	MinRetainedCommits int64 `json:"minRetainedCommits"`
	Stats              any   `json:"stats"`
}

// CheckpointView is one backfill checkpoint.
type CheckpointView struct {
	Partition     string `json:"partition"`
	Name          string `json:"name"`
	SchemaVersion int32  `json:"schemaVersion"`
	State         string `json:"state"`
	Watermark     int64  `json:"watermark"`
	OwnerEpoch    int64  `json:"ownerEpoch"`
	ObservedRows  int64  `json:"observedRows"`
	UpdatedAtMs   int64  `json:"updatedAtMs"`
}

// SectionView is one registered section's stats (or its error in words).
type SectionView struct {
	Name  string `json:"name"`
	Stats any    `json:"stats,omitempty"`
	Error string `json:"error,omitempty"`
}

// Overview returns the server-wide view: schema, gate, counters, retention,
// segments, checkpoints, event ring and every registered section.
func (s *Service) Overview(ctx context.Context) (*Overview, error) {
	sch := s.eng.Schema()
	o := &Overview{NowMs: s.now().UnixMilli(), SchemaVersion: sch.Version, Ready: true,
		Requests: s.eng.Metrics(), Actors: s.eng.ActorStats(), Segments: s.eng.Segments().Stats(),
		Events: s.eng.Events().Stats(), Cluster: clusterSummary(s.eng)}
	for _, t := range sch.Tables {
		o.Tables = append(o.Tables, tableView(t.Name, t.Columns, t.PK, scopeVars(t.Scopes)))
	}
	if err := s.eng.Ready(ctx); err != nil {
		o.Ready, o.ReadyError = false, err.Error()
	}
	pol := s.eng.Retention().Policy()
	o.Retention = RetentionView{ActiveWindowMs: pol.ActiveWindowMs, AgeForceMs: pol.AgeForceMs,
		MinRetainedCommits: pol.MinRetainedCommits, Stats: s.eng.Metrics().Retention}
	cps, err := s.eng.Backend().Checkpoints.ReadCheckpoints(ctx)
	if err != nil {
		return nil, fmt.Errorf("admin: overview: checkpoints: %w", err)
	}
	o.Checkpoints = checkpointViews(cps, "")
	s.mu.RLock()
	secs := slices.Clone(s.sections)
	s.mu.RUnlock()
	for _, sec := range secs {
		v := SectionView{Name: sec.Name}
		if st, err := sec.Stats(ctx); err != nil {
			v.Error = err.Error()
		} else {
			v.Stats = st
		}
		o.Sections = append(o.Sections, v)
	}
	return o, nil
}

func tableView(name string, cols []ssp2.Column, pk int, scopes []string) TableView {
	v := TableView{Name: name, PK: cols[pk].Name, Scopes: scopes}
	for _, c := range cols {
		v.Columns = append(v.Columns, c.Name)
	}
	return v
}

func checkpointViews(cps []storage.Checkpoint, partition string) []CheckpointView {
	out := []CheckpointView{}
	for _, c := range cps {
		if partition != "" && c.Partition != partition {
			continue
		}
		out = append(out, CheckpointView{Partition: c.Partition, Name: c.Name, SchemaVersion: c.SchemaVersion,
			State: string(c.State), Watermark: c.Watermark, OwnerEpoch: c.OwnerEpoch, ObservedRows: c.ObservedRows,
			UpdatedAtMs: c.UpdatedAtMs})
	}
	return out
}

// RotateEpoch rotates the partition's log epoch through its actor (see
// engine.Engine.RotateEpoch). An unknown partition is ErrNotFound: the
// rotation would create it.
func (s *Service) RotateEpoch(ctx context.Context, partition string) (string, error) {
	info, err := s.eng.Backend().Log.ReadPartition(ctx, partition)
	if err != nil {
		return "", fmt.Errorf("admin: rotate epoch: %w", err)
	}
	if !info.Exists {
		return "", fmt.Errorf("%w: partition %q", ErrNotFound, partition)
	}
	return s.eng.RotateEpoch(ctx, partition)
}

// MaintenanceView is the outcome of one maintenance pass.
type MaintenanceView struct {
	Skipped         bool           `json:"skipped"`
	Checked         int            `json:"checked"`
	SegmentsExpired int            `json:"segmentsExpired"`
	TookMs          float64        `json:"tookMs"`
	Pruned          []PruneRunView `json:"pruned"`
	DryRun          bool           `json:"dryRun"`
}

// PruneRunView is one partition a maintenance pass pruned.
type PruneRunView struct {
	Partition string `json:"partition"`
	Horizon   int64  `json:"horizon"`
	Commits   int64  `json:"commits"`
}

// Maintenance runs one maintenance pass now (engine.MaintenancePass).
func (s *Service) Maintenance(ctx context.Context, dryRun bool) (*MaintenanceView, error) {
	rep, err := s.eng.Retention().MaintenancePass(ctx, dryRun)
	if err != nil {
		return nil, fmt.Errorf("admin: maintenance pass: %w", err)
	}
	v := &MaintenanceView{Skipped: rep.Skipped, Checked: rep.Checked, SegmentsExpired: rep.SegmentsExpired,
		TookMs: float64(rep.Took) / float64(time.Millisecond), Pruned: []PruneRunView{}, DryRun: dryRun}
	for _, p := range rep.Pruned {
		v.Pruned = append(v.Pruned, pruneRunView(p))
	}
	s.emitMaintenance(v)
	return v, nil
}

// scopeVars lists a table's scope variables.
func scopeVars(svs []schema.ScopeVar) []string {
	out := []string{}
	for _, sv := range svs {
		out = append(out, sv.Var)
	}
	return out
}
