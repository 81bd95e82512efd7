package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strconv"

	"github.com/synclane/synclane/engine/events"
	"github.com/synclane/synclane/engine/retention"
	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage"
)

func pruneRunView(p retention.PruneReport) PruneRunView {
	return PruneRunView{Partition: p.Partition, Horizon: p.HorizonAfter, Commits: p.Commits}
}

// emitMaintenance reports an operator's maintenance pass.
func (s *Service) emitMaintenance(v *MaintenanceView) {
	msg := fmt.Sprintf("maintenance pass: %d partitions checked, %d pruned, %d segments expired", v.Checked, len(v.Pruned), v.SegmentsExpired)
	if v.Skipped {
		msg = "maintenance pass skipped: another pass holds the maintenance lock"
	}
	s.eng.Events().Emit(events.Event{Kind: events.MaintenanceRun, Source: "admin", Message: msg, DurationMs: v.TookMs})
}

// PartitionView is one partition of the overview.
type PartitionView struct {
	Partition     string `json:"partition"`
	Exists        bool   `json:"exists"`
	LogEpoch      string `json:"logEpoch"`
	EpochRequired bool   `json:"epochRequired"`
	MaxSeq        int64  `json:"maxSeq"`
	Horizon       int64  `json:"horizon"`
	// RetainedCommits is MaxSeq - Horizon.
	RetainedCommits int64 `json:"retainedCommits"`
	Clients         int64 `json:"clients"`
	// Live reports a running partition actor (false: passivated or never
	// started in this process).
	Live bool `json:"live"`
	// LastActivityMs is the latest of: the newest commit, the newest client
	// record write, the last job routed to the live actor (0: none known).
	LastActivityMs int64 `json:"lastActivityMs"`
	LastCommitMs   int64 `json:"lastCommitMs"`
	// Owner (cluster mode only) is the member that owns the partition by
	// this member's current view ("" when the view has no member).
	// OwnedElsewhere reports that this member does not own it: its actor
	// runs (or passivates) on Owner, so Live says nothing about it here.
	Owner          string `json:"owner,omitempty"`
	OwnedElsewhere bool   `json:"ownedElsewhere,omitempty"`
	// Home (partitions spread over several PostgreSQL databases only)
	// names the database holding the partition ("" with one database, or
	// when the directory could not be read).
	Home string `json:"home,omitempty"`
}

// Page is one page of a list; Next is the cursor of the following page
// ("" when this is the last one).
type Page[T any] struct {
	Items []T    `json:"items"`
	Next  string `json:"next"`
}

func (s *Service) partitionView(ctx context.Context, o storage.PartitionOverview) PartitionView {
	v := PartitionView{Partition: o.Partition, Exists: o.Exists, LogEpoch: o.LogEpoch, EpochRequired: o.EpochRequired,
		MaxSeq: o.MaxCommitSeq, Horizon: o.HorizonSeq, RetainedCommits: o.MaxCommitSeq - o.HorizonSeq, Clients: o.Clients,
		LastCommitMs: o.LastCommitAtMs, LastActivityMs: max(o.LastCommitAtMs, o.LastClientAtMs)}
	live, last := s.eng.PartitionLive(o.Partition)
	v.Live = live
	if s.eng.Clustered() {
		v.Owner, _ = s.eng.Owner(o.Partition)
		v.OwnedElsewhere = !s.eng.Owns(o.Partition)
	}
	if !last.IsZero() {
		v.LastActivityMs = max(v.LastActivityMs, last.UnixMilli())
	}
	if s.homes != nil {
		v.Home, _ = s.homes.PartitionHome(ctx, o.Partition) // "" when the directory cannot be read: the rest of the view stands
	}
	return v
}

