package sqlite

import (
	"context"
	"fmt"

	"github.com/synclane/synclane/storage"
)

// Group commit across partitions.
//
// SQLite has one writer, so the push transactions of all partitions take
// turns on the writer connection, and each used to pay its own fsync. Now a
// push transaction is a savepoint ("ptx") inside an outer BEGIN IMMEDIATE
// transaction that several consecutive push transactions share: when a
// PushTx commits while other BeginPush calls are waiting for the writer, it
// releases its savepoint, hands the writer to the next one and waits; the
// last member of the group (no one waiting, or the group full) COMMITs once
// for everyone and wakes them. Every member's Commit returns only after
// that COMMIT, with its result, so no caller ever reports a write that is
// not durable, and readers (other connections) never see one either.
//
// Invariants, all under the write lock:
//   - s.group is non-nil exactly while the outer transaction is open;
//   - every member of an open group is either holding the write lock or
//     waiting in Commit to get it back, so some member always finishes the
//     group even if a waiter it handed off to gave up;
//   - any other writer (lock) finishes an open group before it begins its
//     own transaction;
//   - a group holds at most one push transaction per partition: a BeginPush
//     for a partition that already committed in the open group finishes
//     the group first.
//
// Deferred to the group: a member's log records (log.go) and its new
// MaxCommitSeq are not written at its Commit but kept in the group
// (commitGroup.logs) and written for all members at once, the log records
// with multi-row INSERTs per table, right before the group's COMMIT
// (flushGroup). The writer fence is checked per member at its Commit
// (fencedIn, the fence trigger's condition read in the same transaction),
// so a fenced partition fails alone; the trigger still guards the group's
// INSERT into sync_commits.

// maxGroupMembers bounds how many push transactions share one COMMIT.
const maxGroupMembers = 256

type commitGroup struct {
	members int
	done    chan struct{}
	err     error
	// gate is the shared part of the serve gate as the group's first gate
	// read found it (checkpoint.go pushTx.ReadServeGate); after is the
	// gate of every member partition that read it, read again after the
	// group's COMMIT (readAfterCommit).
	gate  *groupGate
	after map[string]*storage.ServeGate
	// afterGen is the file's checkpoint generation in the read after
	// the COMMIT.
	afterGen string
	// logs are the deferred log records of the members that committed,
	// written by flushGroup; their partitions are first (once joined is
	// set) and, once a second one joined, parts.
	logs   []memberLog
	first  string
	joined bool
	parts  map[string]struct{}
	// fenceRunning, fenceRead and fenceAbove cache whether any partition
	// has a writer fence above running schema version fenceRunning
	// (fencedIn).
	fenceRunning          int32
	fenceRead, fenceAbove bool
}

// memberLog is one committed member's deferred writes.
type memberLog struct {
	partition string
	running   int32 // writer_version of its commits
	log       *pendingLog
	// max is the partition's new MaxCommitSeq; setMax reports that it
	// moved.
	max    int64
	setMax bool
}

// join adds the deferred writes of tx, which committed in the group.
func (g *commitGroup) join(tx *pushTx) {
	switch p := tx.info.Partition; {
	case !g.joined:
		g.first, g.joined = p, true
	case g.parts == nil:
		g.parts = map[string]struct{}{g.first: {}, p: {}}
	default:
		g.parts[p] = struct{}{}
	}
	if len(tx.log.commits) == 0 && len(tx.log.idems) == 0 && tx.info.MaxCommitSeq == tx.startMax {
		return
	}
	g.logs = append(g.logs, memberLog{partition: tx.info.Partition, running: tx.running, log: &tx.log,
		max: tx.info.MaxCommitSeq, setMax: tx.info.MaxCommitSeq != tx.startMax})
}

// has reports whether a push transaction of partition committed in g.
func (g *commitGroup) has(partition string) bool {
	if g.parts != nil {
		_, ok := g.parts[partition]
		return ok
	}
	return g.joined && g.first == partition
}

// acquire takes the process-wide write lock, waiting until it is free, ctx
// ends or the store closes.
func (s *Store) acquire(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	select {
	case s.wlock <- struct{}{}:
		select {
		case <-s.closed:
			<-s.wlock
			return errClosed
		default:
			return nil
		}
	case <-ctx.Done():
		return ctx.Err()
	case <-s.closed:
		return errClosed
	}
}

// lock takes the write lock for a writer that runs its own transaction:
// an open commit group is finished (committed) first.
func (s *Store) lock(ctx context.Context) error {
	if err := s.acquire(ctx); err != nil {
		return err
	}
	if s.group != nil {
		s.finishGroup()
	}
	return nil
}

func (s *Store) unlock() { <-s.wlock }

// beginMember starts a push transaction: it joins the open group or opens
// one, then sets the member savepoint. The caller holds the lock.
func (s *Store) beginMember(ctx context.Context) error {
	_, err := s.openMember(ctx, false)
	return err
}

