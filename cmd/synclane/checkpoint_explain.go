package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/synclane/synclane/storage"
)

// declareWarning says what declaring a checkpoint does to a serving
// partition; declare prints it and refuses without --yes.
func declareWarning(r storage.CheckpointRef, version int32) string {
	return fmt.Sprintf(`Declaring checkpoint %[1]s/%[2]s at schema version %[3]d closes partition %[1]q at once:
every request to it (push, pull, bootstrap, realtime) served by a server running schema
version %[3]d that was not started with --checkpoint %[1]s/%[2]s gets 503 sync.schema_not_ready,
until the checkpoint is activated (synclane checkpoint activate --sources ... %[1]s/%[2]s).
This command cannot tell whether a server is serving the partition right now.
`, r.Partition, r.Name, version)
}

// explainActivation says in words why ActivateCheckpoint answered out
// (nothing for Activated): cur is the checkpoint as read before the call,
// epoch and watermark what activation was tried with, part the partition's
// registry entry read after it (its log head and horizon).
func explainActivation(w io.Writer, out storage.ActivationOutcome, cur storage.Checkpoint, epoch, watermark int64, sources []string, part storage.PartitionInfo) {
	ref := cur.Partition + "/" + cur.Name
	switch out {
	case storage.Stale:
		switch {
		case cur.State == storage.CheckpointActivated:
			fmt.Fprintf(w, "stale: %s is already activated (at watermark %d); there is nothing to activate.\n", ref, cur.Watermark)
		case epoch != cur.OwnerEpoch:
			fmt.Fprintf(w, "stale: owner epoch %d is not the checkpoint's owner epoch %d (another backfill runner claimed it since);\n"+
				"activate from the runner holding epoch %d (or pass --epoch %d if that runner is gone).\n", epoch, cur.OwnerEpoch, cur.OwnerEpoch, cur.OwnerEpoch)
		default:
			fmt.Fprintf(w, "stale: a source table (%s) changed after watermark %d, so the projection does not reflect it.\n"+
				"The watermark must be at least the commit seq of the last source change; the partition's log is now at\n"+
				"commit seq %d. Let the backfill catch up, then activate with --watermark %d once the projection reflects\n"+
				"every commit through %d (or at the backfill's new stored watermark).\n",
				strings.Join(sources, ","), watermark, part.MaxCommitSeq, part.MaxCommitSeq, part.MaxCommitSeq)
		}
	case storage.Unverifiable:
		fmt.Fprintf(w, "unverifiable: the partition's commits through seq %d were pruned (horizon %d is above watermark %d),\n"+
			"so the source changes between %d and %d can no longer be checked. Re-run the backfill from the\n"+
			"current rows so its watermark is at least %d (the log is at %d), then activate again; keep retention\n"+
			"from pruning past a running backfill's watermark.\n",
			part.HorizonSeq, part.HorizonSeq, watermark, watermark, part.HorizonSeq, part.HorizonSeq, part.MaxCommitSeq)
	}
}
