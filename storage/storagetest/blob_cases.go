package storagetest

import (
	"errors"
	"reflect"
	"slices"

	"github.com/synclane/synclane/storage"
)

// Blob metadata and the reference index (storage.BlobIndex, storage.BlobTx).

const (
	blobA = "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	blobB = "sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
	blobC = "sha256:cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc"
)

var blobTests = []test{
	{name: "UploadLifecycle", fn: testBlobUploadLifecycle},
	{name: "ReferencesFollowTheTransaction", fn: testBlobRefsTx},
	{name: "OrphanSweep", fn: testBlobOrphanSweep},
	{name: "SweepSkipsAClaimOfARunningPush", fn: testBlobSweepRace},
	{name: "RestoreBringsBackTheReferences", roles: []string{"Snapshots"}, fn: testBlobRefsRestore},
	{name: "Counts", fn: testBlobCounts},
	{name: "AbandonOnlyTheRefusedUpload", fn: testBlobAbandon},
	{name: "MissingBytesGoBackToUploading", fn: testBlobMarkMissing},
}

// testBlobMarkMissing: MarkBlobMissing turns only a present blob back to
// uploading (touched, references kept), a claim then refuses it, an upload
// begins it as uploading and completes it present again; PresentBlobs
// pages the present blobs in id order.
func testBlobMarkMissing(e *env) {
	bi := e.blobIndex()
	e.upload(blobA, 42, 100)
	e.upload(blobB, 5, 100)
	e.push("p", func(tx storage.PushTx) {
		if !e.claimBlob(tx, blobA, 150) {
			e.t.Fatal("ClaimBlob of a present blob = false")
		}
		e.setRefs(tx, "items", "i1", blobA)
	})
	page := func(after string, limit int) []string {
		e.t.Helper()
		ids, err := bi.PresentBlobs(e.ctx, after, limit)
		if err != nil {
			e.t.Fatalf("PresentBlobs(%q, %d): %v", after, limit, err)
		}
		return ids
	}
	if got, want := page("", 10), []string{blobA, blobB}; !slices.Equal(got, want) {
		e.t.Errorf("PresentBlobs = %v, want %v", got, want)
	}
	if got, want := page("", 1), []string{blobA}; !slices.Equal(got, want) {
		e.t.Errorf("PresentBlobs(limit 1) = %v, want %v", got, want)
	}
	if got, want := page(blobA, 10), []string{blobB}; !slices.Equal(got, want) {
		e.t.Errorf("PresentBlobs(after A) = %v, want %v", got, want)
	}
	mark := func(id string, now int64) bool {
		e.t.Helper()
		ok, err := bi.MarkBlobMissing(e.ctx, id, now)
		if err != nil {
			e.t.Fatalf("MarkBlobMissing(%s): %v", id, err)
		}
		return ok
	}
	if !mark(blobA, 500) {
		e.t.Fatal("MarkBlobMissing(present) = false")
	}
	m, err := bi.GetBlob(e.ctx, blobA)
	if err != nil || m == nil || m.State != storage.BlobUploading || m.TouchedAtMs != 500 || m.ByteLength != 42 {
		e.t.Fatalf("after MarkBlobMissing: %+v, %v; want uploading, touched at 500, length kept", m, err)
	}
	if mark(blobA, 600) {
		e.t.Error("MarkBlobMissing of an uploading blob = true")
	}
	if mark(blobC, 600) {
		e.t.Error("MarkBlobMissing of an unknown blob = true")
	}
	if got, want := page("", 10), []string{blobB}; !slices.Equal(got, want) {
		e.t.Errorf("PresentBlobs after the mark = %v, want %v", got, want)
	}
	if got, want := e.refs("p", blobA), []string{"items/i1"}; !slices.Equal(got, want) {
		e.t.Errorf("the mark dropped references: %v, want %v", got, want)
	}
	e.push("p", func(tx storage.PushTx) {
		if e.claimBlob(tx, blobA, 700) {
			e.t.Error("ClaimBlob of a blob marked missing = true")
		}
	})
	// Referenced: the sweep leaves it however old the cutoff.
	if got := e.sweep(1 << 40); slices.Contains(got, blobA) {
		e.t.Errorf("the sweep took a referenced blob marked missing: %v", got)
	}
	if err := bi.ForgetBlobs(e.ctx, e.sweep(1<<40)); err != nil {
		e.t.Fatal(err)
	}
	info, err := bi.BeginBlobUpload(e.ctx, blobA, 800)
	if err != nil || info.State != storage.BlobUploading {
		e.t.Fatalf("BeginBlobUpload after the mark = %+v, %v; want uploading", info, err)
	}
	// A refused re-upload keeps the metadata of a referenced blob.
	if err := bi.AbandonBlobUpload(e.ctx, blobA, 800); err != nil {
		e.t.Fatal(err)
	}
	if m, _ := bi.GetBlob(e.ctx, blobA); m == nil || m.State != storage.BlobUploading || m.CreatedAtMs != 100 {
		e.t.Fatalf("AbandonBlobUpload of a referenced blob marked missing left %+v; want it kept, uploading", m)
	}
	if err := bi.CompleteBlobUpload(e.ctx, blobA, 42, "image/png", 900); err != nil {
		e.t.Fatalf("CompleteBlobUpload after the mark: %v", err)
	}
	if m, _ := bi.GetBlob(e.ctx, blobA); m == nil || m.State != storage.BlobPresent {
		e.t.Fatalf("re-upload did not make it present: %+v", m)
	}
	e.push("p", func(tx storage.PushTx) {
		if !e.claimBlob(tx, blobA, 1000) {
			e.t.Error("ClaimBlob after the re-upload = false")
		}
	})
}

