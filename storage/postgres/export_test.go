package postgres

import (
	"context"

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
