package httpsync

import (
	"context"
	"errors"
	"math"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/engine/reactions"
	"github.com/synclane/synclane/protocol/opwire"
	"github.com/synclane/synclane/storage"
)

// engineDescs lists every metric the engine collector can report, for
// Describe.
var engineDescs []*prometheus.Desc

func engineDesc(name, help string, labels ...string) *prometheus.Desc {
	d := prometheus.NewDesc(name, help, labels, nil)
	engineDescs = append(engineDescs, d)
	return d
}

// Engine counters (all read from the engine's atomic counters and
// snapshots at scrape time).
var (
	descRequests        = engineDesc("synclane_requests_total", "Sync requests that reached the engine (synclane_http_requests_total counts every HTTP request).")
	descCommitsApplied  = engineDesc("synclane_commits_applied_total", "Pushed commits applied.")
	descCommitsCached   = engineDesc("synclane_commits_cached_total", "Pushed commits answered from the idempotency cache.")
	descCommitsRejected = engineDesc("synclane_commits_rejected_total", "Pushed commits rejected.")
	descResets          = engineDesc("synclane_header_only_resets_total", "Epoch-reset and schema-floor answers.")
	descRequestSeconds  = engineDesc("synclane_request_seconds_total", "Total time spent serving sync requests.")
	descRequestErrors   = engineDesc("synclane_request_errors_total", "Requests refused, by protocol code.", "code")
	descBindingWrites   = engineDesc("synclane_client_binding_writes_total", "Durable writes of new clientId to actor bindings (fresh clients arriving together share one).")
	descBindings        = engineDesc("synclane_client_bindings_total", "New clientId to actor bindings written.")
	descPullGroups      = engineDesc("synclane_pull_groups_total", "Groups of bootstrap pulls that arrived together, served under one serve-gate verify.")
	descGroupedPulls    = engineDesc("synclane_grouped_pulls_total", "Bootstrap pulls served in a group (synclane_pull_groups_total).")

	descSegBuilt        = engineDesc("synclane_segments_built_total", "Segments built and stored.")
	descSegReused       = engineDesc("synclane_segments_reused_total", "Bootstrap pages answered with a segment already stored (no rebuild).")
	descSegServed       = engineDesc("synclane_segments_served_total", "Segment downloads served.")
	descSegServedBytes  = engineDesc("synclane_segment_bytes_served_total", "Uncompressed bytes of segment downloads served.")
	descSegExpired      = engineDesc("synclane_segments_expired_total", "Segments whose bytes the expiry sweep dropped.")
	descSegBypassed     = engineDesc("synclane_segment_store_bypassed_total", "Inline pages served without the segment store because it failed (not stored for reuse).")
	descPagesEncoded    = engineDesc("synclane_bootstrap_pages_encoded_total", "Bootstrap pages and SQLite images encoded from rows (a page answered from a stored segment or a kept inline page adds none).")
	descInlineReused    = engineDesc("synclane_inline_pages_reused_total", "Inline bootstrap pages answered from memory instead of being encoded again.")
	descPagesPatched    = engineDesc("synclane_bootstrap_pages_patched_total", "Table first pages built by patching the first page kept for an older pin with the changes since, instead of being encoded from rows.")
	descFormsBuilt      = engineDesc("synclane_segment_forms_built_total", "Compressed forms (zstd, gzip) of segments built, once per segment and encoding while stored.")
	descFormsServed     = engineDesc("synclane_segment_forms_served_total", "Compressed segment downloads answered with a form already built.")
	descFormsUnstored   = engineDesc("synclane_segment_forms_unstored_total", "Compressed forms built but not stored (the quota refused them, or the store failed): sent once.")
	descSegEvicted      = engineDesc("synclane_segments_evicted_total", "Segments evicted to keep the segment store within --segment-store-max-bytes/--segment-store-max-files.")
	descSegRefused      = engineDesc("synclane_segments_refused_total", "Built segments not kept because the segment store was full of pinned (recently handed out) segments.")
	descSegStoreBytes   = engineDesc("synclane_segment_store_bytes", "Bytes the segment store holds (each segment once), as of the last build or sweep.")
	descSegStoreFiles   = engineDesc("synclane_segment_store_files", "Segments (files, on the embedded store) the segment store holds, as of the last build or sweep.")
	descBlobUploads     = engineDesc("synclane_blob_uploads_total", "Blob uploads stored (or confirmed already stored).")
	descBlobUpRefused   = engineDesc("synclane_blob_uploads_refused_total", "Blob uploads refused (hash mismatch, too large, busy, storage failure).")
	descBlobBytesIn     = engineDesc("synclane_blob_bytes_in_total", "Blob upload bytes read.")
	descBlobDownloads   = engineDesc("synclane_blob_downloads_total", "Blob downloads started.")
	descBlobBytesOut    = engineDesc("synclane_blob_bytes_out_total", "Blob bytes sent.")
	descBlobSweeps      = engineDesc("synclane_blob_sweep_passes_total", "Orphan blob sweeps run.")
	descBlobsSwept      = engineDesc("synclane_blobs_swept_total", "Orphan blobs removed.")
	descBlobsMissing    = engineDesc("synclane_blobs_missing_total", "Blobs whose metadata said present while their bytes were missing from the byte store, marked missing until re-uploaded.")
	descBlobChecks      = engineDesc("synclane_blob_presence_checks_total", "Present blobs the sweep checked the byte store still holds.")
	descBlobPushRefused = engineDesc("synclane_blob_push_refusals_total", "Pushed commits rejected with blob.not_found (a row referenced a blob not uploaded).")

	descActorsSpawned    = engineDesc("synclane_partition_actors_spawned_total", "Partition actors spawned.")
	descActorsPassivated = engineDesc("synclane_partition_actors_passivated_total", "Partition actors passivated when idle.")
	descActorRestarts    = engineDesc("synclane_partition_actor_restarts_total", "Partition actor restarts after a crash.")
	descGCBatches        = engineDesc("synclane_group_commit_batches_total", "Push batches applied in one storage transaction.")
	descGCRequests       = engineDesc("synclane_group_commit_requests_total", "Push requests applied through group commit.")
	descActorsLive       = engineDesc("synclane_partition_actors_live", "Live partition actors.")

	descRetentionPasses = engineDesc("synclane_retention_passes_total", "Maintenance passes, by result (ran, or skipped: another process held the maintenance lock).", "result")
	descRetentionLast   = engineDesc("synclane_retention_last_pass_timestamp_seconds", "When the last maintenance pass ended (engine clock; 0 before any).")
	descPrunedCommits   = engineDesc("synclane_retention_pruned_commits_total", "Commits pruned by this process.")
	descPrunedChanges   = engineDesc("synclane_retention_pruned_changes_total", "Changes pruned by this process.")
	descPrunedIdem      = engineDesc("synclane_retention_pruned_idempotency_records_total", "Idempotency records pruned by this process.")
	descPrunedTombs     = engineDesc("synclane_retention_pruned_tombstones_total", "Delete tombstones pruned by this process (with the commits at or below the horizon).")
	descHorizonParts    = engineDesc("synclane_retention_horizon_partitions", "Partitions this process has pruned or planned a horizon for (the admin API has each partition's horizon).")
	descHorizonMin      = engineDesc("synclane_retention_horizon_seq_min", "Lowest horizon (commit seq) among the partitions this process pruned, as it last saw them (absent before any).")
	descHorizonMax      = engineDesc("synclane_retention_horizon_seq_max", "Highest horizon (commit seq) among the partitions this process pruned, as it last saw them (absent before any).")

	descAuthFailures = engineDesc("synclane_auth_failures_total", "Refused authentications, by route kind and reason (error code). The event ring samples them (one auth.failed event per source per interval); this counts every one.", "route", "reason")

	descReactDelivered = engineDesc("synclane_reactions_delivered_total", "Reactions this process delivered.")
	descReactRetried   = engineDesc("synclane_reactions_retried_total", "Failed reaction attempts this process rescheduled.")
	descReactDeadLet   = engineDesc("synclane_reactions_dead_lettered_total", "Reactions this process dead-lettered after their last attempt.")
	descReactPending   = engineDesc("synclane_reactions_pending", "Stored reactions waiting for delivery (all processes).")
	descReactDead      = engineDesc("synclane_reactions_dead", "Dead-lettered reactions stored (all processes).")

	descOpsExecuted = engineDesc("synclane_operations_executed_total", "Remote operations answered with a result (a command's cached replay included), by kind.", "kind")
	descOpsRefused  = engineDesc("synclane_operations_refused_total", "Remote operations answered with an error, by kind (query, command, invalid) and protocol code.", "kind", "code")

	descCheckpoints       = engineDesc("synclane_checkpoints", "Backfill checkpoints stored (all partitions), by state (declared, backfilling, activated); `synclane checkpoint list` and the admin API name them.", "state")
	descCheckpointRows    = engineDesc("synclane_checkpoint_observed_rows", "Source rows the backfills of all stored checkpoints have projected, summed.")
	descCheckpointPending = engineDesc("synclane_checkpoint_pending_oldest_update_age_seconds", "Time since the least recently updated checkpoint not yet activated last moved (0 when none is pending): a stalled backfill grows it.")
)