// Partitions returns a page of partitions in name order after the cursor.
func (s *Service) Partitions(ctx context.Context, after string, limit int) (*Page[PartitionView], error) {
	limit = clampPage(limit)
	ps, err := s.reader.AdminPartitions(ctx, after, limit)
	if err != nil {
		return nil, fmt.Errorf("admin: partitions: %w", err)
	}
	out := &Page[PartitionView]{Items: []PartitionView{}}
	for _, p := range ps {
		out.Items = append(out.Items, s.partitionView(ctx, p))
	}
	if len(ps) == limit {
		out.Next = ps[len(ps)-1].Partition
	}
	return out, nil
}

// PartitionDetail is one partition with its serve gate, checkpoints and
// registered per-partition sections.
type PartitionDetail struct {
	PartitionView
	Gate        GateView         `json:"gate"`
	Checkpoints []CheckpointView `json:"checkpoints"`
	Sections    []SectionView    `json:"sections"`
}

// GateView is the serve gate as a request of this partition sees it.
type GateView struct {
	Open                bool     `json:"open"`
	StoredSchemaVersion int32    `json:"storedSchemaVersion"`
	RunningVersion      int32    `json:"runningVersion"`
	Pending             []string `json:"pending"`
}

// Partition returns one partition's detail; ErrNotFound when it does not
// exist.
func (s *Service) Partition(ctx context.Context, name string) (*PartitionDetail, error) {
	o, err := s.overviewOf(ctx, name)
	if err != nil {
		return nil, err
	}
	d := &PartitionDetail{PartitionView: s.partitionView(ctx, o)}
	running := s.eng.Schema().Version
	g, err := s.eng.Backend().Checkpoints.ReadServeGate(ctx, name, running)
	if err != nil {
		return nil, fmt.Errorf("admin: partition %q: serve gate: %w", name, err)
	}
	d.Gate = GateView{StoredSchemaVersion: g.StoredSchemaVersion, RunningVersion: running, Pending: []string{}}
	for _, p := range g.Pending {
		d.Gate.Pending = append(d.Gate.Pending, p.Partition+"/"+p.Name)
	}
	// Whether this process may serve is the engine's call (it knows its own
	// declarations); Ready applies the same rule every request does.
	d.Gate.Open = s.eng.Ready(ctx) == nil
	cps, err := s.eng.Backend().Checkpoints.ReadCheckpoints(ctx)
	if err != nil {
		return nil, fmt.Errorf("admin: partition %q: checkpoints: %w", name, err)
	}
	d.Checkpoints = checkpointViews(cps, name)
	s.mu.RLock()
	secs := slices.Clone(s.psections)
	s.mu.RUnlock()
	d.Sections = []SectionView{}
	for _, sec := range secs {
		v := SectionView{Name: sec.Name}
		if st, err := sec.Stats(ctx, name); err != nil {
			v.Error = err.Error()
		} else {
			v.Stats = st
		}
		d.Sections = append(d.Sections, v)
	}
	return d, nil
}

// overviewOf reads one partition's overview entry; ErrNotFound when the
// partition does not exist.
func (s *Service) overviewOf(ctx context.Context, name string) (storage.PartitionOverview, error) {
	o, err := s.reader.AdminPartition(ctx, name)
	if err != nil {
		return o, fmt.Errorf("admin: partition %q: %w", name, err)
	}
	if !o.Exists {
		return o, fmt.Errorf("%w: partition %q", ErrNotFound, name)
	}
	return o, nil
}

// ClientView is one client record.
type ClientView struct {
	ClientID    string `json:"clientId"`
	Actor       string `json:"actor"`
	Cursor      int64  `json:"cursor"`
	WireVersion uint16 `json:"wireVersion"`
	LastSeenMs  int64  `json:"lastSeenMs"`
	// Subscriptions is the engine's stored encoding of the client's
	// registered subscriptions (JSON), shown as is.
	Subscriptions json.RawMessage `json:"subscriptions"`
	// SubscriptionCount counts them when they decode as a JSON array.
	SubscriptionCount int `json:"subscriptionCount"`
	// Lease is the client's auth lease (only in a client's detail, when
	// leases are on and it has one).
	Lease *LeaseView `json:"lease,omitempty"`
}

