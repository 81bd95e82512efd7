package postgres_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/synclane/synclane/storage/postgres"
	"github.com/synclane/synclane/storage/postgres/pgtest"
)

type report struct {
	partition string
	seq       int64
}

// waitFor reads reports until one for partition with seq >= want arrives.
func waitFor(t *testing.T, ch <-chan report, partition string, want int64) {
	t.Helper()
	timeout := time.NewTimer(10 * time.Second)
	defer timeout.Stop()
	for {
		select {
		case r := <-ch:
			if r.partition == partition && r.seq >= want {
				return
			}
		case <-timeout.C:
			t.Fatalf("no report of %s seq %d within 10s", partition, want)
		}
	}
}

func TestNotifierAcrossStores(t *testing.T) {
	a, b, _ := twoStores(t, 4)
	ctx := t.Context()
	ch := make(chan report, 1024)
	n, err := b.Listen(ctx, func(p string, seq int64) { ch <- report{p, seq} })
	if err != nil {
		t.Fatal(err)
	}
	reconnected := make(chan struct{}, 1)
	postgres.SetReconnectHook(n, func() { reconnected <- struct{}{} })

	if _, err := pushOne(ctx, a, "pn", "k1"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ch, "pn", 1)

	// Kill the listener's backend. A commit made right after must still be
	// reported (by the old connection if it was not gone yet, else by the
	// resync after reconnecting), and the notifier must reconnect.
	pid := postgres.NotifierPID(n)
	var killed bool
	if err := a.Pool().QueryRow(ctx, `SELECT pg_terminate_backend($1)`, int32(pid)).Scan(&killed); err != nil || !killed {
		t.Fatalf("pg_terminate_backend(%d) = %v, %v", pid, killed, err)
	}
	if _, err := pushOne(ctx, a, "pn", "k2"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ch, "pn", 2)
	select {
	case <-reconnected:
	case <-time.After(10 * time.Second):
		t.Fatal("notifier did not reconnect within 10s")
	}
	if got := postgres.NotifierPID(n); got == pid || got == 0 {
		t.Fatalf("listener PID after reconnect = %d (killed %d)", got, pid)
	}
	if n.Reconnects() != 1 {
		t.Fatalf("Reconnects() = %d, want 1", n.Reconnects())
	}
	// The resync reported the state as of the reconnect; a later commit is
	// delivered by the new connection.
	if _, err := pushOne(ctx, a, "pn", "k3"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ch, "pn", 3)

	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-n.Done():
	default:
		t.Fatal("Done not closed after Close")
	}
}

func TestNotifierStoppedByContextAndStoreClose(t *testing.T) {
	_, b, _ := twoStores(t, 2)
	ctx, cancel := context.WithCancel(t.Context())
	n1, err := b.Listen(ctx, func(string, int64) {})
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	select {
	case <-n1.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("notifier still running after its context was cancelled")
	}
	n2, err := b.Listen(t.Context(), func(string, int64) {})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-n2.Done():
	default:
		t.Fatal("Store.Close returned with a notifier still running")
	}
	if _, err := b.Listen(t.Context(), func(string, int64) {}); err == nil {
		t.Fatal("Listen on a closed store succeeded")
	}
}

// TestSubscribeReportsCommitsMadeBeforeIt: a subscriber that starts late
// (or subscribes again after its feed failed) is told every partition's
// max_commit_seq once LISTEN is active, so a commit another process made
// while it was not listening is not missed.
func TestSubscribeReportsCommitsMadeBeforeIt(t *testing.T) {
	a, b, _ := twoStores(t, 4)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	if _, err := pushOne(ctx, a, "early", "k1"); err != nil {
		t.Fatal(err)
	}
	ch := make(chan report, 1024)
	done := make(chan error, 1)
	go func() { done <- b.Subscribe(ctx, func(p string, seq int64) { ch <- report{p, seq} }) }()
	waitFor(t, ch, "early", 1)
	cancel()
	if err := <-done; err != context.Canceled {
		t.Fatalf("Subscribe returned %v after its context ended", err)
	}
}

// TestOpenRefusesAPoolOfOne: a pool of one connection would wedge the
// first maintenance pass (it holds one connection for its lock and waits
// for another), so Open refuses it.
func TestOpenRefusesAPoolOfOne(t *testing.T) {
	st, err := postgres.Open(t.Context(), pgtest.URL(t), postgres.Options{MaxConns: 1})
	if err == nil {
		st.Close()
		t.Fatal("Open accepted MaxConns 1")
	}
	if !strings.Contains(err.Error(), "at least 2") {
		t.Errorf("Open(MaxConns 1): %v; want the minimum named", err)
	}
}

