package sqlite

import (
	"context"
	"encoding/json"
	"fmt"
	"math/bits"
	"strings"

	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage"
)

// Deferred log writes.
//
// A push transaction does not write its log records (commit rows, change
// rows, scope-index entries, idempotency records) as they come: it keeps
// them in a pendingLog, hands it to its commit group at Commit (group.go),
// and the group writes the records of all its members with a few
// multi-row INSERTs per table, in the same transaction, right before its
// COMMIT (flushGroup). Everything a record could be refused for is
// checked when it is added (storage.CheckCommit, storage.CheckIdempotency,
// the scopes' JSON) or, for the writer fence, at the member's Commit
// (fencedIn), so only an I/O failure can fail the flush, and then the
// whole group fails, as when its COMMIT fails.

// pendingLog is a push transaction's deferred log records.
type pendingLog struct {
	commits []pendingCommit
	idems   []pendingIdem
	// latest maps an idempotency key to the index of its latest record in
	// idems.
	latest map[idemKey]int
}

type pendingCommit struct {
	c storage.CommitRecord
	// scopes are the JSON encodings of the changes' scopes.
	scopes []string
}

type pendingIdem struct {
	rec storage.IdempotencyRecord
	pos int64 // log_seq: the transaction's max commit seq at the put
}

type idemKey struct{ client, commit string }

// logMark is a position in a pendingLog, for RollbackToSavepoint.
type logMark struct{ commits, idems int }

func (l *pendingLog) mark() logMark { return logMark{len(l.commits), len(l.idems)} }

// reset drops the records added since m.
func (l *pendingLog) reset(m logMark) {
	clear(l.commits[m.commits:])
	l.commits = l.commits[:m.commits]
	if len(l.idems) == m.idems {
		return
	}
	clear(l.idems[m.idems:])
	l.idems = l.idems[:m.idems]
	clear(l.latest)
	for i, r := range l.idems {
		l.latest[idemKey{r.rec.ClientID, r.rec.ClientCommitID}] = i
	}
}

// appendCommit adds c, encoding its changes' scopes now so that the flush
// cannot fail on them.
func (l *pendingLog) appendCommit(c storage.CommitRecord) error {
	scopes := make([]string, len(c.Changes))
	for i, ch := range c.Changes {
		b, err := json.Marshal(ch.Scopes)
		if err != nil {
			return fmt.Errorf("sqlite: append commit %d change %d: scopes: %w", c.Seq, i, err)
		}
		scopes[i] = string(b)
	}
	l.commits = append(l.commits, pendingCommit{c: c, scopes: scopes})
	return nil
}

func (l *pendingLog) putIdempotency(rec storage.IdempotencyRecord, pos int64) {
	if l.latest == nil {
		l.latest = map[idemKey]int{}
	}
	l.latest[idemKey{rec.ClientID, rec.ClientCommitID}] = len(l.idems)
	l.idems = append(l.idems, pendingIdem{rec, pos})
}

// idempotency returns a copy of the latest pending record of the key, or
// nil.
func (l *pendingLog) idempotency(clientID, clientCommitID string) *storage.IdempotencyRecord {
	i, ok := l.latest[idemKey{clientID, clientCommitID}]
	if !ok {
		return nil
	}
	r := l.idems[i].rec
	r.Result = append([]byte(nil), r.Result...)
	return &r
}

// maxBulkRows bounds the rows of one multi-row INSERT (9 variables a row
// at most: far below SQLite's variable limit). Chunks are powers of two,
// so at most a handful of statement shapes per table are prepared.
const maxBulkRows = 64

// bulkTable is one log table's multi-row INSERT, one statement text per
// power-of-two row count up to maxBulkRows.
type bulkTable struct {
	width int       // variables per row
	sqls  [7]string // sqls[k] inserts 1<<k rows
}

func newBulkTable(head, row, tail string, width int) *bulkTable {
	b := &bulkTable{width: width}
	for k := range b.sqls {
		b.sqls[k] = head + strings.TrimSuffix(strings.Repeat(row+", ", 1<<k), ", ") + tail
	}
	return b
}

var (
	bulkCommits = newBulkTable(`INSERT INTO sync_commits(partition_id, seq, created_at_ms, actor_id, client_id, client_commit_id, writer_version) VALUES `,
		`(?, ?, ?, ?, ?, ?, ?)`, ``, 7)
	bulkChanges = newBulkTable(`INSERT INTO sync_changes(partition_id, commit_seq, idx, table_name, row_id, op, row_version, scopes, row) VALUES `,
		`(?, ?, ?, ?, ?, ?, ?, ?, ?)`, ``, 9)
	bulkScopes = newBulkTable(`INSERT OR IGNORE INTO sync_change_scopes(partition_id, table_name, scope_key, commit_seq) VALUES `,
		`(?, ?, ?, ?)`, ``, 4)
	bulkIdems = newBulkTable(`INSERT INTO sync_idempotency(partition_id, client_id, client_commit_id, status, commit_seq, result, log_seq) VALUES `,
		`(?, ?, ?, ?, ?, ?, ?)`,
		` ON CONFLICT(partition_id, client_id, client_commit_id) DO UPDATE SET status = excluded.status, commit_seq = excluded.commit_seq, result = excluded.result, log_seq = excluded.log_seq`, 7)
)