func clientView(c storage.ClientRecord) ClientView {
	v := ClientView{ClientID: c.ClientID, Actor: c.ActorID, Cursor: c.Cursor, WireVersion: c.WireVersion,
		LastSeenMs: c.UpdatedAtMs, Subscriptions: json.RawMessage("null")}
	if len(c.Subscriptions) > 0 && json.Valid(c.Subscriptions) {
		v.Subscriptions = c.Subscriptions
		var arr []json.RawMessage
		if json.Unmarshal(c.Subscriptions, &arr) == nil {
			v.SubscriptionCount = len(arr)
		}
	}
	return v
}

// Clients returns a page of the partition's clients in clientId order.
func (s *Service) Clients(ctx context.Context, partition, after string, limit int) (*Page[ClientView], error) {
	limit = clampPage(limit)
	cs, err := s.reader.AdminClients(ctx, partition, after, limit)
	if err != nil {
		return nil, fmt.Errorf("admin: clients of %q: %w", partition, err)
	}
	out := &Page[ClientView]{Items: []ClientView{}}
	for _, c := range cs {
		out.Items = append(out.Items, clientView(c))
	}
	if len(cs) == limit {
		out.Next = cs[len(cs)-1].ClientID
	}
	return out, nil
}

// Client returns one client; ErrNotFound when it has no record.
func (s *Service) Client(ctx context.Context, partition, clientID string) (*ClientView, error) {
	c, err := s.eng.Backend().Clients.GetClient(ctx, partition, clientID)
	if err != nil {
		return nil, fmt.Errorf("admin: client %q: %w", clientID, err)
	}
	if c == nil {
		return nil, fmt.Errorf("%w: client %q in partition %q", ErrNotFound, clientID, partition)
	}
	v := clientView(*c)
	if v.Lease, err = s.ClientLease(ctx, partition, clientID); err != nil {
		return nil, err
	}
	return &v, nil
}

// CommitView is one commit's summary.
type CommitView struct {
	Seq            int64    `json:"seq"`
	CreatedAtMs    int64    `json:"createdAtMs"`
	Actor          string   `json:"actor"`
	ClientID       string   `json:"clientId"`
	ClientCommitID string   `json:"clientCommitId"`
	Tables         []string `json:"tables"`
	Changes        int      `json:"changes"`
	// Rows names the first maxRowRefs rows the commit changed.
	Rows []RowRef `json:"rows"`
}

// RowRef names one changed row.
type RowRef struct {
	Table string `json:"table"`
	RowID string `json:"rowId"`
	Op    string `json:"op"`
}

// maxRowRefs bounds CommitView.Rows.
const maxRowRefs = 5

func commitView(c storage.CommitRecord) CommitView {
	v := CommitView{Seq: c.Seq, CreatedAtMs: c.CreatedAtMs, Actor: c.ActorID, ClientID: c.ClientID,
		ClientCommitID: c.ClientCommitID, Changes: len(c.Changes), Tables: []string{}, Rows: []RowRef{}}
	for _, ch := range c.Changes {
		if !slices.Contains(v.Tables, ch.Table) {
			v.Tables = append(v.Tables, ch.Table)
		}
		if len(v.Rows) < maxRowRefs {
			op := "upsert"
			if ch.Op == ssp2.OpDelete {
				op = "delete"
			}
			v.Rows = append(v.Rows, RowRef{Table: ch.Table, RowID: ch.RowID, Op: op})
		}
	}
	return v
}

