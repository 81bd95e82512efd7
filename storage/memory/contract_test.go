package memory_test

import (
	"testing"

	"github.com/synclane/synclane/storage"
	"github.com/synclane/synclane/storage/memory"
	"github.com/synclane/synclane/storage/storagetest"
)

func TestContract(t *testing.T) {
	storagetest.RunShared(t, func(t *testing.T) storage.Store { return memory.New() },
		func(t *testing.T, s storage.Store) storage.Store {
			h := s.(*memory.Store).Share()
			t.Cleanup(func() { _ = h.Close() })
			return h
		})
}