// write runs the statement for the rows whose values args holds (width
// per row, in order) on the writer connection, in chunks of powers of two
// rows. The caller holds the lock.
func (b *bulkTable) write(ctx context.Context, s *Store, args []any) error {
	for len(args) > 0 {
		n := min(len(args)/b.width, maxBulkRows)
		k := bits.Len(uint(n)) - 1 // 1<<k is the largest power of two <= n
		st, err := s.writerStmt(ctx, b.sqls[k])
		if err != nil {
			return err
		}
		rows := (1 << k) * b.width
		if _, err := st.ExecContext(ctx, args[:rows]...); err != nil {
			return err
		}
		args = args[rows:]
	}
	return nil
}

// flushGroup writes the deferred log records and MaxCommitSeq of every
// member that committed in g, in the open transaction: the log records
// with multi-row INSERTs across members. Every member was checked against
// the writer fence at its Commit (fencedIn), so the fence trigger does not
// fire here; if it did, the error wraps storage.ErrWriterFenced and the
// whole group fails. The caller holds the lock.
func (s *Store) flushGroup(ctx context.Context, g *commitGroup) error {
	if len(g.logs) == 0 {
		return nil
	}
	args := s.flushArgs[:0]
	defer func() { clear(args); s.flushArgs = args[:0] }()
	var firstSeq int64 = -1
	for _, m := range g.logs {
		for _, pc := range m.log.commits {
			c := pc.c
			if firstSeq < 0 {
				firstSeq = c.Seq
			}
			args = append(args, m.partition, c.Seq, c.CreatedAtMs, c.ActorID, c.ClientID, c.ClientCommitID, m.running)
		}
	}
	if err := bulkCommits.write(ctx, s, args); err != nil {
		return classifyAppend(err, firstSeq)
	}
	args = args[:0]
	for _, m := range g.logs {
		for _, pc := range m.log.commits {
			for i, ch := range pc.c.Changes {
				var row any
				if ch.Op == ssp2.OpUpsert || ch.Row != nil {
					row = ch.Row
				}
				args = append(args, m.partition, pc.c.Seq, i, ch.Table, ch.RowID, int64(ch.Op), ch.RowVersion, pc.scopes[i], row)
			}
		}
	}
	if err := bulkChanges.write(ctx, s, args); err != nil {
		return fmt.Errorf("sqlite: append commits: changes: %w", err)
	}
	args = args[:0]
	if s.flushKeys == nil {
		s.flushKeys = map[string]struct{}{}
	}
	keys := s.flushKeys
	for _, m := range g.logs {
		for _, pc := range m.log.commits {
			clear(keys)
			for _, ch := range pc.c.Changes {
				for v, val := range ch.Scopes {
					k := ch.Table + "\x00" + v + "\x00" + val
					if _, dup := keys[k]; dup {
						continue
					}
					keys[k] = struct{}{}
					args = append(args, m.partition, ch.Table, v+"\x00"+val, pc.c.Seq)
				}
			}
		}
	}
	clear(keys)
	if err := bulkScopes.write(ctx, s, args); err != nil {
		return fmt.Errorf("sqlite: append commits: scope index: %w", err)
	}
	args = args[:0]
	for _, m := range g.logs {
		l := m.log
		for i, r := range l.idems {
			if l.latest[idemKey{r.rec.ClientID, r.rec.ClientCommitID}] != i {
				continue // a later record of the key replaces this one
			}
			args = append(args, m.partition, r.rec.ClientID, r.rec.ClientCommitID, int64(r.rec.Status), r.rec.CommitSeq, r.rec.Result, r.pos)
		}
	}
	if err := bulkIdems.write(ctx, s, args); err != nil {
		return fmt.Errorf("sqlite: put idempotency: %w", err)
	}
	// One UPDATE per partition: a multi-row UPDATE ... FROM (VALUES ...)
	// materializes its rows first and cost a single-member group more
	// than the plain statement.
	st, err := s.writerStmt(ctx, `UPDATE sync_partitions SET max_commit_seq = ? WHERE partition_id = ?`)
	if err != nil {
		return fmt.Errorf("sqlite: record max seq: %w", err)
	}
	for _, m := range g.logs {
		if m.setMax {
			if _, err := st.ExecContext(ctx, m.max, m.partition); err != nil {
				return fmt.Errorf("sqlite: record max seq: %w", err)
			}
		}
	}
	return nil
}