// Commits returns a page of the partition's retained commits, newest
// first, below the cursor (a decimal seq; "" for the newest). With a
// clientID, only that client's commits are listed, looked for among at
// most DefaultHistoryScan commits per page (Next then continues the scan).
func (s *Service) Commits(ctx context.Context, partition, before string, limit int, clientID string) (*Page[CommitView], error) {
	limit = clampPage(limit)
	var bseq int64
	if before != "" {
		n, err := strconv.ParseInt(before, 10, 64)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%w: cursor %q is not a commit seq", ErrInvalid, before)
		}
		bseq = n
	}
	out := &Page[CommitView]{Items: []CommitView{}}
	if clientID == "" {
		cs, err := s.reader.AdminCommits(ctx, partition, bseq, limit)
		if err != nil {
			return nil, fmt.Errorf("admin: commits of %q: %w", partition, err)
		}
		for _, c := range cs {
			out.Items = append(out.Items, commitView(c))
		}
		if len(cs) == limit && cs[len(cs)-1].Seq > 1 {
			out.Next = strconv.FormatInt(cs[len(cs)-1].Seq, 10)
		}
		return out, nil
	}
	scanned, lastSeq := 0, int64(0)
	for scanned < DefaultHistoryScan {
		cs, err := s.reader.AdminCommits(ctx, partition, bseq, scanPage)
		if err != nil {
			return nil, fmt.Errorf("admin: commits of client %q: %w", clientID, err)
		}
		for _, c := range cs {
			scanned++
			lastSeq = c.Seq
			if c.ClientID == clientID {
				out.Items = append(out.Items, commitView(c))
				if len(out.Items) == limit {
					if c.Seq > 1 {
						out.Next = strconv.FormatInt(c.Seq, 10)
					}
					return out, nil
				}
			}
		}
		if len(cs) < scanPage {
			return out, nil
		}
		bseq = lastSeq
	}
	if lastSeq > 1 {
		out.Next = strconv.FormatInt(lastSeq, 10)
	}
	return out, nil
}

// ChangeView is one change of a commit with its row decoded.
type ChangeView struct {
	Table      string            `json:"table"`
	RowID      string            `json:"rowId"`
	Op         string            `json:"op"`
	RowVersion int64             `json:"rowVersion,omitempty"`
	Scopes     map[string]string `json:"scopes"`
	// Row holds the upserted values by column (bytes and crdt values are
	// base64 strings); nil for deletes.
	Row map[string]any `json:"row,omitempty"`
	// RowError says why the stored row bytes could not be decoded.
	RowError string `json:"rowError,omitempty"`
}

// CommitDetail is one commit with all its changes.
type CommitDetail struct {
	CommitView
	ChangeList []ChangeView `json:"changeList"`
}

// Commit returns one retained commit with its changes; ErrNotFound when it
// is not retained (pruned or never made).
func (s *Service) Commit(ctx context.Context, partition string, seq int64) (*CommitDetail, error) {
	cs, err := s.reader.AdminCommits(ctx, partition, seq+1, 1)
	if err != nil {
		return nil, fmt.Errorf("admin: commit %d of %q: %w", seq, partition, err)
	}
	if len(cs) == 0 || cs[0].Seq != seq {
		return nil, fmt.Errorf("%w: commit %d of partition %q is not retained", ErrNotFound, seq, partition)
	}
	d := &CommitDetail{CommitView: commitView(cs[0]), ChangeList: []ChangeView{}}
	for _, ch := range cs[0].Changes {
		d.ChangeList = append(d.ChangeList, s.changeView(ch))
	}
	return d, nil
}

func (s *Service) changeView(ch storage.ChangeRecord) ChangeView {
	v := ChangeView{Table: ch.Table, RowID: ch.RowID, Op: "upsert", RowVersion: ch.RowVersion, Scopes: ch.Scopes}
	if v.Scopes == nil {
		v.Scopes = map[string]string{}
	}
	if ch.Op == ssp2.OpDelete {
		v.Op = "delete"
		return v
	}
	t := s.eng.Schema().Table(ch.Table)
	if t == nil {
		v.RowError = "table " + ch.Table + " is not in the running schema"
		return v
	}
	row, err := ssp2.NewRowCodec(t.Columns).Decode(ch.Row)
	if err != nil {
		v.RowError = "stored row bytes do not decode with the running schema: " + err.Error()
		return v
	}
	v.Row = rowMap(t, row)
	return v
}

