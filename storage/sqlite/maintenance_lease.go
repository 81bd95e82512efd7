package sqlite

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/synclane/synclane/storage"
)

// The maintenance lease is the sync_meta row 'maintenance_lease' whose
// value is "HOLDER UNTIL_MS SINCE_MS PID HOST": HOLDER names the store
// handle, UNTIL_MS is when the lease lapses unless renewed. The holder
// renews it every third of Options.MaintenanceLease while it holds it (a
// goroutine owned by the unlock function, stopped by it or by Close), so
// a process killed during a pass blocks maintenance for at most one lease.

// leaseValue formats the lease row of holder.
func leaseValue(holder string, until, since time.Time) string {
	host, _ := os.Hostname()
	host = strings.Join(strings.Fields(host), "_")
	return fmt.Sprintf("%s %d %d %d %s", holder, until.UnixMilli(), since.UnixMilli(), os.Getpid(), host)
}

// parseLease reads a lease row; ok is false for a value that names no
// holder or no expiry (treated as free).
func parseLease(v string) (storage.MaintenanceHolder, bool) {
	f := strings.SplitN(v, " ", 5)
	if len(f) < 2 || f[0] == "" {
		return storage.MaintenanceHolder{}, false
	}
	until, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return storage.MaintenanceHolder{}, false
	}
	h := storage.MaintenanceHolder{Holder: f[0], Expires: time.UnixMilli(until)}
	if len(f) >= 3 {
		if since, err := strconv.ParseInt(f[2], 10, 64); err == nil {
			h.Since = time.UnixMilli(since)
		}
	}
	if len(f) >= 4 {
		h.PID, _ = strconv.Atoi(f[3])
	}
	if len(f) >= 5 {
		h.Host = f[4]
	}
	return h, true
}

// MaintenanceHolder reads the maintenance lease: ok is false when nobody
// holds it (no row, or an expired one).
func (s *Store) MaintenanceHolder(ctx context.Context) (storage.MaintenanceHolder, bool, error) {
	var v string
	err := s.readQueryRow(ctx, `SELECT value FROM sync_meta WHERE key = 'maintenance_lease'`).Scan(&v)
	if isNoRows(err) {
		return storage.MaintenanceHolder{}, false, nil
	}
	if err != nil {
		return storage.MaintenanceHolder{}, false, fmt.Errorf("sqlite: read the maintenance lease: %w", err)
	}
	h, ok := parseLease(v)
	if !ok || !h.Expires.After(s.now()) {
		return storage.MaintenanceHolder{}, false, nil
	}
	return h, true, nil
}

// TryLockMaintenance takes the maintenance lease in one write transaction,
// so two processes on one database file never both hold it (nor two calls
// on one store: it is not re-entrant). While held it is renewed every
// third of Options.MaintenanceLease; a lease left by a process that died
// lapses at most one lease (60 s by default) after its last renewal.
func (s *Store) TryLockMaintenance(ctx context.Context) (func(), bool, error) {
	if _, _, _, err := s.current(); err != nil {
		return nil, false, fmt.Errorf("sqlite: maintenance lock: %w", err)
	}
	if err := s.lock(ctx); err != nil {
		return nil, false, fmt.Errorf("sqlite: maintenance lock: %w", err)
	}
	holder := s.holder
	since := s.now()
	ok := false
	err := s.inWriteTx(ctx, "maintenance lock", func(ctx context.Context) error {
		var v string
		err := s.conn.QueryRowContext(ctx, `SELECT value FROM sync_meta WHERE key = 'maintenance_lease'`).Scan(&v)
		if err != nil && !isNoRows(err) {
			return err
		}
		if err == nil {
			if h, held := parseLease(v); held && h.Expires.After(since) {
				return nil // held (by another handle, or this one: the lock is not re-entrant)
			}
		}
		_, err = s.conn.ExecContext(ctx, `INSERT INTO sync_meta(key, value) VALUES('maintenance_lease', ?)
			ON CONFLICT(key) DO UPDATE SET value = excluded.value`, leaseValue(holder, since.Add(s.leaseTTL), since))
		ok = err == nil
		return err
	})
	s.unlock()
	if err != nil || !ok {
		return nil, false, err
	}
	stop, done := make(chan struct{}), make(chan struct{})
	go s.renewLease(since, stop, done)
	released := false
	return func() {
		if released {
			return
		}
		released = true
		close(stop)
		<-done
		uctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.lock(uctx); err != nil {
			return // the lease lapses by itself
		}
		defer s.unlock()
		_ = s.inWriteTx(uctx, "maintenance unlock", func(ctx context.Context) error {
			_, err := s.conn.ExecContext(ctx, `DELETE FROM sync_meta WHERE key = 'maintenance_lease' AND value LIKE ? || ' %'`, holder)
			return err
		})
	}, true, nil
}

// renewLease extends this store's lease every third of its length until
// stop closes or the store closes; it closes done when it returns.
func (s *Store) renewLease(since time.Time, stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(max(s.leaseTTL/3, time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-s.closed:
			return
		case <-t.C:
		}
		if err := s.renewOnce(since); err != nil {
			s.log.Warn("sqlite: renewing the maintenance lease failed", zap.Error(err))
		}
	}
}

// renewOnce moves this store's lease expiry one lease ahead of now; it
// fails when the row no longer names this store (it lapsed and another
// process took it).
func (s *Store) renewOnce(since time.Time) error {
	ctx, cancel := context.WithTimeout(context.Background(), max(s.leaseTTL/3, time.Second))
	defer cancel()
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.unlock()
	return s.inWriteTx(ctx, "maintenance lease renewal", func(ctx context.Context) error {
		r, err := s.conn.ExecContext(ctx, `UPDATE sync_meta SET value = ? WHERE key = 'maintenance_lease' AND value LIKE ? || ' %'`,
			leaseValue(s.holder, s.now().Add(s.leaseTTL), since), s.holder)
		if err != nil {
			return err
		}
		if n, _ := r.RowsAffected(); n == 0 {
			return fmt.Errorf("the lease row no longer names this store (it lapsed and another process took it)")
		}
		return nil
	})
}