// testBlobAbandon: AbandonBlobUpload removes the metadata of an upload
// that is still uploading and untouched since it began, and nothing else:
// not an upload of the same id begun later, not a present blob.
func testBlobAbandon(e *env) {
	bi := e.blobIndex()
	get := func(id string) *storage.BlobInfo {
		e.t.Helper()
		m, err := bi.GetBlob(e.ctx, id)
		if err != nil {
			e.t.Fatalf("GetBlob(%s): %v", id, err)
		}
		return m
	}
	abandon := func(id string, began int64) {
		e.t.Helper()
		if err := bi.AbandonBlobUpload(e.ctx, id, began); err != nil {
			e.t.Fatalf("AbandonBlobUpload(%s, %d): %v", id, began, err)
		}
	}
	if _, err := bi.BeginBlobUpload(e.ctx, blobA, 100); err != nil {
		e.t.Fatal(err)
	}
	abandon(blobA, 100)
	if m := get(blobA); m != nil {
		e.t.Errorf("a refused upload left its metadata: %+v", m)
	}

	if _, err := bi.BeginBlobUpload(e.ctx, blobB, 100); err != nil {
		e.t.Fatal(err)
	}
	if _, err := bi.BeginBlobUpload(e.ctx, blobB, 200); err != nil { // a second upload of the same id
		e.t.Fatal(err)
	}
	abandon(blobB, 100)
	if m := get(blobB); m == nil || m.State != storage.BlobUploading {
		e.t.Errorf("abandoning the first upload removed the second's metadata: %+v", m)
	}
	if err := bi.CompleteBlobUpload(e.ctx, blobB, 5, "", 200); err != nil {
		e.t.Fatalf("the second upload completes: %v", err)
	}

	e.upload(blobC, 7, 300)
	abandon(blobC, 300)
	if m := get(blobC); m == nil || m.State != storage.BlobPresent {
		e.t.Errorf("abandon removed a present blob: %+v", m)
	}
	abandon("sha256:dddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddd", 1) // unknown: nothing to do
}

// blobIndex returns the backend's Blobs role (the Blobs cases run only on
// a backend that has it).
func (e *env) blobIndex() storage.BlobIndex { return e.b.Blobs }

// upload records id as uploaded (metadata only) at nowMs.
func (e *env) upload(id string, n int64, nowMs int64) {
	e.t.Helper()
	bi := e.blobIndex()
	if _, err := bi.BeginBlobUpload(e.ctx, id, nowMs); err != nil {
		e.t.Fatalf("BeginBlobUpload(%s): %v", id, err)
	}
	if err := bi.CompleteBlobUpload(e.ctx, id, n, "image/png", nowMs); err != nil {
		e.t.Fatalf("CompleteBlobUpload(%s): %v", id, err)
	}
}

func (e *env) claimBlob(tx storage.PushTx, id string, nowMs int64) bool {
	e.t.Helper()
	ok, err := tx.ClaimBlob(e.ctx, id, nowMs)
	if err != nil {
		e.t.Fatalf("ClaimBlob(%s): %v", id, err)
	}
	return ok
}