// A store with DisableNotify commits without pg_notify: a listener on its
// channel hears the commit of a notifying store made after it first
// (notifications arrive in commit order), and nothing of the silent one.
func TestDisableNotify(t *testing.T) {
	name := pgtest.NewSchema(t)
	sch := mustSchema(t)
	silent := pgtest.OpenSchema(t, name, postgres.Options{MaxConns: 4, DisableNotify: true})
	loud := pgtest.OpenSchema(t, name, postgres.Options{MaxConns: 4})
	for _, s := range []*postgres.Store{silent, loud} {
		if err := s.EnsureSchema(t.Context(), sch); err != nil {
			t.Fatal(err)
		}
	}
	ctx := t.Context()
	conn, err := pgx.Connect(ctx, pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close(context.Background()) }()
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{postgres.NotifyChannelFor(name)}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	if _, err := pushOne(ctx, silent, "quiet", "k1"); err != nil {
		t.Fatal(err)
	}
	if _, err := pushOne(ctx, loud, "loud", "k1"); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	n, err := conn.WaitForNotification(wctx)
	if err != nil {
		t.Fatalf("no notification of the notifying store's commit: %v", err)
	}
	if !strings.HasPrefix(n.Payload, "loud\t") {
		t.Fatalf("first notification %q, want the notifying store's (partition loud)", n.Payload)
	}
}

// The notifier never uses the store's pool: with every pool connection
// held (a busy pool, or one whose connections wait on a database that just
// came back), a notifier whose connection was lost reconnects, reports
// every partition's max_commit_seq (the resync, read on its own
// connection) and delivers the next commit.
func TestNotifierReconnectsWithThePoolExhausted(t *testing.T) {
	a, b, _ := twoStores(t, 2)
	ctx := t.Context()
	if _, err := pushOne(ctx, a, "busy", "k1"); err != nil {
		t.Fatal(err)
	}
	ch := make(chan report, 1024)
	n, err := b.Listen(ctx, func(p string, seq int64) { ch <- report{p, seq} })
	if err != nil {
		t.Fatal(err)
	}
	reconnected := make(chan struct{}, 1)
	postgres.SetReconnectHook(n, func() { reconnected <- struct{}{} })
	held := make([]interface{ Release() }, 0, 2)
	for range 2 { // b's whole pool
		c, err := b.Pool().Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	defer func() {
		for _, c := range held {
			c.Release()
		}
	}()
	if got := b.Pool().Stat().AcquiredConns(); got != 2 {
		t.Fatalf("%d connections acquired, want the whole pool (2)", got)
	}
	pid := postgres.NotifierPID(n)
	var killed bool
	if err := a.Pool().QueryRow(ctx, `SELECT pg_terminate_backend($1)`, int32(pid)).Scan(&killed); err != nil || !killed {
		t.Fatalf("pg_terminate_backend(%d) = %v, %v", pid, killed, err)
	}
	select {
	case <-reconnected:
	case <-time.After(10 * time.Second):
		t.Fatal("notifier did not reconnect within 10s while the pool was exhausted")
	}
	waitFor(t, ch, "busy", 1) // the resync's report
	if _, err := pushOne(ctx, a, "busy", "k2"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ch, "busy", 2)
}

// Open bounds every new connection: a connection attempt holds a pool
// slot until it ends, so one stalled by a database that went away must
// not hold it for long. connect_timeout in the URL wins.
func TestOpenBoundsConnectionAttempts(t *testing.T) {
	u := pgtest.URL(t)
	st, err := postgres.Open(t.Context(), u, postgres.Options{MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if got := st.Pool().Config().ConnConfig.ConnectTimeout; got != postgres.DefaultConnectTimeout {
		t.Errorf("connect timeout %v, want %v", got, postgres.DefaultConnectTimeout)
	}
	sep := "?"
	if strings.Contains(u, "?") {
		sep = "&"
	}
	st2, err := postgres.Open(t.Context(), u+sep+"connect_timeout=2", postgres.Options{MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer st2.Close()
	if got := st2.Pool().Config().ConnConfig.ConnectTimeout; got != 2*time.Second {
		t.Errorf("connect timeout with connect_timeout=2: %v, want 2s", got)
	}
}