// openMember joins the open group or opens one. A member that opens the
// group with first set gets no savepoint (ptx false): nothing of another
// member is in the transaction yet, so its abort rolls the whole
// transaction back (dropMember), and its writes are not copied to the
// savepoint journal. Every other member sets the "ptx" savepoint (ptx
// true). The caller holds the lock.
func (s *Store) openMember(ctx context.Context, first bool) (ptx bool, err error) {
	if s.group == nil {
		if err := s.execWriter(ctx, "BEGIN IMMEDIATE"); err != nil {
			return false, err
		}
		s.group = &commitGroup{done: make(chan struct{})}
		if first {
			return false, nil
		}
	}
	if err := s.execWriter(context.WithoutCancel(ctx), "SAVEPOINT ptx"); err != nil {
		if s.group.members == 0 {
			s.finishGroup()
		}
		return false, err
	}
	return true, nil
}

// endMember ends the caller's push transaction (its savepoint already
// released or rolled back) and returns when its group is durable: it hands
// the writer on to a waiting BeginPush, or commits the group itself. The
// caller holds the lock; endMember releases it.
func (s *Store) endMember(joined bool) error {
	g := s.group
	if joined {
		g.members++
	}
	if s.pushWaiters.Load() == 0 || g.members >= maxGroupMembers {
		s.finishGroup()
		s.unlock()
		return g.err
	}
	s.unlock()
	// The next member holds the writer now. Either someone commits the
	// group, or the writer comes back to us (the waiter gave up or handed
	// on): then we finish the group if it is still open.
	select {
	case <-g.done:
		return g.err
	case s.wlock <- struct{}{}:
		if s.group == g {
			s.finishGroup()
		}
		s.unlock()
		<-g.done
		return g.err
	}
}

// abortMember rolls the caller's member savepoint back and ends its part
// in the group; the group's other members still commit. If the savepoint
// is gone (SQLite rolled the whole transaction back after an I/O error),
// the group is failed as a whole, so no member reports lost writes as
// durable.
func (s *Store) abortMember() { s.dropMember(true) }

// dropMember ends the caller's member transaction without keeping
// anything of it: with ptx, as abortMember; without (the member opened the
// group and is alone in it, openMember), by rolling the whole transaction
// back and closing the empty group. The caller holds the lock; dropMember
// releases it.
func (s *Store) dropMember(ptx bool) {
	ctx := context.Background()
	var err error
	if ptx {
		err = s.execWriter(ctx, "ROLLBACK TO ptx")
		if err == nil {
			err = s.execWriter(ctx, "RELEASE ptx")
		}
	}
	if !ptx || err != nil {
		g := s.group
		s.group = nil
		s.rollbackQuietly()
		if err != nil {
			g.err = fmt.Errorf("sqlite: commit group aborted: %w", err)
		}
		close(g.done)
		s.unlock()
		return
	}
	_ = s.endMember(false)
}

// finishGroup writes the members' deferred log records (flushGroup),
// commits the open outer transaction (rolling back on failure) and wakes
// every member with the result. The caller holds the lock.
func (s *Store) finishGroup() {
	g := s.group
	s.group = nil
	s.groupCommits.Add(1)
	s.groupMembers.Add(uint64(g.members))
	ctx := context.Background()
	if err := s.flushGroup(ctx, g); err != nil {
		s.rollbackQuietly()
		g.err = fmt.Errorf("sqlite: commit: %w", err)
	} else if err := s.execWriter(ctx, "COMMIT"); err != nil {
		s.rollbackQuietly()
		g.err = fmt.Errorf("sqlite: commit: %w", err)
	} else {
		s.readAfterCommit(g)
	}
	g.logs = nil
	close(g.done)
}

// execWriter runs a statement without arguments (prepared once,
// writerStmt) on the writer connection. The caller holds the lock.
func (s *Store) execWriter(ctx context.Context, q string) error {
	st, err := s.writerStmt(ctx, q)
	if err != nil {
		return err
	}
	_, err = st.ExecContext(ctx)
	return err
}

// fencedIn reports whether the writer fence refuses commits of partition
// written at schema version running: the condition of the
// sync_commits_writer_fence trigger (a fence row of the partition above
// the writer version), read in the open group's transaction, where
// nothing can change it (fences are raised in transactions of their own,
// which finish an open group first, and BEGIN IMMEDIATE keeps other
// processes out). One statement per group (per running version)
// answers "no fence above running anywhere"; only otherwise is the
// partition's fence read. The caller holds the lock, inside an open group.
func (s *Store) fencedIn(ctx context.Context, partition string, running int32) (bool, error) {
	g := s.group
	if !g.fenceRead || g.fenceRunning != running {
		st, err := s.writerStmt(ctx, `SELECT EXISTS (SELECT 1 FROM sync_writer_fence WHERE required_writer_version > ?)`)
		if err != nil {
			return false, err
		}
		if err := st.QueryRowContext(ctx, running).Scan(&g.fenceAbove); err != nil {
			g.fenceRead = false
			return false, err
		}
		g.fenceRead, g.fenceRunning = true, running
	}
	if !g.fenceAbove {
		return false, nil
	}
	st, err := s.writerStmt(ctx, `SELECT EXISTS (SELECT 1 FROM sync_writer_fence WHERE partition_id = ? AND required_writer_version > ?)`)
	if err != nil {
		return false, err
	}
	var fenced bool
	if err := st.QueryRowContext(ctx, partition, running).Scan(&fenced); err != nil {
		return false, err
	}
	return fenced, nil
}
