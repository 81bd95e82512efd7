package homes

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"

	"github.com/synclane/synclane/storage"
	"github.com/synclane/synclane/storage/postgres"
)

// Moving a partition between homes, online (docs/cluster.md, "Moving a
// partition").
//
// The directory row carries the move record (move_from, move_to,
// move_state: "" when no move is under way, else "copying", "fenced" or
// "switched"), so that running Move again after a mover died finishes or
// undoes it. The steps:
//
//  1. record: move_state "copying" (a compare-and-swap on the row's
//     generation and an empty state);
//  2. copy: postgres.CopyPartition from one snapshot of the source into
//     the target, which marks its copy incoming (the move guard refuses
//     every write there but the mover's);
//  3. catch up: postgres.CopyPartitionTail, the commits made meanwhile by
//     seq and the rows they touched, a few rounds;
//  4. fence: move_state "fenced", then the source's move marker
//     (postgres.Store.SetMoveMarker): every later write of the partition
//     at the source is refused in its own transaction (storage.ErrPartitionMoved,
//     503 partition_moving), whichever process's cached entry sent it;
//  5. tail: the last CopyPartitionTail, with the tables copied whole;
//  6. switch: the row names the target, its generation raised, move_state
//     "switched"; the target's incoming marker is removed;
//  7. clean: the source's copy is deleted (its marker stays: a stale entry
//     still meets it) and the move record cleared.
//
// The partition keeps its log epoch and seqs (the registry row is
// copied). A re-run finds the record: before the switch (copying,
// fenced) it undoes the move (the target's copy and markers removed; the
// source never lost anything) and starts again; after it (switched) it
// finishes steps 6-7. One Move of a partition runs at a time in the whole
// deployment (a session advisory lock in main, released when the
// mover's connection ends, a kill -9 included).

// Move states of the directory's move record.
const (
	moveNone     = ""
	moveCopying  = "copying"
	moveFenced   = "fenced"
	moveSwitched = "switched"
)

// ErrMoveRunning reports a Move of a partition another mover is running.
var ErrMoveRunning = errors.New("homes: a move of the partition is running")

// MoveOptions tune Move.
type MoveOptions struct {
	// CatchUpRounds bounds the catch-up copies before the fence (default
	// 3); catching up stops earlier when a round copied at most
	// CatchUpRows rows (default 1000).
	CatchUpRounds int
	CatchUpRows   int64
	// StopAfter, a test seam, makes Move return errStopped after step n
	// (1-6, see the package's move steps) as if the mover died there.
	StopAfter int
	// AfterStep, a test seam, is called after each step n (1-6) with the
	// move's context; a process test blocks in it and is killed there.
	AfterStep func(ctx context.Context, n int)
}

// errStopped is Move's error when MoveOptions.StopAfter stopped it.
var errStopped = errors.New("homes: move stopped by StopAfter")

// IsStopped reports whether err is the StopAfter seam's.
func IsStopped(err error) bool { return errors.Is(err, errStopped) }

// MoveResult describes a finished Move.
type MoveResult struct {
	Partition, From, To string
	// Generation is the directory row's generation after the switch.
	Generation int64
	// MaxSeq is the partition's max_commit_seq at the switch.
	MaxSeq int64
	// Rows counts the rows written to the target (every step).
	Rows int64
	// Recovered names what a previous, interrupted move left and this one
	// did with it: "", "undone" or "finished".
	Recovered string
	// Pause is the time the partition refused writes (fence to switch);
	// Duration the whole move.
	Pause, Duration time.Duration
}

// dirRow is a directory row with its move record.
type dirRow struct {
	home            string
	gen             int64
	from, to, state string
}

func (h *Homes) readDirRow(ctx context.Context, partition string) (dirRow, bool, error) {
	var r dirRow
	err := h.main().st.Pool().QueryRow(ctx, `SELECT home, generation, move_from, move_to, move_state FROM `+h.dir+` WHERE partition = $1`, partition).
		Scan(&r.home, &r.gen, &r.from, &r.to, &r.state)
	if errors.Is(err, pgx.ErrNoRows) {
		return r, false, nil
	}
	if err != nil {
		return r, false, h.unavailable(h.main(), fmt.Errorf("homes: read the directory: %w", err))
	}
	return r, true, nil
}