// checkpointStates are the states synclane_checkpoints always reports.
var checkpointStates = []storage.CheckpointState{storage.CheckpointDeclared, storage.CheckpointBackfilling, storage.CheckpointActivated}

// storageReadTimeout bounds each storage read a scrape makes (reaction
// queue sizes, checkpoints); what is not read in time is left out.
const storageReadTimeout = 2 * time.Second

// engineCollector reports the engine's counters. No label carries a
// partition: per-partition figures are aggregated (min, max, counts).
type engineCollector struct{ eng *engine.Engine }

// Describe implements prometheus.Collector.
func (c engineCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range engineDescs {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c engineCollector) Collect(ch chan<- prometheus.Metric) {
	eng := c.eng
	counter := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	s := eng.Metrics()
	counter(descRequests, float64(s.Requests))
	counter(descCommitsApplied, float64(s.CommitsApplied))
	counter(descCommitsCached, float64(s.CommitsCached))
	counter(descCommitsRejected, float64(s.CommitsRejected))
	counter(descResets, float64(s.HeaderOnlyResets))
	counter(descRequestSeconds, s.RequestSeconds)
	for code, n := range s.Errors {
		counter(descRequestErrors, float64(n), code)
	}
	counter(descBindingWrites, float64(s.ClientBindingWrites))
	counter(descBindings, float64(s.ClientBindings))
	counter(descPullGroups, float64(s.PullGroups))
	counter(descGroupedPulls, float64(s.GroupedPulls))

	ss := eng.Segments().Stats()
	counter(descSegBuilt, float64(ss.Built))
	counter(descSegReused, float64(ss.Reused))
	counter(descSegServed, float64(ss.Served))
	counter(descSegServedBytes, float64(ss.ServedBytes))
	counter(descSegExpired, float64(ss.Expired))
	counter(descSegBypassed, float64(ss.Bypassed))
	counter(descPagesEncoded, float64(ss.Encoded))
	counter(descInlineReused, float64(ss.InlineReused))
	counter(descPagesPatched, float64(ss.Patched))
	counter(descFormsBuilt, float64(ss.FormsBuilt))
	counter(descFormsServed, float64(ss.FormsServed))
	counter(descFormsUnstored, float64(ss.FormsUnstored))
	qs := eng.Segments().QuotaStats()
	counter(descSegEvicted, float64(qs.Evicted))
	counter(descSegRefused, float64(qs.Refused))
	gauge(descSegStoreBytes, float64(qs.StoreBytes))
	gauge(descSegStoreFiles, float64(qs.StoreFiles))

	bs := eng.Blobs().Stats()
	counter(descBlobUploads, float64(bs.Uploads))
	counter(descBlobUpRefused, float64(bs.UploadsRefused))
	counter(descBlobBytesIn, float64(bs.BytesIn))
	counter(descBlobDownloads, float64(bs.Downloads))
	counter(descBlobBytesOut, float64(bs.BytesOut))
	counter(descBlobSweeps, float64(bs.SweepPasses))
	counter(descBlobsSwept, float64(bs.Swept))
	counter(descBlobsMissing, float64(bs.Missing))
	counter(descBlobChecks, float64(bs.PresenceChecks))
	counter(descBlobPushRefused, float64(bs.PushesRefused))

	a := eng.ActorStats()
	counter(descActorsSpawned, float64(a.Spawned))
	counter(descActorsPassivated, float64(a.Passivated))
	counter(descActorRestarts, float64(a.Restarts))
	counter(descGCBatches, float64(a.Batches))
	counter(descGCRequests, float64(a.BatchedJobs))
	gauge(descActorsLive, float64(a.LiveActors))

	r := s.Retention
	counter(descRetentionPasses, float64(r.Passes), "ran")
	counter(descRetentionPasses, float64(r.SkippedPasses), "skipped")
	gauge(descRetentionLast, float64(r.LastPassMs)/1000)
	counter(descPrunedCommits, float64(r.Commits))
	counter(descPrunedChanges, float64(r.Changes))
	counter(descPrunedIdem, float64(r.IdempotencyRecords))
	counter(descPrunedTombs, float64(r.Tombstones))
	gauge(descHorizonParts, float64(len(r.Horizons)))
	if len(r.Horizons) > 0 {
		lo, hi := int64(math.MaxInt64), int64(math.MinInt64)
		for _, h := range r.Horizons {
			lo, hi = min(lo, h), max(hi, h)
		}
		gauge(descHorizonMin, float64(lo))
		gauge(descHorizonMax, float64(hi))
	}

	for k, n := range eng.AuthFailureCounts() {
		counter(descAuthFailures, float64(n), k.Route, k.Reason)
	}

	ops := eng.Operations().Stats()
	for _, k := range []string{opwire.KindQuery, opwire.KindCommand} {
		counter(descOpsExecuted, float64(ops.Executed[k]), k)
	}
	for k, codes := range ops.Refused {
		for code, n := range codes {
			counter(descOpsRefused, float64(n), k, code)
		}
	}

	c.collectStored(ch, counter, gauge)
}

// collectStored reports what is read from storage, so that every process
// reports every process's figures: the reaction queue and the backfill
// checkpoints. Reads are bounded by storageReadTimeout.
func (c engineCollector) collectStored(ch chan<- prometheus.Metric, counter, gauge func(*prometheus.Desc, float64, ...string)) {
	ctx, cancel := context.WithTimeout(context.Background(), storageReadTimeout)
	defer cancel()
	rs, err := c.eng.Reactions().Stats(ctx)
	if !errors.Is(err, reactions.ErrNoReactions) {
		counter(descReactDelivered, float64(rs.Delivered))
		counter(descReactRetried, float64(rs.Retried))
		counter(descReactDeadLet, float64(rs.DeadLettered))
		if err == nil {
			gauge(descReactPending, float64(rs.Pending))
			gauge(descReactDead, float64(rs.Dead))
		}
	}
	cps, err := c.eng.Backend().Checkpoints.ReadCheckpoints(ctx)
	if err != nil || len(cps) == 0 {
		return
	}
	byState := map[storage.CheckpointState]int{}
	var rows int64
	var oldest int64 // UpdatedAtMs of the least recently updated pending checkpoint
	for _, cp := range cps {
		byState[cp.State]++
		rows += cp.ObservedRows
		if cp.State != storage.CheckpointActivated && (oldest == 0 || cp.UpdatedAtMs < oldest) {
			oldest = cp.UpdatedAtMs
		}
	}
	for _, st := range checkpointStates {
		gauge(descCheckpoints, float64(byState[st]), string(st))
	}
	gauge(descCheckpointRows, float64(rows))
	age := 0.0
	if oldest > 0 {
		age = max(0, time.Since(time.UnixMilli(oldest)).Seconds())
	}
	gauge(descCheckpointPending, age)
}
