package postgres

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/synclane/synclane/storage"
)

// NotifierPID returns the backend PID of the notifier's current listener
// connection (0 while reconnecting).
func NotifierPID(n *Notifier) uint32 {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.conn == nil {
		return 0
	}
	return n.conn.PgConn().PID()
}

// SetReconnectHook makes n call fn after each successful reconnect.
func SetReconnectHook(n *Notifier, fn func()) {
	n.mu.Lock()
	n.onReconnect = fn
	n.mu.Unlock()
}

// PushTxPID returns the backend PID of a PushTx's connection.
func PushTxPID(tx storage.PushTx) uint32 { return tx.(*pushTx).conn.Conn().PgConn().PID() }

// SetBumpHook makes EnsureSchema's bump transaction call fn just before it
// commits, while it holds the EXCLUSIVE lock on sync_partitions.
func SetBumpHook(s *Store, fn func(ctx context.Context)) { s.bumpHook = fn }

// ChangeRangeSQL returns the statement (and its arguments) ScanChanges
// runs for the page of q's changes in (after, upTo], at most limit.
func ChangeRangeSQL(s *Store, partition string, q storage.ChangeQuery, after, upTo int64, limit int) (string, []any) {
	return s.changeRangeSQL(partition, q, slices.Sorted(maps.Keys(q.Scopes)), rangeArgs{after: after, upTo: upTo, limit: limit})
}

// ChangeCompletionSQL returns the statement (and its arguments)
// ScanChanges runs to complete commit seq after change index afterIdx.
func ChangeCompletionSQL(s *Store, partition string, q storage.ChangeQuery, seq int64, afterIdx int32) (string, []any) {
	return s.changeRangeSQL(partition, q, slices.Sorted(maps.Keys(q.Scopes)), rangeArgs{onlySeq: seq, afterIdx: afterIdx})
}

// ColumnScanSQL returns the statement ScanByColumn runs on column col of
// table (after: a page after a row id).
func ColumnScanSQL(s *Store, table string, col int, after bool) (string, error) {
	ts, err := s.table(table)
	if err != nil {
		return "", err
	}
	return ts.columnScanSQL(col, after), nil
}

// ReadGateSQL runs the serve-gate statement for partition, or with
// withOwner false the same statement without its owner_generation
// column (the gate before the cluster-outage work), and scans it.
func ReadGateSQL(ctx context.Context, s *Store, partition string, running int32, withOwner bool) error {
	q := s.gateSQL()
	var gen int64
	var epoch string
	var schemaVersion int32
	var horizon int64
	var parts, names []string
	dest := []any{&schemaVersion, &epoch, &horizon, &gen, &parts, &names}
	if !withOwner {
		line := "\tcoalesce((SELECT owner_generation FROM " + s.q.partitions + " WHERE partition = $1), 0),\n"
		if !strings.Contains(q, line) {
			return fmt.Errorf("gate SQL has no owner_generation line: %s", q)
		}
		q = strings.Replace(q, line, "", 1)
		dest = []any{&schemaVersion, &epoch, &horizon, &parts, &names}
	}
	return s.pool.QueryRow(ctx, q, partition, running).Scan(dest...)
}
