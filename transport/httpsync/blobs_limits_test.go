package httpsync_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/storage"
	"github.com/synclane/synclane/storage/blobstore"
)

// TestZeroLengthGrantCapsUpload: a grant for 0 bytes admits only the
// empty blob; a body under it is refused 413 blob.too_large, with or
// without a declared length.
func TestZeroLengthGrantCapsUpload(t *testing.T) {
	s := startBlobServer(t, backends(t)[0], false)
	ctx := context.Background()
	c := s.client("alice")
	data := bytes.Repeat([]byte("z"), 512<<10) // under the server's 1 MiB cap
	id := blobstore.IDOf(data)
	g, err := c.UploadGrant(ctx, id, 0, "")
	if err != nil || g.URL == "" {
		t.Fatalf("grant: %+v %v", g, err)
	}
	st, b, _ := s.do(http.MethodPut, g.URL, "", bytes.NewReader(data), nil)
	wantBlobCode(t, "PUT of 512 KiB, length declared, grant for 0 bytes", st, b, http.StatusRequestEntityTooLarge, syncerr.BlobTooLarge)
	st, b, _ = s.do(http.MethodPut, g.URL, "", io.MultiReader(bytes.NewReader(data)), nil) // no Content-Length
	wantBlobCode(t, "PUT of 512 KiB, length not declared, grant for 0 bytes", st, b, http.StatusRequestEntityTooLarge, syncerr.BlobTooLarge)

	empty := blobstore.IDOf(nil)
	g, err = c.UploadGrant(ctx, empty, 0, "")
	if err != nil || g.URL == "" {
		t.Fatalf("grant for the empty blob: %+v %v", g, err)
	}
	if st, b, _ := s.do(http.MethodPut, g.URL, "", http.NoBody, nil); st != http.StatusOK {
		t.Fatalf("PUT of the empty blob with its grant: HTTP %d %s", st, b)
	}
}

// slowReader yields data in chunks, one every tick.
type slowReader struct {
	data  []byte
	chunk int
	tick  time.Duration
}

func (r *slowReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, io.EOF
	}
	time.Sleep(r.tick)
	n := copy(p[:min(len(p), r.chunk)], r.data)
	r.data = r.data[n:]
	return n, nil
}

// TestLongBlobUploadGetsItsAnswer: an upload that keeps moving but takes
// longer than the server's write timeout still gets its 200 (the answer's
// write deadline starts when the body is stored).
func TestLongBlobUploadGetsItsAnswer(t *testing.T) {
	s := startBlobServer(t, backends(t)[0], false)
	srv := httptest.NewUnstartedServer(s.http.Config.Handler)
	srv.Config.ReadTimeout = time.Second
	srv.Config.WriteTimeout = time.Second
	srv.Start()
	t.Cleanup(srv.Close)

	data := bytes.Repeat([]byte("q"), 64<<10)
	id := blobstore.IDOf(data)
	// 16 chunks of 4 KiB, one every 150 ms: ~2.4 s, bytes always flowing.
	req, err := http.NewRequest(http.MethodPut, srv.URL+"/blobs/"+id, &slowReader{data: data, chunk: 4 << 10, tick: 150 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = int64(len(data))
	req.Header.Set("X-Actor", "alice")
	req.Header.Set("X-Partition", "team")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("an upload of 2.4 s under a 1 s write timeout got no answer: %v", err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("slow upload: HTTP %d", res.StatusCode)
	}
}

// TestRefusedUploadsLeaveNoMetadata: an upload refused after it began (hash
// mismatch, over the cap) leaves no blob metadata behind, so a stream of
// them cannot grow the blob table faster than the orphan sweep empties it;
// a refused re-upload of a stored blob keeps the blob.
func TestRefusedUploadsLeaveNoMetadata(t *testing.T) {
	forEachBlobBackend(t, false, func(t *testing.T, s *blobServer) {
		bi := s.store.Backend().Blobs
		if bi == nil {
			t.Fatalf("%T keeps no blob metadata", s.store)
		}
		meta := func(id string) *storage.BlobInfo {
			m, err := bi.GetBlob(context.Background(), id)
			if err != nil {
				t.Fatal(err)
			}
			return m
		}
		data := []byte("the real bytes")
		id := blobstore.IDOf(data)
		big := bytes.Repeat([]byte("x"), 1<<20+1)
		bigID := blobstore.IDOf(big)
		st, b, _ := s.do(http.MethodPut, "/blobs/"+id, "alice", bytes.NewReader([]byte("other bytes")), nil)
		wantBlobCode(t, "hash mismatch", st, b, http.StatusBadRequest, syncerr.BlobHashMismatch)
		st, b, _ = s.do(http.MethodPut, "/blobs/"+bigID, "alice", io.MultiReader(bytes.NewReader(big)), nil)
		wantBlobCode(t, "over the cap (chunked)", st, b, http.StatusRequestEntityTooLarge, syncerr.BlobTooLarge)
		for _, x := range []string{id, bigID} {
			if m := meta(x); m != nil {
				t.Errorf("a refused upload of %s left metadata: %+v", x, m)
			}
		}
		if st, b, _ := s.do(http.MethodPut, "/blobs/"+id, "alice", bytes.NewReader(data), nil); st != http.StatusOK {
			t.Fatalf("upload: HTTP %d %s", st, b)
		}
		st, b, _ = s.do(http.MethodPut, "/blobs/"+id, "alice", bytes.NewReader([]byte("nope")), nil)
		wantBlobCode(t, "hash mismatch on a stored blob", st, b, http.StatusBadRequest, syncerr.BlobHashMismatch)
		if m := meta(id); m == nil || m.State != storage.BlobPresent {
			t.Errorf("a refused re-upload changed the stored blob's metadata: %+v", m)
		}
	})
}
