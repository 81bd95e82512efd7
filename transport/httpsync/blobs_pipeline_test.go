package httpsync_test

import (
	"bytes"
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/storage/blobstore"
)

// TestBlobCheckPrecedesValidators: the push pipeline checks blob
// references before the host's row and commit validators (SPEC §6.8:
// decode, auth and strip, blob check, merge, validator, stage), so no
// validator ever sees a write whose blob is missing, and a validator that
// would reject the write does not mask blob.not_found.
func TestBlobCheckPrecedesValidators(t *testing.T) {
	for _, be := range backends(t) {
		t.Run(be.name, func(t *testing.T) {
			var mu sync.Mutex
			var rowSeen, commitSeen []string // row ids the validators saw
			s := startBlobServerWith(t, be, false, func(cfg *engine.Config) {
				cfg.Validators = map[string]engine.RowValidator{"files": func(_ context.Context, w *engine.RowWrite) error {
					mu.Lock()
					rowSeen = append(rowSeen, w.RowID)
					mu.Unlock()
					if w.RowID == "veto" {
						return &engine.Rejection{Code: "app.vetoed", Message: "vetoed"}
					}
					return nil
				}}
				cfg.CommitValidator = func(_ context.Context, c *engine.CommitView) error {
					mu.Lock()
					commitSeen = append(commitSeen, c.ClientCommitID)
					mu.Unlock()
					return nil
				}
			})
			ctx := context.Background()
			alice := s.client("alice")
			up, missing := []byte("uploaded"), []byte("not uploaded")
			if err := alice.UploadBlob(ctx, blobstore.IDOf(up), "", bytes.NewReader(up), int64(len(up))); err != nil {
				t.Fatal(err)
			}
			upRef, missingRef := blobRef(blobstore.IDOf(up), len(up)), blobRef(blobstore.IDOf(missing), len(missing))
			steps := []struct {
				name, commit, row string
				ref               any
				status            ssp2.CommitStatus
				code              string
				rowSeen           []string
				commitSeen        []string
			}{
				{"missing blob: no validator runs", "c1", "f1", missingRef, ssp2.CommitRejected, string(syncerr.BlobNotFound), nil, nil},
				{"missing blob on a vetoed row: blob.not_found wins", "c2", "veto", missingRef, ssp2.CommitRejected, string(syncerr.BlobNotFound), nil, nil},
				{"uploaded blob: validators run", "c3", "f1", upRef, ssp2.CommitApplied, "", []string{"f1"}, []string{"c3"}},
				{"update to a missing blob: no validator runs", "c4", "f1", missingRef, ssp2.CommitRejected, string(syncerr.BlobNotFound), []string{"f1"}, []string{"c3"}},
				{"vetoed row with its blob present: the validator's code", "c5", "veto", upRef, ssp2.CommitRejected, "app.vetoed", []string{"f1", "veto"}, []string{"c3"}},
			}
			for _, st := range steps {
				pr := s.pushFile(alice, st.commit, st.row, "L1", st.ref)
				if pr.Status != st.status || (st.code != "" && (len(pr.Results) == 0 || pr.Results[0].Code != st.code)) {
					t.Fatalf("%s: %+v; want %v %s", st.name, pr, st.status, st.code)
				}
				mu.Lock()
				gotRow, gotCommit := append([]string(nil), rowSeen...), append([]string(nil), commitSeen...)
				mu.Unlock()
				if !slices.Equal(gotRow, st.rowSeen) || !slices.Equal(gotCommit, st.commitSeen) {
					t.Errorf("%s: row validator saw %q, commit validator %q; want %q, %q", st.name, gotRow, gotCommit, st.rowSeen, st.commitSeen)
				}
			}
		})
	}
}
