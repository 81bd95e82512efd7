package httpsync_test

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/engine/events"
	"github.com/synclane/synclane/internal/promtext"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/storage/blobstore"
)

// TestBlobSelfRepair: bytes lost behind the server's back while the
// metadata says present (a database restored without its blob files) are
// found on a download and by the sweep, marked missing (upload-grant asks
// for them again, new references are refused), and a re-upload of the
// right bytes makes the download serve them again; wrong bytes repair
// nothing. Each finding is counted in /metrics and reported in the ring.
func TestBlobSelfRepair(t *testing.T) {
	for _, be := range backends(t) {
		t.Run(be.name, func(t *testing.T) {
			var store blobstore.Store
			ring := events.NewRing(0, nil)
			s := startBlobServerWith(t, be, false, func(c *engine.Config) {
				store, c.Events = c.Blobs.Store, ring
			})
			ctx := context.Background()
			alice := s.client("alice")
			viaGet, viaSweep := []byte("lost and found on a download"), []byte("lost and found by the sweep")
			getID, sweepID := blobstore.IDOf(viaGet), blobstore.IDOf(viaSweep)
			for i, d := range [][]byte{viaGet, viaSweep} {
				id := blobstore.IDOf(d)
				if err := alice.UploadBlob(ctx, id, "text/plain", bytes.NewReader(d), int64(len(d))); err != nil {
					t.Fatal(err)
				}
				if pr := s.pushFile(alice, "c"+string(rune('1'+i)), "f"+string(rune('1'+i)), "L1", blobRef(id, len(d))); pr.Status != ssp2.CommitApplied {
					t.Fatalf("push referencing %s: %+v", id, pr)
				}
			}
			for _, id := range []string{getID, sweepID} {
				if err := store.Delete(ctx, id); err != nil { // behind the server's back
					t.Fatal(err)
				}
			}

			// Found on a download.
			st, b, _ := s.do(http.MethodGet, "/blobs/"+getID, "alice", nil, nil)
			wantBlobCode(t, "GET of lost bytes", st, b, 404, syncerr.BlobNotFound)
			if got := s.eng.Blobs().Stats().Missing; got != 1 {
				t.Fatalf("Stats.Missing after the GET = %d, want 1", got)
			}
			expectRepairable(t, s, getID, viaGet)

			// Found by the sweep (nothing touched the blob since the loss).
			if _, err := s.eng.Retention().MaintenancePass(ctx, false); err != nil {
				t.Fatalf("maintenance pass: %v", err)
			}
			if got := s.eng.Blobs().Stats().Missing; got != 2 {
				t.Fatalf("Stats.Missing after the sweep = %d, want 2", got)
			}
			expectRepairable(t, s, sweepID, viaSweep)

			// A healthy store: a second pass finds nothing more.
			if _, err := s.eng.Retention().MaintenancePass(ctx, false); err != nil {
				t.Fatal(err)
			}
			bs := s.eng.Blobs().Stats()
			if bs.Missing != 2 || bs.PresenceChecks < 4 {
				t.Errorf("after a pass over a repaired store: %+v; want Missing 2, PresenceChecks >= 4", bs)
			}
			_, m, _ := s.do(http.MethodGet, "/metrics", "", nil, nil)
			if !promtext.Has(m, "synclane_blobs_missing_total 2") {
				t.Errorf("/metrics lacks synclane_blobs_missing_total 2")
			}
			var found []string
			for _, ev := range ring.Recent(0, 100) {
				if ev.Kind == events.BlobMissing {
					found = append(found, ev.Message)
				}
			}
			if len(found) != 2 || !strings.Contains(found[0], getID) || !strings.Contains(found[0], "download") ||
				!strings.Contains(found[1], sweepID) || !strings.Contains(found[1], "sweep") {
				t.Errorf("blob.missing events = %q; want one for the download, one for the sweep", found)
			}
		})
	}
}

// expectRepairable checks blob id (data) is marked missing and repairs it:
// upload-grant asks for the bytes, a push naming it is refused, wrong
// bytes are refused and leave it missing, the right bytes restore it.
func expectRepairable(t *testing.T, s *blobServer, id string, data []byte) {
	t.Helper()
	ctx := context.Background()
	alice := s.client("alice")
	g, err := alice.UploadGrant(ctx, id, int64(len(data)), "text/plain")
	if err != nil || g.Present || g.URL == "" {
		t.Fatalf("upload-grant of a blob marked missing = %+v, %v; want a URL, not present", g, err)
	}
	if pr := s.pushFile(alice, "ref-"+id, "new-"+id, "L1", blobRef(id, len(data))); pr.Status != ssp2.CommitRejected || pr.Results[0].Code != string(syncerr.BlobNotFound) {
		t.Errorf("a new reference to a blob marked missing: %+v; want rejected blob.not_found", pr)
	}
	wrong := append([]byte("x"), data[1:]...)
	if err := alice.UploadBlobURL(ctx, g.URL, "text/plain", bytes.NewReader(wrong), int64(len(wrong))); err == nil {
		t.Fatal("an upload of other bytes was accepted")
	}
	st, b, _ := s.do(http.MethodGet, "/blobs/"+id, "alice", nil, nil)
	wantBlobCode(t, "GET after a refused re-upload", st, b, 404, syncerr.BlobNotFound)
	if err := alice.UploadBlobURL(ctx, g.URL, "text/plain", bytes.NewReader(data), int64(len(data))); err != nil {
		t.Fatalf("re-upload of the right bytes: %v", err)
	}
	var got bytes.Buffer
	if _, err := alice.DownloadBlob(ctx, id, &got); err != nil || !bytes.Equal(got.Bytes(), data) {
		t.Fatalf("download after the re-upload: %q, %v; want the original bytes", got.Bytes(), err)
	}
	if g, err := alice.UploadGrant(ctx, id, int64(len(data)), ""); err != nil || !g.Present {
		t.Errorf("upload-grant after the repair = %+v, %v; want present", g, err)
	}
}
