package lease

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// KeyFileName is the file, in the data directory of the embedded mode,
// that holds the lease signing key when none is given.
const KeyFileName = "lease.key"

// LoadOrCreateKeyFile returns the signing key stored at path (64
// lowercase hex digits, 32 bytes), creating the file with a fresh random
// key (mode 0600; written whole to a temporary file and linked into place,
// so two processes starting at once end up with the same key) when it does not exist. created reports
// whether this call made it. A file that is not such a key is an error:
// the server refuses to start rather than sign with a key it cannot read.
func LoadOrCreateKeyFile(path string) (key []byte, created bool, err error) {
	if key, err := readKeyFile(path); !errors.Is(err, fs.ErrNotExist) {
		return key, false, err
	}
	fresh := make([]byte, MinKeyBytes)
	if _, err := rand.Read(fresh); err != nil {
		return nil, false, fmt.Errorf("lease key: %w", err)
	}
	// Write a temporary file whole, then link it into place: the link
	// fails if the key exists, so a reader never sees a partial key and
	// the first process to link wins.
	tmp, err := os.CreateTemp(filepath.Dir(path), ".lease.key-*")
	if err != nil {
		return nil, false, fmt.Errorf("lease key: %w", err)
	}
	defer os.Remove(tmp.Name())
	_, werr := tmp.WriteString(hex.EncodeToString(fresh) + "\n")
	cherr := tmp.Chmod(0o600)
	serr := tmp.Sync()
	cerr := tmp.Close()
	if err := errors.Join(werr, cherr, serr, cerr); err != nil {
		return nil, false, fmt.Errorf("lease key: write %s: %w", tmp.Name(), err)
	}
	if err := os.Link(tmp.Name(), path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			key, err := readKeyFile(path) // another process won the race
			return key, false, err
		}
		return nil, false, fmt.Errorf("lease key: create %s: %w", path, err)
	}
	return fresh, true, nil
}

func readKeyFile(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		return nil, fmt.Errorf("lease key: read %s: %w", path, err)
	}
	key, err := hex.DecodeString(strings.TrimSpace(string(b)))
	if err != nil || len(key) < MinKeyBytes {
		return nil, fmt.Errorf("lease key: %s must hold at least %d bytes as hex digits", path, MinKeyBytes)
	}
	return key, nil
}
