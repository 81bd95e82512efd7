package homes_test

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/synclane/synclane/storage/postgres"
	"github.com/synclane/synclane/storage/postgres/homes"
	"github.com/synclane/synclane/storage/postgres/pgtest"
)

// newSchema creates a fresh schema in the database at url and drops it
// when t ends (after the cleanups registered later, such as closing
// stores on it).
func newSchema(t testing.TB, url string) string {
	t.Helper()
	name := "synclane_test_" + strings.ReplaceAll(uuid.NewString(), "-", "")
	exec(t, url, "CREATE SCHEMA "+pgx.Identifier{name}.Sanitize())
	t.Cleanup(func() { exec(t, url, "DROP SCHEMA IF EXISTS "+pgx.Identifier{name}.Sanitize()+" CASCADE") })
	return name
}

func exec(t testing.TB, url, sql string) {
	t.Helper()
	// Generous: DROP DATABASE waits for a checkpoint, slow on a busy
	// shared server.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer func() { _ = conn.Close(ctx) }()
	if _, err := conn.Exec(ctx, sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// openStore opens a store on schema of the database at url, closed when
// t ends unless handed to Homes (whose Close closes it; Close is
// idempotent).
func openStore(t testing.TB, url, schema string, opts postgres.Options) *postgres.Store {
	t.Helper()
	opts.Schema = schema
	if opts.MaxConns == 0 {
		opts.MaxConns = 4
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := postgres.Open(ctx, url, opts)
	if err != nil {
		t.Fatalf("open %s: %v", schema, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// place is a placement of a deployment: each home's database URL and
// schema, main first.
type place struct {
	names, urls, schemas []string
}

// open opens a Homes on p, closed when t ends.
func (p place) open(t testing.TB, opts postgres.Options) *homes.Homes {
	t.Helper()
	main := openStore(t, p.urls[0], p.schemas[0], opts)
	var others []homes.Home
	for i := 1; i < len(p.names); i++ {
		others = append(others, homes.Home{Name: p.names[i], Store: openStore(t, p.urls[i], p.schemas[i], opts)})
	}
	h, err := homes.Open(main, others, homes.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close() })
	return h
}

// database is a database of its own on the test server.
type database struct {
	name, url, admin string
}

// newDatabase creates a fresh database on the test server and drops it
// (WITH (FORCE)) when t ends, after the cleanups registered later.
func newDatabase(t testing.TB) *database {
	t.Helper()
	admin := pgtest.URL(t)
	name := "synclane_test_" + strings.ReplaceAll(uuid.NewString(), "-", "")
	u, err := url.Parse(admin)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	d := &database{name: name, url: u.String(), admin: admin}
	exec(t, admin, "CREATE DATABASE "+d.ident())
	t.Cleanup(func() {
		exec(t, admin, "ALTER DATABASE "+d.ident()+" ALLOW_CONNECTIONS true")
		exec(t, admin, "DROP DATABASE IF EXISTS "+d.ident()+" WITH (FORCE)")
	})
	return d
}

func (d *database) ident() string { return pgx.Identifier{d.name}.Sanitize() }

// refuseConnections makes the database refuse new connections and ends
// every session on it, as a database that went away.
func (d *database) refuseConnections(t testing.TB) {
	t.Helper()
	exec(t, d.admin, "ALTER DATABASE "+d.ident()+" ALLOW_CONNECTIONS false")
	exec(t, d.admin, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '"+d.name+"' AND pid <> pg_backend_pid()")
}

// acceptConnections lets the database accept connections again.
func (d *database) acceptConnections(t testing.TB) {
	t.Helper()
	exec(t, d.admin, "ALTER DATABASE "+d.ident()+" ALLOW_CONNECTIONS true")
}

// newPlace returns a fresh placement of two homes, "main" and "b", each
// on a schema of its own in one of the two databases t's test created.
func newPlace(t testing.TB, dbs [2]*database) place {
	t.Helper()
	return place{names: []string{homes.Main, "b"}, urls: []string{dbs[0].url, dbs[1].url},
		schemas: []string{newSchema(t, dbs[0].url), newSchema(t, dbs[1].url)}}
}

// twoDatabases creates two fresh databases on the test server, dropped
// when t ends.
func twoDatabases(t testing.TB) [2]*database {
	t.Helper()
	return [2]*database{newDatabase(t), newDatabase(t)}
}
