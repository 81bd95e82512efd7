package storagetest

import "github.com/synclane/synclane/storage"

// testBlobCounts: CountBlobs counts metadata by state, the bytes of
// present blobs and the reference entries of every partition.
func testBlobCounts(e *env) {
	bc := e.blobIndex()
	count := func() storage.BlobCounts {
		e.t.Helper()
		c, err := bc.CountBlobs(e.ctx)
		if err != nil {
			e.t.Fatalf("CountBlobs: %v", err)
		}
		return c
	}
	if c := count(); c != (storage.BlobCounts{}) {
		e.t.Fatalf("empty store: %+v", c)
	}
	if _, err := e.blobIndex().BeginBlobUpload(e.ctx, blobA, 1); err != nil {
		e.t.Fatal(err)
	}
	e.upload(blobB, 42, 1)
	e.upload(blobC, 8, 1)
	e.push("p", func(tx storage.PushTx) {
		e.setRefs(tx, "items", "i1", blobB, blobC)
		e.setRefs(tx, "notes", "n1", blobB)
	})
	e.push("q", func(tx storage.PushTx) { e.setRefs(tx, "items", "i1", blobB) })
	want := storage.BlobCounts{Uploading: 1, Present: 2, PresentBytes: 50, References: 4}
	if c := count(); c != want {
		e.t.Fatalf("counts = %+v, want %+v", c, want)
	}
	// Dropping references and sweeping the orphan moves it to deleting.
	e.push("p", func(tx storage.PushTx) { e.setRefs(tx, "items", "i1", blobB) })
	if got := e.sweep(100); len(got) != 2 {
		e.t.Fatalf("sweep = %v, want the uploading A and the orphan C", got)
	}
	want = storage.BlobCounts{Deleting: 2, Present: 1, PresentBytes: 42, References: 3}
	if c := count(); c != want {
		e.t.Fatalf("counts after the sweep = %+v, want %+v", c, want)
	}
}
