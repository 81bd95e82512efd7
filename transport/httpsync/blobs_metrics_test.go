package httpsync_test

import (
	"bytes"
	"context"
	"net/http"
	"testing"

	"github.com/synclane/synclane/internal/promtext"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/storage/blobstore"
)

// TestBlobPushRefusalMetric: /metrics counts pushed commits rejected with
// blob.not_found, and only those (an applied push and a push rejected for
// another reason leave it unchanged).
func TestBlobPushRefusalMetric(t *testing.T) {
	forEachBlobBackend(t, false, func(t *testing.T, s *blobServer) {
		ctx := context.Background()
		alice := s.client("alice")
		s.grant("alice", "L1")
		up, missing := []byte("uploaded"), []byte("never uploaded")
		if err := alice.UploadBlob(ctx, blobstore.IDOf(up), "", bytes.NewReader(up), int64(len(up))); err != nil {
			t.Fatal(err)
		}
		steps := []struct {
			name, commit, row, list string
			ref                     any
			status                  ssp2.CommitStatus
			code                    syncerr.Code
			want                    string
		}{
			{"uploaded blob", "c1", "f1", "L1", blobRef(blobstore.IDOf(up), len(up)), ssp2.CommitApplied, "", "synclane_blob_push_refusals_total 0"},
			{"missing blob", "c2", "f2", "L1", blobRef(blobstore.IDOf(missing), len(missing)), ssp2.CommitRejected, syncerr.BlobNotFound, "synclane_blob_push_refusals_total 1"},
			{"out of scope", "c3", "f3", "L9", nil, ssp2.CommitRejected, syncerr.Forbidden, "synclane_blob_push_refusals_total 1"},
			{"missing blob again", "c4", "f4", "L1", blobRef(blobstore.IDOf(missing), len(missing)), ssp2.CommitRejected, syncerr.BlobNotFound, "synclane_blob_push_refusals_total 2"},
		}
		for _, st := range steps {
			pr := s.pushFile(alice, st.commit, st.row, st.list, st.ref)
			if pr.Status != st.status || (st.code != "" && pr.Results[0].Code != string(st.code)) {
				t.Fatalf("%s: push result %+v; want %v %s", st.name, pr, st.status, st.code)
			}
			code, b, _ := s.do(http.MethodGet, "/metrics", "", nil, nil)
			if code != http.StatusOK || !promtext.Has(b, st.want) {
				t.Errorf("%s: /metrics (HTTP %d) lacks %q", st.name, code, st.want)
			}
		}
		if got := s.eng.Blobs().Stats().PushesRefused; got != 2 {
			t.Errorf("BlobStats().PushesRefused = %d; want 2", got)
		}
	})
}
