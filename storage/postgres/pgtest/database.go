package pgtest

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Database is a database of its own on the test server, for tests that
// must cut a database off (an outage) without touching anyone else's: the
// shared server is never stopped or restarted, only this database refuses
// connections.
type Database struct {
	// Name is the database's name.
	Name string
	// URL connects to it (the test server's URL with the database replaced).
	URL string
	// admin connects to the server's own database, to alter this one.
	admin string
}

// NewDatabase creates a fresh database named synclane_test_<random hex> on
// the server at admin (a pgx URL whose user may CREATE DATABASE) and
// registers a t.Cleanup that lets it accept connections again and drops it
// (WITH (FORCE): connections still open are ended). Cleanups registered
// after NewDatabase (closing stores on it) run before the drop.
func NewDatabase(t testing.TB, admin string) *Database {
	t.Helper()
	name := "synclane_test_" + strings.ReplaceAll(uuid.NewString(), "-", "")
	u, err := url.Parse(admin)
	if err != nil {
		t.Fatalf("pgtest: parse %q: %v", admin, err)
	}
	u.Path = "/" + name
	d := &Database{Name: name, URL: u.String(), admin: admin}
	exec(t, admin, "CREATE DATABASE "+d.ident())
	t.Cleanup(func() {
		exec(t, admin, "ALTER DATABASE "+d.ident()+" ALLOW_CONNECTIONS true")
		exec(t, admin, "DROP DATABASE IF EXISTS "+d.ident()+" WITH (FORCE)")
	})
	return d
}

func (d *Database) ident() string { return pgx.Identifier{d.Name}.Sanitize() }

// RefuseConnections makes the database refuse new connections
// (ALLOW_CONNECTIONS false: SQLSTATE 55000) and ends every session on it
// (pg_terminate_backend), as a crashed or stopped database would, and
// waits until none is left.
func (d *Database) RefuseConnections(t testing.TB) {
	t.Helper()
	exec(t, d.admin, "ALTER DATABASE "+d.ident()+" ALLOW_CONNECTIONS false")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, d.admin)
	if err != nil {
		t.Fatalf("pgtest: connect: %v", err)
	}
	defer func() { _ = conn.Close(ctx) }()
	for {
		var left int
		err := conn.QueryRow(ctx, `SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity
			WHERE datname = $1 AND pid <> pg_backend_pid()) AS t`, d.Name).Scan(&left)
		if err != nil {
			t.Fatalf("pgtest: terminate sessions of %s: %v", d.Name, err)
		}
		if left == 0 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("pgtest: sessions of %s still alive after 30s", d.Name)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// AcceptConnections lets the database accept connections again.
func (d *Database) AcceptConnections(t testing.TB) {
	t.Helper()
	exec(t, d.admin, "ALTER DATABASE "+d.ident()+" ALLOW_CONNECTIONS true")
}