func (e *env) setRefs(tx storage.PushTx, table, row string, ids ...string) {
	e.t.Helper()
	if err := tx.SetRowBlobs(e.ctx, table, row, map[string]string{"project": "p1"}, ids); err != nil {
		e.t.Fatalf("SetRowBlobs(%s/%s): %v", table, row, err)
	}
}

func (e *env) refs(partition, id string) []string {
	e.t.Helper()
	rs, err := e.blobIndex().BlobRefs(e.ctx, partition, id, 100)
	if err != nil {
		e.t.Fatalf("BlobRefs(%s): %v", id, err)
	}
	out := []string{}
	for _, r := range rs {
		if !reflect.DeepEqual(r.Scopes, map[string]string{"project": "p1"}) {
			e.t.Errorf("BlobRefs(%s): %s/%s scopes %v, want project=p1", id, r.Table, r.RowID, r.Scopes)
		}
		out = append(out, r.Table+"/"+r.RowID)
	}
	return out
}

func (e *env) sweep(cutoff int64) []string {
	e.t.Helper()
	ids, err := e.blobIndex().MarkOrphanBlobs(e.ctx, cutoff, 100)
	if err != nil {
		e.t.Fatalf("MarkOrphanBlobs: %v", err)
	}
	slices.Sort(ids)
	return ids
}

func testBlobUploadLifecycle(e *env) {
	bi := e.blobIndex()
	if m, err := bi.GetBlob(e.ctx, blobA); err != nil || m != nil {
		e.t.Fatalf("GetBlob(unknown) = %v, %v; want nil, nil", m, err)
	}
	m, err := bi.BeginBlobUpload(e.ctx, blobA, 1000)
	if err != nil || m.State != storage.BlobUploading || m.TouchedAtMs != 1000 {
		e.t.Fatalf("BeginBlobUpload = %+v, %v; want uploading touched at 1000", m, err)
	}
	e.push("p", func(tx storage.PushTx) {
		if e.claimBlob(tx, blobA, 1100) {
			e.t.Error("ClaimBlob of an uploading blob = true")
		}
	})
	if err := bi.CompleteBlobUpload(e.ctx, blobA, 42, "image/png", 1200); err != nil {
		e.t.Fatalf("CompleteBlobUpload: %v", err)
	}
	got, err := bi.GetBlob(e.ctx, blobA)
	want := &storage.BlobInfo{ID: blobA, ByteLength: 42, MediaType: "image/png", State: storage.BlobPresent, CreatedAtMs: 1000, TouchedAtMs: 1200}
	if err != nil || !reflect.DeepEqual(got, want) {
		e.t.Fatalf("GetBlob = %+v, %v; want %+v", got, err, want)
	}
	// A second upload of a present blob keeps it present and its length.
	m, err = bi.BeginBlobUpload(e.ctx, blobA, 1300)
	if err != nil || m.State != storage.BlobPresent || m.ByteLength != 42 || m.TouchedAtMs != 1300 {
		e.t.Fatalf("BeginBlobUpload(present) = %+v, %v", m, err)
	}
	if err := bi.CompleteBlobUpload(e.ctx, blobA, 7, "text/plain", 1300); err != nil {
		e.t.Fatalf("CompleteBlobUpload(present): %v", err)
	}
	if got, _ := bi.GetBlob(e.ctx, blobA); got.ByteLength != 42 || got.MediaType != "image/png" {
		e.t.Errorf("a repeated upload changed the metadata: %+v", got)
	}
	e.push("p", func(tx storage.PushTx) {
		if !e.claimBlob(tx, blobA, 900) {
			e.t.Error("ClaimBlob of a present blob = false")
		}
		if e.claimBlob(tx, blobB, 900) {
			e.t.Error("ClaimBlob of an unknown blob = true")
		}
	})
	if got, _ := bi.GetBlob(e.ctx, blobA); got.TouchedAtMs != 1300 {
		e.t.Errorf("a claim at an older time moved TouchedAtMs back: %d", got.TouchedAtMs)
	}
}

