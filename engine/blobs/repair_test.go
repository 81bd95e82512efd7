package blobs_test

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/synclane/synclane/engine/access"
	"github.com/synclane/synclane/engine/blobs"
	"github.com/synclane/synclane/engine/events"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/storage"
	"github.com/synclane/synclane/storage/blobstore"
	"github.com/synclane/synclane/storage/memory"
)

type fixture struct {
	svc   *blobs.Service
	index storage.BlobIndex
	root  string
	ring  *events.Ring
}

func newFixture(t *testing.T, checkPerPass int) *fixture {
	t.Helper()
	root := filepath.Join(t.TempDir(), "blobs")
	fs, err := blobstore.NewFS(root)
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{index: memory.New().Backend().Blobs, root: root, ring: events.NewRing(0, nil)}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	f.svc, err = blobs.New(f.index, blobs.Options{Store: fs, CheckPerPass: checkPerPass},
		blobs.Deps{Now: func() time.Time { return now }, Logger: zap.NewNop(), Events: f.ring})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *fixture) upload(t *testing.T, data []byte) error {
	t.Helper()
	return f.svc.Upload(context.Background(), blobstore.IDOf(data), "text/plain", int64(len(data)), 0, bytes.NewReader(data))
}

// lose deletes the bytes of data's blob from the filesystem store behind
// the service's back.
func (f *fixture) lose(t *testing.T, data []byte) {
	t.Helper()
	var found bool
	hex := strings.TrimPrefix(blobstore.IDOf(data), blobstore.IDPrefix)
	err := filepath.WalkDir(f.root, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.Contains(d.Name(), hex) {
			found = true
			return os.Remove(p)
		}
		return err
	})
	if err != nil || !found {
		t.Fatalf("removing the bytes of %s from %s: found %v, %v", hex, f.root, found, err)
	}
}

func (f *fixture) state(t *testing.T, data []byte) storage.BlobState {
	t.Helper()
	m, err := f.index.GetBlob(context.Background(), blobstore.IDOf(data))
	if err != nil || m == nil {
		t.Fatalf("GetBlob: %+v, %v", m, err)
	}
	return m.State
}

func (f *fixture) read(t *testing.T, data []byte) ([]byte, error) {
	t.Helper()
	rc, err := f.svc.Open(context.Background(), blobstore.IDOf(data), 0, -1)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return io.ReadAll(rc)
}

// TestOpenMarksLostBytesMissing: a download of lost bytes is
// blob.not_found and marks the blob missing; the grant then asks for the
// bytes, a re-upload stores them and the download serves them.
func TestOpenMarksLostBytesMissing(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, 0)
	data := []byte("bytes the restore forgot")
	if err := f.upload(t, data); err != nil {
		t.Fatal(err)
	}
	f.lose(t, data)
	if _, err := f.read(t, data); syncerr.CodeOf(err) != syncerr.BlobNotFound {
		t.Fatalf("Open of lost bytes: %v; want blob.not_found", err)
	}
	if st := f.state(t, data); st != storage.BlobUploading {
		t.Fatalf("state after the failed download = %d, want uploading (missing)", st)
	}
	if _, err := f.read(t, data); syncerr.CodeOf(err) != syncerr.BlobNotFound {
		t.Fatalf("second Open: %v; want blob.not_found", err)
	}
	if got := f.svc.Stats().Missing; got != 1 {
		t.Errorf("Stats.Missing = %d, want 1 (marked once)", got)
	}
	g, err := f.svc.UploadGrant(ctx, access.Identity{ActorID: "a", Partition: "p"}, blobstore.IDOf(data), int64(len(data)))
	if err != nil || g.Present || g.Token == "" {
		t.Fatalf("UploadGrant = %+v, %v; want a token", g, err)
	}
	if err := f.upload(t, data); err != nil {
		t.Fatalf("re-upload: %v", err)
	}
	if got, err := f.read(t, data); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("after the re-upload: %q, %v", got, err)
	}
	if evs := f.ring.Recent(0, 10); len(evs) != 1 || evs[0].Kind != events.BlobMissing || !strings.Contains(evs[0].Message, "download") {
		t.Errorf("events = %+v; want one blob.missing found by download", evs)
	}
}

