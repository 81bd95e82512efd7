package main

import (
	"bytes"
	"context"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/synclane/synclane/internal/promtext"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/storage/blobstore"
)

// TestServeRepairsLostBlobBytes: a running server whose blob file is
// deleted behind its back (as after a restore of the database without its
// blob files) answers the download 404 blob.not_found and marks the blob
// missing; upload-grant then asks for the bytes, a re-upload of the same
// bytes stores them and the download serves them again.
func TestServeRepairsLostBlobBytes(t *testing.T) {
	ctx := context.Background()
	blobDir := t.TempDir()
	base := startTestControl(t, "--blob-store", blobDir)
	control(t, "PUT", base+"/_test/allowed-scopes/ada", `{"project_id":["p1"]}`, nil)
	c := newThingsClient(base, "ada", "c-ada")
	data := bytes.Repeat([]byte("lost bytes "), 5000)
	id := blobstore.IDOf(data)
	if err := c.UploadBlob(ctx, id, "text/plain", bytes.NewReader(data), int64(len(data))); err != nil {
		t.Fatal(err)
	}
	ref := `{"blobId":"` + id + `","byteLength":` + strconv.Itoa(len(data)) + `}`
	if pr := pushRow(t, c, ssp2.Row{"a1", "p1", nil, nil, nil, nil, nil, ref, nil}, "cc1"); pr.Status != ssp2.CommitApplied {
		t.Fatalf("push referencing the blob: %+v", pr)
	}
	var got bytes.Buffer
	if _, err := c.DownloadBlob(ctx, id, &got); err != nil || !bytes.Equal(got.Bytes(), data) {
		t.Fatalf("download before the loss: %v", err)
	}

	// Delete the file behind the server's back.
	hex := strings.TrimPrefix(id, blobstore.IDPrefix)
	removed := 0
	if err := filepath.WalkDir(blobDir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.Contains(d.Name(), hex) {
			removed++
			return os.Remove(p)
		}
		return err
	}); err != nil || removed != 1 {
		t.Fatalf("removing the blob file under %s: %d removed, %v", blobDir, removed, err)
	}

	if _, err := c.DownloadBlob(ctx, id, io.Discard); syncerr.CodeOf(err) != syncerr.BlobNotFound {
		t.Fatalf("download of lost bytes: %v; want blob.not_found", err)
	}
	g, err := c.UploadGrant(ctx, id, int64(len(data)), "text/plain")
	if err != nil || g.Present {
		t.Fatalf("upload-grant after the loss = %+v, %v; want the bytes asked for", g, err)
	}
	// The test-control server answers "no grant" (upload through PUT).
	if err := c.UploadBlob(ctx, id, "text/plain", bytes.NewReader(data), int64(len(data))); err != nil {
		t.Fatalf("re-upload: %v", err)
	}
	got.Reset()
	if _, err := c.DownloadBlob(ctx, id, &got); err != nil || !bytes.Equal(got.Bytes(), data) {
		t.Fatalf("download after the re-upload: %d bytes, %v; want the original %d", got.Len(), err, len(data))
	}
	res, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	m, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if !promtext.Has(m, "synclane_blobs_missing_total 1") {
		t.Errorf("/metrics lacks synclane_blobs_missing_total 1")
	}
}
