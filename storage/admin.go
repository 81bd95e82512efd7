package storage

import (
	"context"

	"github.com/synclane/synclane/protocol/schema"
)

// AdminMaxPage is the largest page any AdminReader call returns: a limit
// above it (or <= 0) is clamped to it, so one admin read touches a bounded
// number of rows whatever it is asked.
const AdminMaxPage = 500

// ClampAdminLimit returns limit bounded to [1, AdminMaxPage] (<= 0 means
// AdminMaxPage).
func ClampAdminLimit(limit int) int {
	if limit <= 0 || limit > AdminMaxPage {
		return AdminMaxPage
	}
	return limit
}

// AdminReader is the Admin role of a backend: the read-only surface the
// admin API reads storage through. Every backend has it; the admin
// service needs it (engine/admin.New fails without it). All calls read
// committed state on the
// backend's read path (never under a partition's write lock), each reads
// at most ClampAdminLimit(limit) entries, and none of them creates
// anything: a partition that does not exist reads as empty.
type AdminReader interface {
	// AdminPartitions returns up to limit partitions named strictly after
	// after (byte order), ordered by name, each with its client count, the
	// last time a client record was written and the creation time of the
	// partition's newest retained commit.
	AdminPartitions(ctx context.Context, after string, limit int) ([]PartitionOverview, error)

	// AdminPartition returns the one partition's entry as AdminPartitions
	// would, with Exists false (and nothing else set but Partition) when
	// the partition does not exist.
	AdminPartition(ctx context.Context, partition string) (PartitionOverview, error)

	// AdminClients returns up to limit client records of the partition with
	// a clientID strictly after after (byte order), ordered by clientID.
	AdminClients(ctx context.Context, partition, after string, limit int) ([]ClientRecord, error)

	// AdminCommits returns up to limit retained commits of the partition
	// with a seq below beforeSeq (no bound when beforeSeq <= 0), newest
	// first, each with all its changes in append order.
	AdminCommits(ctx context.Context, partition string, beforeSeq int64, limit int) ([]CommitRecord, error)

	// AdminRow returns the committed row rowID of t, or nil when there is
	// none (also for a rowID that is not Storable).
	AdminRow(ctx context.Context, partition string, t *schema.Table, rowID string) (*RowRecord, error)
}

// PartitionOverview is one partition of AdminPartitions.
type PartitionOverview struct {
	PartitionInfo
	// Clients counts the partition's client records.
	Clients int64
	// LastClientAtMs is the newest UpdatedAtMs of its client records (0
	// without any).
	LastClientAtMs int64
	// LastCommitAtMs is the CreatedAtMs of the commit at MaxCommitSeq, or 0
	// when that commit is not retained (or there is none).
	LastCommitAtMs int64
}

// HomeNamer is implemented by a backend that spreads partitions over
// several databases (storage/postgres/homes): PartitionHome names the
// database holding partition (for a partition not placed yet, the one a
// placement would choose). The admin service lists partitions with it.
type HomeNamer interface {
	PartitionHome(ctx context.Context, partition string) (string, error)
}
