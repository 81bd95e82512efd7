// Package pgtest gives tests a PostgreSQL-backed storage with a private
// schema. Tests find the server through SYNCLANE_TEST_POSTGRES (a pgx URL
// such as postgres://postgres@127.0.0.1:5432/test?sslmode=disable); when it
// is unset they are skipped, unless SYNCLANE_REQUIRE_POSTGRES=1, which makes
// them fail instead.
package pgtest

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/synclane/synclane/storage/postgres"
)

// URL returns the test server URL, or skips (or fails) t when none is
// configured.
func URL(t testing.TB) string {
	t.Helper()
	u := os.Getenv("SYNCLANE_TEST_POSTGRES")
	if u == "" {
		if os.Getenv("SYNCLANE_REQUIRE_POSTGRES") == "1" {
			t.Fatal("SYNCLANE_REQUIRE_POSTGRES=1 but SYNCLANE_TEST_POSTGRES is unset")
		}
		t.Skip("PostgreSQL not configured: set SYNCLANE_TEST_POSTGRES to a pgx URL of a database the tests may create schemas in (e.g. postgres://postgres@127.0.0.1:5432/test?sslmode=disable); SYNCLANE_REQUIRE_POSTGRES=1 makes this a failure")
	}
	return u
}

// NewSchema creates a fresh schema named synclane_test_<random hex> and
// registers a t.Cleanup that drops it with CASCADE. Cleanups registered
// after NewSchema (such as closing stores on it) run before the drop.
func NewSchema(t testing.TB) string {
	t.Helper()
	u := URL(t)
	name := "synclane_test_" + strings.ReplaceAll(uuid.NewString(), "-", "")
	exec(t, u, "CREATE SCHEMA "+pgx.Identifier{name}.Sanitize())
	t.Cleanup(func() { exec(t, u, "DROP SCHEMA IF EXISTS "+pgx.Identifier{name}.Sanitize()+" CASCADE") })
	return name
}

func exec(t testing.TB, url, sql string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("pgtest: connect: %v", err)
	}
	defer func() { _ = conn.Close(ctx) }()
	if _, err := conn.Exec(ctx, sql); err != nil {
		t.Fatalf("pgtest: %s: %v", sql, err)
	}
}

// Open returns a Store on a fresh schema, with a small pool (4
// connections), closed and its schema dropped when t ends. EnsureSchema has
// not run.
func Open(t testing.TB) *postgres.Store {
	t.Helper()
	return OpenSchema(t, NewSchema(t), postgres.Options{MaxConns: 4})
}

// OpenSchema returns a Store on an existing schema (for several stores,
// i.e. several "processes", sharing one database), closed when t ends.
// opts.Schema is set to schema.
func OpenSchema(t testing.TB, schema string, opts postgres.Options) *postgres.Store {
	t.Helper()
	opts.Schema = schema
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := postgres.Open(ctx, URL(t), opts)
	if err != nil {
		t.Fatalf("pgtest: open: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("pgtest: close: %v", err)
		}
	})
	return s
}
