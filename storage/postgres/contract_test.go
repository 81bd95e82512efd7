package postgres_test

import (
	"testing"

	"github.com/synclane/synclane/storage"
	"github.com/synclane/synclane/storage/postgres/pgtest"
	"github.com/synclane/synclane/storage/storagetest"
)

func TestContract(t *testing.T) {
	storagetest.Run(t, func(t *testing.T) storage.Store { return pgtest.Open(t) })
}
