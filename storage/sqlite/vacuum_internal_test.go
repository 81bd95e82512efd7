package sqlite

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/synclane/synclane/storage"
)

// VacuumFile refuses while a store has the database open, and returns a
// file with free pages to the file system once it is closed.
func TestVacuumFileShrinksAndRefusesWhileOpen(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "sync.db")
	s := openLeaseStore(t, path, Options{})
	for i := range 400 {
		tx, err := s.BeginPush(ctx, "p")
		if err != nil {
			t.Fatal(err)
		}
		big := make([]byte, 4096)
		if err := tx.PutIdempotency(ctx, storage.IdempotencyRecord{ClientID: "w", ClientCommitID: "k" + string(rune('a'+i%26)) + string(rune('a'+i/26)),
			Status: 3, Result: big}); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.conn.ExecContext(ctx, `DELETE FROM sync_idempotency`); err != nil {
		t.Fatal(err)
	}
	sp, err := s.Space(ctx)
	if err != nil || sp.FreePages < 100 {
		t.Fatalf("space after deleting: %+v %v, want free pages", sp, err)
	}
	if _, _, err := VacuumFile(ctx, path); !errors.Is(err, ErrInUse) {
		t.Fatalf("VacuumFile with a store open: %v, want ErrInUse", err)
	}
	s.Close()
	before, after, err := VacuumFile(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if before.FreePages < 100 || after.FreePages != 0 || after.Pages >= before.Pages || fi.Size() != after.Bytes() {
		t.Fatalf("vacuum: before %+v, after %+v, file %d bytes", before, after, fi.Size())
	}
	// The vacuumed file opens as a store again.
	s2 := openLeaseStore(t, path, Options{})
	if _, err := s2.ListPartitions(ctx); err != nil {
		t.Fatal(err)
	}
}
