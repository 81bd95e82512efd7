package pgblob_test

import (
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/synclane/synclane/storage/blobstore"
	"github.com/synclane/synclane/storage/blobstore/blobstoretest"
	"github.com/synclane/synclane/storage/blobstore/pgblob"
	"github.com/synclane/synclane/storage/postgres/pgtest"
)

func TestPostgresContract(t *testing.T) {
	blobstoretest.Run(t, func(t *testing.T) blobstore.Store {
		schema := pgtest.NewSchema(t)
		pool, err := pgxpool.New(t.Context(), pgtest.URL(t))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		s, err := pgblob.New(t.Context(), pool, schema)
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}