func testBlobRefsTx(e *env) {
	e.upload(blobA, 1, 1)
	e.upload(blobB, 1, 1)
	e.push("p", func(tx storage.PushTx) {
		e.setRefs(tx, "items", "i1", blobA, blobB)
		e.setRefs(tx, "notes", "n1", blobA)
	})
	e.push("q", func(tx storage.PushTx) { e.setRefs(tx, "items", "i9", blobA) })
	if got, want := e.refs("p", blobA), []string{"items/i1", "notes/n1"}; !slices.Equal(got, want) {
		e.t.Errorf("refs(p, A) = %v, want %v", got, want)
	}
	if got, want := e.refs("q", blobA), []string{"items/i9"}; !slices.Equal(got, want) {
		e.t.Errorf("refs(q, A) = %v, want %v", got, want)
	}
	// Replacing a row's references; a rolled-back savepoint and a
	// rolled-back transaction leave nothing.
	e.push("p", func(tx storage.PushTx) {
		e.setRefs(tx, "items", "i1", blobB)
		if err := tx.Savepoint(e.ctx); err != nil {
			e.t.Fatal(err)
		}
		e.setRefs(tx, "notes", "n1")
		e.setRefs(tx, "items", "i2", blobA)
		if err := tx.RollbackToSavepoint(e.ctx); err != nil {
			e.t.Fatal(err)
		}
		if err := tx.ReleaseSavepoint(e.ctx); err != nil {
			e.t.Fatal(err)
		}
	})
	tx := e.begin("p")
	e.setRefs(tx, "notes", "n1")
	if err := tx.Rollback(e.ctx); err != nil {
		e.t.Fatal(err)
	}
	if got, want := e.refs("p", blobA), []string{"notes/n1"}; !slices.Equal(got, want) {
		e.t.Errorf("refs(p, A) = %v, want %v", got, want)
	}
	if got, want := e.refs("p", blobB), []string{"items/i1"}; !slices.Equal(got, want) {
		e.t.Errorf("refs(p, B) = %v, want %v", got, want)
	}
	if got := e.refs("p", blobC); len(got) != 0 {
		e.t.Errorf("refs(p, C) = %v, want none", got)
	}
}

func testBlobOrphanSweep(e *env) {
	bi := e.blobIndex()
	e.upload(blobA, 1, 100) // referenced
	e.upload(blobB, 1, 100) // orphan
	e.upload(blobC, 1, 500) // orphan, touched after the cutoff
	e.push("p", func(tx storage.PushTx) {
		if !e.claimBlob(tx, blobA, 100) {
			e.t.Fatal("ClaimBlob(A) = false")
		}
		e.setRefs(tx, "items", "i1", blobA)
	})
	if got, want := e.sweep(200), []string{blobB}; !slices.Equal(got, want) {
		e.t.Fatalf("MarkOrphanBlobs(200) = %v, want %v", got, want)
	}
	// A blob being swept can be neither claimed nor uploaded again.
	e.push("p", func(tx storage.PushTx) {
		if e.claimBlob(tx, blobB, 300) {
			e.t.Error("ClaimBlob of a deleting blob = true")
		}
	})
	if _, err := bi.BeginBlobUpload(e.ctx, blobB, 300); !errors.Is(err, storage.ErrBlobBusy) {
		e.t.Errorf("BeginBlobUpload(deleting) = %v, want ErrBlobBusy", err)
	}
	// An unfinished sweep is picked up again.
	if got, want := e.sweep(0), []string{blobB}; !slices.Equal(got, want) {
		e.t.Errorf("MarkOrphanBlobs(0) = %v, want the deleting %v", got, want)
	}
	if err := bi.ForgetBlobs(e.ctx, []string{blobB, blobA}); err != nil {
		e.t.Fatal(err)
	}
	if m, _ := bi.GetBlob(e.ctx, blobB); m != nil {
		e.t.Errorf("GetBlob(forgotten) = %+v", m)
	}
	if m, _ := bi.GetBlob(e.ctx, blobA); m == nil || m.State != storage.BlobPresent {
		e.t.Errorf("ForgetBlobs removed a present blob: %+v", m)
	}
	// Dropping the last reference touches the blob: it is swept only after
	// a cutoff past that moment.
	e.push("p", func(tx storage.PushTx) {
		e.claimBlob(tx, blobA, 1000)
		e.setRefs(tx, "items", "i1")
	})
	if got, want := e.sweep(1000), []string{blobC}; !slices.Equal(got, want) {
		e.t.Errorf("MarkOrphanBlobs(1000) = %v, want %v (A was dereferenced at 1000)", got, want)
	}
	if got, want := e.sweep(1001), []string{blobA, blobC}; !slices.Equal(got, want) {
		e.t.Errorf("MarkOrphanBlobs(1001) = %v, want %v", got, want)
	}
	// The blob can be uploaded again once forgotten.
	if err := bi.ForgetBlobs(e.ctx, []string{blobA, blobC}); err != nil {
		e.t.Fatal(err)
	}
	e.upload(blobA, 1, 2000)
}

