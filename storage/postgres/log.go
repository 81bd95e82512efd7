package postgres

import (
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/synclane/synclane/storage"
)

// log is the buffer of a PushTx's log writes, flushed by Commit.
type log struct {
	commits []storage.CommitRecord
	idems   []storage.IdempotencyRecord
	// idemPos holds each buffered record's log position (the
	// transaction's max commit seq when it was put).
	idemPos []int64
}

// logMark is a position in a log for savepoint rollback.
type logMark struct{ commits, idems int }

func (l *log) mark() logMark { return logMark{len(l.commits), len(l.idems)} }

func (l *log) reset(m logMark) {
	clear(l.commits[m.commits:])
	clear(l.idems[m.idems:])
	l.commits = l.commits[:m.commits]
	l.idems = l.idems[:m.idems]
	l.idemPos = l.idemPos[:m.idems]
}

func (l *log) maxSeq(base int64) int64 {
	if n := len(l.commits); n > 0 {
		return l.commits[n-1].Seq
	}
	return base
}

func (l *log) appendCommit(c storage.CommitRecord) error {
	for i, ch := range c.Changes {
		if ch.Scopes == nil {
			continue
		}
		if _, err := json.Marshal(ch.Scopes); err != nil {
			return fmt.Errorf("postgres: AppendCommit change %d: scopes: %w", i, err)
		}
	}
	l.commits = append(l.commits, c)
	return nil
}

func (l *log) putIdempotency(rec storage.IdempotencyRecord, pos int64) {
	l.idems = append(l.idems, rec)
	l.idemPos = append(l.idemPos, pos)
}

// idempotency returns the latest buffered record for the key, or nil.
func (l *log) idempotency(clientID, clientCommitID string) *storage.IdempotencyRecord {
	for i := len(l.idems) - 1; i >= 0; i-- {
		if r := l.idems[i]; r.ClientID == clientID && r.ClientCommitID == clientCommitID {
			return cloneIdem(r)
		}
	}
	return nil
}

func cloneIdem(r storage.IdempotencyRecord) *storage.IdempotencyRecord {
	if r.Result != nil {
		r.Result = append([]byte{}, r.Result...)
	}
	return &r
}

// queue adds the buffered writes to b as a few set-based INSERTs (one per
// table, whatever the number of commits), the max_commit_seq update and
// the notification.
func (l *log) queue(b *pgx.Batch, s *Store, partition string, writerVersion int32) {
	if len(l.commits) > 0 {
		n := len(l.commits)
		seqs, created := make([]int64, n), make([]int64, n)
		actors, clients, ccids := make([]string, n), make([]string, n), make([]string, n)
		var (
			chSeq, chVer           []int64
			chIdx                  []int32
			chTable, chRow, chScop []string
			chOp                   []int16
			chData                 [][]byte
			scTable, scVar, scVal  []string
			scSeq                  []int64
			scIdx                  []int32
		)
		for i, c := range l.commits {
			seqs[i], created[i] = c.Seq, c.CreatedAtMs
			actors[i], clients[i], ccids[i] = c.ActorID, c.ClientID, c.ClientCommitID
			for j, ch := range c.Changes {
				scopes, _ := json.Marshal(ch.Scopes) // checked by appendCommit
				chSeq = append(chSeq, c.Seq)
				chIdx = append(chIdx, int32(j))
				chTable = append(chTable, ch.Table)
				chRow = append(chRow, ch.RowID)
				chOp = append(chOp, int16(ch.Op))
				chVer = append(chVer, ch.RowVersion)
				chScop = append(chScop, string(scopes))
				chData = append(chData, ch.Row)
				for k, v := range ch.Scopes {
					scTable = append(scTable, ch.Table)
					scVar = append(scVar, k)
					scVal = append(scVal, v)
					scSeq = append(scSeq, c.Seq)
					scIdx = append(scIdx, int32(j))
				}
			}
		}
		b.Queue(s.q.insertCommits, partition, seqs, created, actors, clients, ccids, writerVersion)
		if len(chSeq) > 0 {
			b.Queue(s.q.insertChanges, partition, chSeq, chIdx, chTable, chRow, chOp, chVer, chScop, chData)
		}
		if len(scSeq) > 0 {
			b.Queue(s.q.insertScopes, partition, scTable, scVar, scVal, scSeq, scIdx)
		}
		maxSeq := seqs[n-1]
		b.Queue(s.q.setMaxSeq, partition, maxSeq)
		if s.notify {
			b.Queue(`SELECT pg_notify($1, $2)`, s.channel, fmt.Sprintf("%s\t%d", partition, maxSeq))
		}
	}
	if len(l.idems) > 0 && len(l.commits) == 0 {
		// A push of rejected commits only writes idempotency records: it
		// writes the registry row too (no change), as every push that
		// appends does, so the move guard on it (move.go) refuses such a
		// push of a partition that moved as well.
		b.Queue(s.q.touchPartition, partition)
	}
	if len(l.idems) > 0 {
		// The last record of a key wins; one INSERT may not touch a key twice.
		last := map[[2]string]int{}
		for i, r := range l.idems {
			last[[2]string{r.ClientID, r.ClientCommitID}] = i
		}
		var clients, ccids []string
		var statuses []int16
		var seqs, pos []int64
		var results [][]byte
		for i, r := range l.idems {
			if last[[2]string{r.ClientID, r.ClientCommitID}] != i {
				continue
			}
			clients = append(clients, r.ClientID)
			ccids = append(ccids, r.ClientCommitID)
			statuses = append(statuses, int16(r.Status))
			seqs = append(seqs, r.CommitSeq)
			results = append(results, r.Result)
			pos = append(pos, l.idemPos[i])
		}
		b.Queue(s.q.putIdems, partition, clients, ccids, statuses, seqs, results, pos)
	}
}