func rowMap(t *schema.Table, row ssp2.Row) map[string]any {
	m := make(map[string]any, len(t.Columns))
	for i, c := range t.Columns {
		if i < len(row) {
			m[c.Name] = row[i]
		}
	}
	return m
}

// RowDetail is one stored row with the commits that touched it.
type RowDetail struct {
	Table   string            `json:"table"`
	RowID   string            `json:"rowId"`
	Exists  bool              `json:"exists"`
	Version int64             `json:"version,omitempty"`
	Values  map[string]any    `json:"values,omitempty"`
	Scopes  map[string]string `json:"scopes"`
	// History lists the commits (newest first) among the newest
	// ScannedCommits that changed the row, with the change each made.
	History []RowChange `json:"history"`
	// ScannedCommits is how many of the newest commits were looked at;
	// Complete is true when that reached the oldest retained commit (older
	// history was pruned, not skipped).
	ScannedCommits int  `json:"scannedCommits"`
	Complete       bool `json:"complete"`
	// Blobs lists the blobs the stored row's blob_ref columns name, with
	// the partition's rows referencing each (features.go).
	Blobs []RowBlobView `json:"blobs,omitempty"`
}

// RowChange is one commit's change of a row.
type RowChange struct {
	CommitView
	Change ChangeView `json:"change"`
}

// Row returns the stored row (values, version, scopes) and its history
// from the newest scan commits (<= 0: DefaultHistoryScan; at most
// MaxHistoryScan), at most limit entries (<= 0: DefaultHistory; at most
// MaxHistory). A row that no longer exists (deleted) still has a history.
func (s *Service) Row(ctx context.Context, partition, table, rowID string, limit, scan int) (*RowDetail, error) {
	t := s.eng.Schema().Table(table)
	if t == nil {
		return nil, fmt.Errorf("%w: table %q is not in the schema", ErrNotFound, table)
	}
	if limit <= 0 {
		limit = DefaultHistory
	}
	limit = min(limit, MaxHistory)
	if scan <= 0 {
		scan = DefaultHistoryScan
	}
	scan = min(scan, MaxHistoryScan)
	rec, err := s.reader.AdminRow(ctx, partition, t, rowID)
	if err != nil {
		return nil, fmt.Errorf("admin: row %s/%q: %w", table, rowID, err)
	}
	d := &RowDetail{Table: table, RowID: rowID, Scopes: map[string]string{}, History: []RowChange{}}
	if rec != nil {
		d.Exists, d.Version, d.Values = true, rec.Version, rowMap(t, rec.Values)
		for _, sv := range t.Scopes {
			if sv.Column < len(rec.Values) && rec.Values[sv.Column] != nil {
				d.Scopes[sv.Var] = fmt.Sprint(rec.Values[sv.Column])
			}
		}
		if d.Blobs, err = s.rowBlobs(ctx, partition, t, rec.Values); err != nil {
			return nil, fmt.Errorf("admin: row %s/%q: %w", table, rowID, err)
		}
	}
	err = s.scanCommits(ctx, partition, scan, func(c storage.CommitRecord) bool {
		for _, ch := range c.Changes {
			if ch.Table == table && ch.RowID == rowID {
				d.History = append(d.History, RowChange{CommitView: commitView(c), Change: s.changeView(ch)})
				break
			}
		}
		return len(d.History) < limit
	}, &d.ScannedCommits, &d.Complete)
	if err != nil {
		return nil, fmt.Errorf("admin: row %s/%q: history: %w", table, rowID, err)
	}
	if !d.Exists && len(d.History) == 0 {
		return nil, fmt.Errorf("%w: row %q of table %s in partition %q (not stored, no retained change among the newest %d commits)", ErrNotFound, rowID, table, partition, d.ScannedCommits)
	}
	return d, nil
}