// testBlobSweepRace: a sweep running while a push holds a claim never
// takes the claimed blob, whether the backend makes it wait (SQLite) or
// skip (PostgreSQL, memory); after the push commits the blob is referenced.
func testBlobSweepRace(e *env) {
	e.upload(blobA, 1, 100)
	e.upload(blobB, 1, 100)
	tx := e.begin("p")
	defer func() { _ = tx.Rollback(e.ctx) }()
	if !e.claimBlob(tx, blobA, 100) { // not moving the touch: only the claim protects it
		e.t.Fatal("ClaimBlob(A) = false")
	}
	e.setRefs(tx, "items", "i1", blobA)
	type result struct {
		ids []string
		err error
	}
	done := make(chan result, 1)
	go func() {
		ids, err := e.blobIndex().MarkOrphanBlobs(e.ctx, 5000, 100)
		done <- result{ids, err}
	}()
	if err := tx.Commit(e.ctx); err != nil {
		e.t.Fatalf("Commit: %v", err)
	}
	r := <-done
	if r.err != nil {
		e.t.Fatalf("MarkOrphanBlobs: %v", r.err)
	}
	if slices.Contains(r.ids, blobA) {
		e.t.Fatalf("the sweep took blob A while a push claimed it: %v", r.ids)
	}
	if !slices.Contains(r.ids, blobB) {
		e.t.Errorf("the sweep missed the orphan B: %v", r.ids)
	}
	if m, _ := e.blobIndex().GetBlob(e.ctx, blobA); m == nil || m.State != storage.BlobPresent {
		e.t.Errorf("blob A after the race: %+v", m)
	}
	if got := e.refs("p", blobA); !slices.Equal(got, []string{"items/i1"}) {
		e.t.Errorf("refs(p, A) = %v", got)
	}
}

// testBlobRefsRestore: a partition restored from its capture gets the
// references its restored rows had (a later reference to a blob would
// otherwise keep it alive, and a dropped one would let the orphan sweep
// delete a blob a restored row names); other partitions keep theirs.
func testBlobRefsRestore(e *env) {
	e.upload(blobA, 1, 1)
	e.upload(blobB, 1, 1)
	e.push("p", func(tx storage.PushTx) { e.setRefs(tx, "items", "i1", blobA) })
	e.push("q", func(tx storage.PushTx) { e.setRefs(tx, "items", "i9", blobB) })
	if err := e.b.Snapshots.CapturePartition(e.ctx, "p"); err != nil {
		e.t.Fatalf("CapturePartition: %v", err)
	}
	e.push("p", func(tx storage.PushTx) {
		e.setRefs(tx, "items", "i1")
		e.setRefs(tx, "items", "i2", blobB)
	})
	if got := e.refs("p", blobA); len(got) != 0 {
		e.t.Fatalf("refs(p, A) after the later push = %v, want none", got)
	}
	if _, err := e.b.Snapshots.RestorePartition(e.ctx, "p", 10); err != nil {
		e.t.Fatalf("RestorePartition: %v", err)
	}
	if got, want := e.refs("p", blobA), []string{"items/i1"}; !slices.Equal(got, want) {
		e.t.Errorf("refs(p, A) after restore = %v, want %v", got, want)
	}
	if got := e.refs("p", blobB); len(got) != 0 {
		e.t.Errorf("refs(p, B) after restore = %v, want none (i2 was written after the capture)", got)
	}
	if got, want := e.refs("q", blobB), []string{"items/i9"}; !slices.Equal(got, want) {
		e.t.Errorf("refs(q, B) after restoring p = %v, want %v", got, want)
	}
	// The sweep sees the restored reference: A is not an orphan.
	ids, err := e.blobIndex().MarkOrphanBlobs(e.ctx, 1<<40, 10)
	if err != nil {
		e.t.Fatalf("MarkOrphanBlobs: %v", err)
	}
	if slices.Contains(ids, blobA) {
		e.t.Errorf("orphan sweep marked %s, which a restored row references", blobA)
	}
}