// setMove changes the move record (and, with home != "", the home, raising
// the generation) if the row is still r; it returns the new row.
func (h *Homes) setMove(ctx context.Context, partition string, r dirRow, home, from, to, state string) (dirRow, error) {
	next := r
	bump := int64(0)
	if home != "" && home != r.home {
		bump = 1
		next.home = home
	}
	ct, err := h.main().st.Pool().Exec(ctx, `UPDATE `+h.dir+` SET home = $2, generation = generation + $3, move_from = $4, move_to = $5, move_state = $6, updated_at_ms = $7
WHERE partition = $1 AND generation = $8 AND move_state = $9`, partition, next.home, bump, from, to, state, time.Now().UnixMilli(), r.gen, r.state)
	if err != nil {
		return r, h.unavailable(h.main(), fmt.Errorf("homes: move %s: %w", storage.QuoteID(partition), err))
	}
	if ct.RowsAffected() != 1 {
		return r, fmt.Errorf("homes: move %s: %w", storage.QuoteID(partition), ErrGenerationChanged)
	}
	next.gen += bump
	next.from, next.to, next.state = from, to, state
	return next, nil
}

// lockMove takes the deployment-wide lock of partition's moves on a
// connection of main's pool, which release gives back.
func (h *Homes) lockMove(ctx context.Context, partition string) (release func(), err error) {
	conn, err := h.main().st.Pool().Acquire(ctx)
	if err != nil {
		return nil, h.unavailable(h.main(), fmt.Errorf("homes: move %s: %w", storage.QuoteID(partition), err))
	}
	key := "synclane.home_move:" + h.dir + ":" + partition
	var ok bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock(hashtextextended($1, 0))`, key).Scan(&ok); err != nil {
		conn.Release()
		return nil, h.unavailable(h.main(), fmt.Errorf("homes: move %s: %w", storage.QuoteID(partition), err))
	}
	if !ok {
		conn.Release()
		return nil, fmt.Errorf("homes: move %s: %w", storage.QuoteID(partition), ErrMoveRunning)
	}
	return func() {
		// A fresh context: the lock must go back even when ctx ended.
		uctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := conn.Exec(uctx, `SELECT pg_advisory_unlock(hashtextextended($1, 0))`, key); err != nil {
			_ = conn.Conn().Close(uctx) // the session's end releases it
		}
		conn.Release()
	}, nil
}

// Move moves partition to the home named to, online (see the steps
// above), and returns what it did. A partition the directory does not
// name is placed first. A partition already in to is left alone (after
// finishing or undoing an interrupted move). It fails with ErrMoveRunning
// while another mover moves the partition. Writes of the partition are
// refused between the fence and the switch (Pause); reads go on.
func (h *Homes) Move(ctx context.Context, partition, to string, opts MoveOptions) (MoveResult, error) {
	start := time.Now()
	res := MoveResult{Partition: partition, To: to}
	if opts.CatchUpRounds <= 0 {
		opts.CatchUpRounds = 3
	}
	if opts.CatchUpRows <= 0 {
		opts.CatchUpRows = 1000
	}
	dst := h.byName[to]
	if dst == nil {
		return res, fmt.Errorf("homes: move %s: no home %q", storage.QuoteID(partition), to)
	}
	if err := storage.CheckPartition(partition); err != nil {
		return res, fmt.Errorf("homes: move: %w", err)
	}
	if _, err := h.place(ctx, partition); err != nil {
		return res, err
	}
	release, err := h.lockMove(ctx, partition)
	if err != nil {
		return res, err
	}
	defer release()
	r, ok, err := h.readDirRow(ctx, partition)
	if err != nil {
		return res, err
	}
	if !ok {
		return res, fmt.Errorf("homes: move %s: the directory does not name it", storage.QuoteID(partition))
	}
	if r.state != moveNone {
		if r, err = h.recoverMove(ctx, partition, r, &res); err != nil {
			return res, err
		}
	}
	res.From = r.home
	if r.home == to {
		res.Generation = r.gen
		res.Duration = time.Since(start)
		return res, nil
	}
	src := h.byName[r.home]
	if src == nil {
		return res, fmt.Errorf("homes: move %s: it lives in home %q, which this process is not configured with: %w",
			storage.QuoteID(partition), r.home, storage.ErrHomeUnavailable)
	}
	stop := func(n int) error {
		if opts.AfterStep != nil {
			opts.AfterStep(ctx, n)
		}
		if opts.StopAfter == n {
			return errStopped
		}
		return nil
	}
	log := h.log.With(zap.String("partition", partition), zap.String("from", src.name), zap.String("to", to))
	// 1. record
	if r, err = h.setMove(ctx, partition, r, "", src.name, to, moveCopying); err != nil {
		return res, err
	}
	if err := stop(1); err != nil {
		return res, err
	}
	// 2. copy
	cs, err := postgres.CopyPartition(ctx, src.st, dst.st, partition, src.name)
	if err != nil {
		return res, h.moveErr(src, dst, partition, "copy", err)
	}
	res.Rows += cs.Rows
	log.Info("homes: move: copied", zap.Int64("rows", cs.Rows), zap.Int64("max_seq", cs.MaxSeq))
	if err := stop(2); err != nil {
		return res, err
	}
	// 3. catch up
	after := cs.MaxSeq
	for range opts.CatchUpRounds {
		ts, err := postgres.CopyPartitionTail(ctx, src.st, dst.st, partition, after, false)
		if err != nil {
			return res, h.moveErr(src, dst, partition, "catch up", err)
		}
		res.Rows += ts.Rows
		after = ts.MaxSeq
		if ts.Rows <= opts.CatchUpRows {
			break
		}
	}
	if err := stop(3); err != nil {
		return res, err
	}
	// 4. fence
	if r, err = h.setMove(ctx, partition, r, "", src.name, to, moveFenced); err != nil {
		return res, err
	}
	fenced := time.Now()
	if err := src.st.SetMoveMarker(ctx, partition, postgres.MarkMoved, to); err != nil {
		return res, h.moveErr(src, dst, partition, "fence", err)
	}
	if err := stop(4); err != nil {
		return res, err
	}
	// 5. tail
	ts, err := postgres.CopyPartitionTail(ctx, src.st, dst.st, partition, after, true)
	if err != nil {
		return res, h.moveErr(src, dst, partition, "tail", err)
	}
	res.Rows += ts.Rows
	res.MaxSeq = ts.MaxSeq
	if err := stop(5); err != nil {
		return res, err
	}
	// 6. switch
	if r, err = h.setMove(ctx, partition, r, to, src.name, to, moveSwitched); err != nil {
		return res, err
	}
	h.remember(partition, entry{home: dst, gen: r.gen})
	if err := dst.st.ClearMoveMarker(ctx, partition); err != nil {
		return res, h.moveErr(src, dst, partition, "open the target", err)
	}
	res.Pause = time.Since(fenced)
	res.Generation = r.gen
	dst.movesIn.Add(1)
	if err := stop(6); err != nil {
		return res, err
	}
	// 7. clean
	if err := h.finishMove(ctx, partition, r); err != nil {
		return res, err
	}
	res.Duration = time.Since(start)
	log.Info("homes: moved", zap.Int64("rows", res.Rows), zap.Int64("max_seq", res.MaxSeq),
		zap.Duration("pause", res.Pause), zap.Duration("duration", res.Duration))
	return res, nil
}

// moveErr wraps a move step's failure.
func (h *Homes) moveErr(src, dst *home, partition, step string, err error) error {
	return fmt.Errorf("homes: move %s from %q to %q: %s: %w", storage.QuoteID(partition), src.name, dst.name, step,
		h.unavailable(src, h.unavailable(dst, err)))
}

// finishMove removes the target's incoming marker, deletes the source's
// copy (keeping its marker) and clears the move record of r, a switched
// row.
func (h *Homes) finishMove(ctx context.Context, partition string, r dirRow) error {
	src, dst := h.byName[r.from], h.byName[r.to]
	if src == nil || dst == nil {
		return fmt.Errorf("homes: move %s: homes %q, %q: %w", storage.QuoteID(partition), r.from, r.to, storage.ErrHomeUnavailable)
	}
	if err := dst.st.ClearMoveMarker(ctx, partition); err != nil {
		return h.moveErr(src, dst, partition, "open the target", err)
	}
	if err := src.st.SetMoveMarker(ctx, partition, postgres.MarkMoved, dst.name); err != nil {
		return h.moveErr(src, dst, partition, "fence the source", err)
	}
	if err := src.st.DropPartitionCopy(ctx, partition); err != nil {
		return h.moveErr(src, dst, partition, "delete the source's copy", err)
	}
	_, err := h.setMove(ctx, partition, r, "", "", "", moveNone)
	return err
}

// recoverMove finishes (switched) or undoes (copying, fenced) the move
// the row records, and returns the row after.
func (h *Homes) recoverMove(ctx context.Context, partition string, r dirRow, res *MoveResult) (dirRow, error) {
	if r.state == moveSwitched {
		if err := h.finishMove(ctx, partition, r); err != nil {
			return r, err
		}
		res.Recovered = "finished"
		h.log.Info("homes: move: finished an interrupted move", zap.String("partition", partition), zap.String("from", r.from), zap.String("to", r.to))
		return h.readAfter(ctx, partition)
	}
	src, dst := h.byName[r.from], h.byName[r.to]
	if src == nil || dst == nil {
		return r, fmt.Errorf("homes: move %s: homes %q, %q: %w", storage.QuoteID(partition), r.from, r.to, storage.ErrHomeUnavailable)
	}
	// Before the switch the source holds everything: drop the target's
	// copy, then reopen the source.
	if err := dst.st.SetMoveMarker(ctx, partition, postgres.MarkIncoming, src.name); err != nil {
		return r, h.moveErr(src, dst, partition, "undo", err)
	}
	if err := dst.st.DropPartitionCopy(ctx, partition); err != nil {
		return r, h.moveErr(src, dst, partition, "undo", err)
	}
	if err := dst.st.ClearMoveMarker(ctx, partition); err != nil {
		return r, h.moveErr(src, dst, partition, "undo", err)
	}
	if err := src.st.ClearMoveMarker(ctx, partition); err != nil {
		return r, h.moveErr(src, dst, partition, "undo", err)
	}
	if _, err := h.setMove(ctx, partition, r, "", "", "", moveNone); err != nil {
		return r, err
	}
	res.Recovered = "undone"
	h.log.Info("homes: move: undid an interrupted move", zap.String("partition", partition), zap.String("from", r.from), zap.String("to", r.to), zap.String("state", r.state))
	return h.readAfter(ctx, partition)
}

func (h *Homes) readAfter(ctx context.Context, partition string) (dirRow, error) {
	r, ok, err := h.readDirRow(ctx, partition)
	if err == nil && !ok {
		err = fmt.Errorf("homes: move %s: the directory row is gone", storage.QuoteID(partition))
	}
	return r, err
}

// PlannedMove is one move of a rebalance plan.
type PlannedMove struct{ Partition, From, To string }

// RebalancePlan returns moves that even out the homes' partition counts
// (each ends within one of the mean): partitions leave the fullest home
// for the emptiest, in partition order, at most limit moves (0: no
// bound).
func (h *Homes) RebalancePlan(ctx context.Context, limit int) ([]PlannedMove, error) {
	rows, err := h.main().st.Pool().Query(ctx, `SELECT partition, home FROM `+h.dir+` ORDER BY partition`)
	if err != nil {
		return nil, h.unavailable(h.main(), fmt.Errorf("homes: rebalance: %w", err))
	}
	byHome := map[string][]string{}
	for _, hm := range h.homes {
		byHome[hm.name] = nil
	}
	for rows.Next() {
		var p, hn string
		if err := rows.Scan(&p, &hn); err != nil {
			rows.Close()
			return nil, err
		}
		if _, ok := byHome[hn]; ok {
			byHome[hn] = append(byHome[hn], p)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, h.unavailable(h.main(), fmt.Errorf("homes: rebalance: %w", err))
	}
	var plan []PlannedMove
	for limit <= 0 || len(plan) < limit {
		names := h.Names()
		sort.SliceStable(names, func(i, j int) bool { return len(byHome[names[i]]) > len(byHome[names[j]]) })
		full, empty := names[0], names[len(names)-1]
		if len(byHome[full])-len(byHome[empty]) <= 1 {
			break
		}
		ps := byHome[full]
		p := ps[len(ps)-1]
		byHome[full] = ps[:len(ps)-1]
		byHome[empty] = append(byHome[empty], p)
		plan = append(plan, PlannedMove{Partition: p, From: full, To: empty})
	}
	return plan, nil
}