// scanCommits walks the newest budget commits, newest first, until fn
// returns false; it reports how many it looked at and whether it reached
// the oldest retained commit.
func (s *Service) scanCommits(ctx context.Context, partition string, budget int, fn func(storage.CommitRecord) bool, scanned *int, complete *bool) error {
	var before int64
	for *scanned < budget {
		n := min(scanPage, budget-*scanned)
		cs, err := s.reader.AdminCommits(ctx, partition, before, n)
		if err != nil {
			return err
		}
		for _, c := range cs {
			*scanned++
			if !fn(c) {
				return nil
			}
		}
		if len(cs) < n {
			*complete = true
			return nil
		}
		before = cs[len(cs)-1].Seq
	}
	return nil
}

// ScopeActivity counts commits per scope value over the newest commits.
type ScopeActivity struct {
	// Window is how many of the newest commits were asked for;
	// ScannedCommits how many were counted (fewer when the log is shorter),
	// from FromSeq to ToSeq, created between FromMs and ToMs.
	Window         int          `json:"window"`
	ScannedCommits int          `json:"scannedCommits"`
	FromSeq        int64        `json:"fromSeq"`
	ToSeq          int64        `json:"toSeq"`
	FromMs         int64        `json:"fromMs"`
	ToMs           int64        `json:"toMs"`
	Values         []ScopeCount `json:"values"`
	// Truncated is true when more than MaxScopeValues values were seen
	// (only the busiest are listed).
	Truncated bool `json:"truncated"`
}

// ScopeCount is how many commits (and changes) touched one scope value.
type ScopeCount struct {
	Var     string `json:"var"`
	Value   string `json:"value"`
	Commits int    `json:"commits"`
	Changes int    `json:"changes"`
	LastMs  int64  `json:"lastMs"`
}

// Scopes counts, for each scope value, the commits among the newest window
// commits (<= 0: DefaultScopeWindow; at most MaxScopeWindow) whose changes
// carry it, busiest first.
func (s *Service) Scopes(ctx context.Context, partition string, window int) (*ScopeActivity, error) {
	if window <= 0 {
		window = DefaultScopeWindow
	}
	window = min(window, MaxScopeWindow)
	type key struct{ v, val string }
	counts := map[key]*ScopeCount{}
	a := &ScopeActivity{Window: window, Values: []ScopeCount{}}
	var complete bool
	err := s.scanCommits(ctx, partition, window, func(c storage.CommitRecord) bool {
		if a.ToSeq == 0 {
			a.ToSeq, a.ToMs = c.Seq, c.CreatedAtMs
		}
		a.FromSeq, a.FromMs = c.Seq, c.CreatedAtMs
		seen := map[key]bool{}
		for _, ch := range c.Changes {
			for v, val := range ch.Scopes {
				k := key{v, val}
				sc := counts[k]
				if sc == nil {
					sc = &ScopeCount{Var: v, Value: val, LastMs: c.CreatedAtMs}
					counts[k] = sc
				}
				sc.Changes++
				if !seen[k] {
					seen[k] = true
					sc.Commits++
				}
			}
		}
		return true
	}, &a.ScannedCommits, &complete)
	if err != nil {
		return nil, fmt.Errorf("admin: scope activity of %q: %w", partition, err)
	}
	for _, sc := range counts {
		a.Values = append(a.Values, *sc)
	}
	sort.Slice(a.Values, func(i, j int) bool {
		x, y := a.Values[i], a.Values[j]
		if x.Commits != y.Commits {
			return x.Commits > y.Commits
		}
		if x.Var != y.Var {
			return x.Var < y.Var
		}
		return x.Value < y.Value
	})
	if len(a.Values) > MaxScopeValues {
		a.Values, a.Truncated = a.Values[:MaxScopeValues], true
	}
	return a, nil
}

// Events returns up to limit retained events after seq afterSeq, oldest
// first, with the ring's counters.
func (s *Service) Events(afterSeq uint64, limit int) ([]events.Event, events.Stats) {
	ring := s.eng.Events()
	evs := ring.Recent(afterSeq, limit)
	if evs == nil {
		evs = []events.Event{}
	}
	return evs, ring.Stats()
}