// TestUploadAndGrantFindLostBytes: without any download first, both an
// upload-grant and an upload of a blob whose metadata says present check
// the byte store: the grant asks for the bytes, the upload stores them.
func TestUploadAndGrantFindLostBytes(t *testing.T) {
	ctx := context.Background()
	for _, via := range []string{"upload-grant", "upload"} {
		t.Run(via, func(t *testing.T) {
			f := newFixture(t, 0)
			data := []byte("found by " + via)
			if err := f.upload(t, data); err != nil {
				t.Fatal(err)
			}
			g, err := f.svc.UploadGrant(ctx, access.Identity{ActorID: "a", Partition: "p"}, blobstore.IDOf(data), int64(len(data)))
			if err != nil || !g.Present {
				t.Fatalf("UploadGrant of an intact blob = %+v, %v; want present", g, err)
			}
			f.lose(t, data)
			if via == "upload-grant" {
				g, err := f.svc.UploadGrant(ctx, access.Identity{ActorID: "a", Partition: "p"}, blobstore.IDOf(data), int64(len(data)))
				if err != nil || g.Present || g.Token == "" {
					t.Fatalf("UploadGrant of lost bytes = %+v, %v; want a token", g, err)
				}
				if st := f.state(t, data); st != storage.BlobUploading {
					t.Fatalf("state after the grant = %d, want uploading (missing)", st)
				}
			}
			wrong := append([]byte("X"), data[1:]...)
			if err := f.svc.Upload(ctx, blobstore.IDOf(data), "", int64(len(wrong)), 0, bytes.NewReader(wrong)); syncerr.CodeOf(err) != syncerr.BlobHashMismatch {
				t.Fatalf("upload of other bytes: %v; want blob.hash_mismatch", err)
			}
			if _, err := f.read(t, data); syncerr.CodeOf(err) != syncerr.BlobNotFound {
				t.Fatalf("Open after the refused upload: %v; want blob.not_found", err)
			}
			if err := f.upload(t, data); err != nil {
				t.Fatalf("re-upload: %v", err)
			}
			if got, err := f.read(t, data); err != nil || !bytes.Equal(got, data) {
				t.Fatalf("after the re-upload: %q, %v", got, err)
			}
			if got := f.svc.Stats().Missing; got != 1 {
				t.Errorf("Stats.Missing = %d, want 1", got)
			}
		})
	}
}

// TestSweepChecksPresentBlobsInTurn: each sweep checks CheckPerPass
// present blobs, resuming where the last pass stopped and wrapping
// around, and marks those whose bytes are gone.
func TestSweepChecksPresentBlobsInTurn(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, 2)
	var all [][]byte
	for _, s := range []string{"one", "two", "three", "four", "five"} {
		d := []byte(s)
		if err := f.upload(t, d); err != nil {
			t.Fatal(err)
		}
		all = append(all, d)
	}
	for _, d := range all {
		f.lose(t, d)
	}
	// 5 present blobs, 2 per pass: 2, 2, 1 (then the walk starts over).
	for pass, want := range []uint64{2, 4, 5, 5} {
		if _, err := f.svc.Sweep(ctx); err != nil {
			t.Fatalf("pass %d: %v", pass+1, err)
		}
		if got := f.svc.Stats().Missing; got != want {
			t.Errorf("after pass %d: Missing = %d, want %d", pass+1, got, want)
		}
	}
	for _, d := range all {
		if st := f.state(t, d); st != storage.BlobUploading {
			t.Errorf("%s: state %d after the walk, want uploading (missing)", d, st)
		}
	}
	// Repaired blobs are checked again and found intact.
	for _, d := range all {
		if err := f.upload(t, d); err != nil {
			t.Fatal(err)
		}
	}
	before := f.svc.Stats().PresenceChecks
	for range 3 {
		if _, err := f.svc.Sweep(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if st := f.svc.Stats(); st.Missing != 5 || st.PresenceChecks-before != 5 {
		t.Errorf("after 3 passes over 5 repaired blobs: Missing %d (want 5), checks %d (want 5)", st.Missing, st.PresenceChecks-before)
	}
}

// TestSweepCheckOff: a negative CheckPerPass checks nothing.
func TestSweepCheckOff(t *testing.T) {
	f := newFixture(t, -1)
	d := []byte("unchecked")
	if err := f.upload(t, d); err != nil {
		t.Fatal(err)
	}
	f.lose(t, d)
	if _, err := f.svc.Sweep(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := f.svc.Stats(); st.Missing != 0 || st.PresenceChecks != 0 || f.state(t, d) != storage.BlobPresent {
		t.Errorf("with the check off: %+v, state %d", st, f.state(t, d))
	}
}
