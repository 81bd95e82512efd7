package httpsync_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/engine/blobs"
	"github.com/synclane/synclane/internal/promtext"
	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/storage/blobstore"
	"github.com/synclane/synclane/storage/blobstore/pgblob"
	"github.com/synclane/synclane/storage/postgres"
	"github.com/synclane/synclane/storage/segstore"
	"github.com/synclane/synclane/transport/auth"
	"github.com/synclane/synclane/transport/httpsync"
)

const blobSchemaJSON = `{"version": 1, "tables": [{"name": "files",
  "columns": [{"name": "id", "type": "string"}, {"name": "list_id", "type": "string"},
    {"name": "file", "type": "blob_ref", "nullable": true}],
  "primaryKey": "id", "scopes": ["list:{list_id}"]}]}`

// blobServer is synclane with blobs over real HTTP, on a backend's store
// and the matching blob store (filesystem next to SQLite, PostgreSQL
// chunks next to PostgreSQL).
type blobServer struct {
	t      *testing.T
	schema *schema.Schema
	codec  *ssp2.RowCodec
	store  testStore
	eng    *engine.Engine
	http   *httptest.Server
	clock  testClock
	mu     sync.Mutex
	grants map[string]map[string][]string
	failed map[string]bool
}

func startBlobServer(t *testing.T, be backend, signed bool) *blobServer {
	return startBlobServerWith(t, be, signed, nil)
}

// startBlobServerWith is startBlobServer with configure (if not nil)
// applied to the engine configuration before New.
func startBlobServerWith(t *testing.T, be backend, signed bool, configure func(*engine.Config)) *blobServer {
	sch, err := schema.Parse([]byte(blobSchemaJSON))
	if err != nil {
		t.Fatal(err)
	}
	s := &blobServer{t: t, schema: sch, grants: map[string]map[string][]string{}, failed: map[string]bool{}}
	s.codec = ssp2.NewRowCodec(s.schema.Table("files").Columns)
	s.clock.ms.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli())
	s.store = be.open(t)
	var bs blobstore.Store
	if pg, ok := s.store.(*postgres.Store); ok {
		bs, err = pgblob.New(context.Background(), pg.Pool(), pg.SchemaName())
	} else {
		bs, err = blobstore.NewFS(filepath.Join(t.TempDir(), "blobs"))
	}
	if err != nil {
		t.Fatal(err)
	}
	s.http = httptest.NewUnstartedServer(nil)
	cfg := engine.Config{Schema: s.schema, Backend: s.store.Backend(), Now: s.clock.now,
		Blobs: blobs.Options{Store: bs, MaxBytes: 1 << 20},
		Resolver: engine.ScopeResolverFunc(func(_ context.Context, id engine.Identity) (map[string][]string, error) {
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.failed[id.ActorID] {
				return nil, errors.New("directory down")
			}
			if g, ok := s.grants[id.ActorID]; ok {
				return g, nil
			}
			return map[string][]string{"list_id": {"*"}}, nil
		})}
	if signed {
		cfg.SignedURLs = segstore.NewSigner(bytes.Repeat([]byte("k"), 32), 5*time.Minute, s.clock.now)
		cfg.PublicURL = func() string { return s.http.URL }
	}
	if configure != nil {
		configure(&cfg)
	}
	if s.eng, err = engine.New(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	s.http.Config.Handler = httpsync.NewMux(s.eng, httpsync.MuxOptions{Options: httpsync.Options{Auth: auth.DevAuth{}}})
	s.http.Start()
	t.Cleanup(func() {
		s.http.Close()
		s.eng.Close()
		s.store.Close()
	})
	return s
}

func (s *blobServer) client(actor string) *httpsync.Client {
	return &httpsync.Client{URL: s.http.URL + "/sync", ClientID: "c-" + actor, Header: http.Header{"X-Actor": {actor}, "X-Partition": {"team"}}}
}

func (s *blobServer) grant(actor string, lists ...string) {
	s.mu.Lock()
	s.grants[actor] = map[string][]string{"list_id": lists}
	s.mu.Unlock()
}

func (s *blobServer) failResolver(actor string, fail bool) {
	s.mu.Lock()
	s.failed[actor] = fail
	s.mu.Unlock()
}

func blobRef(id string, n int) string {
	return fmt.Sprintf(`{"blobId":%q,"byteLength":%d}`, id, n)
}

// pushFile upserts file row id in list with blob ref (nil: NULL) and
// returns the push result.
func (s *blobServer) pushFile(c *httpsync.Client, commitID, id, list string, ref any) *ssp2.PushResult {
	s.t.Helper()
	payload, err := s.codec.AppendSparse(nil, ssp2.Row{id, list, ref}, nil, 0)
	if err != nil {
		s.t.Fatal(err)
	}
	return push1(s.t, c, commit(commitID, ssp2.Operation{Table: "files", RowID: id, Op: ssp2.OpUpsert, Payload: payload}))
}

func (s *blobServer) deleteFile(c *httpsync.Client, commitID, id string) *ssp2.PushResult {
	s.t.Helper()
	return push1(s.t, c, commit(commitID, ssp2.Operation{Table: "files", RowID: id, Op: ssp2.OpDelete}))
}

// do sends a raw request as actor ("" for none) and returns status, body
// and headers.
func (s *blobServer) do(method, path, actor string, body io.Reader, hdr map[string]string) (int, []byte, http.Header) {
	s.t.Helper()
	u := path
	if !strings.HasPrefix(path, "http") {
		u = s.http.URL + path
	}
	req, err := http.NewRequest(method, u, body)
	if err != nil {
		s.t.Fatal(err)
	}
	if actor != "" {
		req.Header.Set("X-Actor", actor)
		req.Header.Set("X-Partition", "team")
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, b, res.Header
}

func wantBlobCode(t *testing.T, what string, status int, body []byte, wantStatus int, code syncerr.Code) {
	t.Helper()
	if status != wantStatus || !bytes.Contains(body, []byte(`"code":"`+string(code)+`"`)) {
		t.Errorf("%s: HTTP %d %s; want %d %s", what, status, bytes.TrimSpace(body), wantStatus, code)
	}
}

func forEachBlobBackend(t *testing.T, signed bool, fn func(t *testing.T, s *blobServer)) {
	for _, be := range backends(t) {
		t.Run(be.name, func(t *testing.T) { fn(t, startBlobServer(t, be, signed)) })
	}
}

// TestBlobUploadStatuses: every answer of PUT and upload-grant.
func TestBlobUploadStatuses(t *testing.T) {
	forEachBlobBackend(t, false, func(t *testing.T, s *blobServer) {
		data := []byte("a small attachment")
		id := blobstore.IDOf(data)
		path := "/blobs/" + id
		big := bytes.Repeat([]byte("x"), 1<<20+1)
		bigID := blobstore.IDOf(big)
		for _, c := range []struct {
			name   string
			path   string
			actor  string
			body   io.Reader
			status int
			code   syncerr.Code
		}{
			{"no auth", path, "", bytes.NewReader(data), 401, syncerr.AuthRequired},
			{"hash mismatch", path, "alice", bytes.NewReader([]byte("other bytes")), 400, syncerr.BlobHashMismatch},
			{"not a blob id", "/blobs/sha256:XYZ", "alice", bytes.NewReader(data), 400, syncerr.InvalidRequest},
			{"over the cap (Content-Length)", "/blobs/" + bigID, "alice", bytes.NewReader(big), 413, syncerr.BlobTooLarge},
			{"over the cap (chunked)", "/blobs/" + bigID, "alice", io.MultiReader(bytes.NewReader(big)), 413, syncerr.BlobTooLarge},
		} {
			st, b, _ := s.do(http.MethodPut, c.path, c.actor, c.body, nil)
			wantBlobCode(t, c.name, st, b, c.status, c.code)
		}
		// Nothing was stored by the refusals.
		st, b, _ := s.do(http.MethodGet, "/blobs/"+bigID, "alice", nil, nil)
		wantBlobCode(t, "GET after refused upload", st, b, 404, syncerr.BlobNotFound)
		// 200 with an empty body, twice (idempotent).
		for i := range 2 {
			st, b, _ := s.do(http.MethodPut, path, "alice", bytes.NewReader(data), map[string]string{"Content-Type": "text/plain"})
			if st != 200 || len(b) != 0 {
				t.Fatalf("PUT #%d: HTTP %d %q", i, st, b)
			}
		}
		// A wrong body for a stored blob is still refused.
		st, b, _ = s.do(http.MethodPut, path, "alice", bytes.NewReader([]byte("nope")), nil)
		wantBlobCode(t, "hash mismatch on a stored blob", st, b, 400, syncerr.BlobHashMismatch)

		ctx := context.Background()
		c := s.client("alice")
		if g, err := c.UploadGrant(ctx, id, int64(len(data)), "text/plain"); err != nil || !g.Present {
			t.Errorf("grant of a stored blob = %+v, %v; want present", g, err)
		}
		if _, err := c.UploadGrant(ctx, bigID, int64(len(big)), ""); syncerr.CodeOf(err) != syncerr.BlobTooLarge {
			t.Errorf("grant over the cap: %v", err)
		}
		st, b, _ = s.do(http.MethodPost, path+"/upload-grant", "alice", strings.NewReader(`{"mediaType":"x"}`), nil)
		wantBlobCode(t, "grant without byteLength", st, b, 400, syncerr.InvalidRequest)
		st, b, _ = s.do(http.MethodPost, path+"/upload-grant", "", strings.NewReader(`{"byteLength":1}`), nil)
		wantBlobCode(t, "grant without auth", st, b, 401, syncerr.AuthRequired)

		// A grant: one PUT without credentials, capped at the granted length.
		other := []byte("granted upload")
		oid := blobstore.IDOf(other)
		g, err := c.UploadGrant(ctx, oid, int64(len(other)), "text/plain")
		if err != nil || g.Present || g.URL == "" || g.URLExpiresAtMs <= s.clock.now().UnixMilli() || g.URLExpiresAtMs > s.clock.now().Add(15*time.Minute).UnixMilli() {
			t.Fatalf("grant = %+v, %v", g, err)
		}
		if err := c.UploadBlobURL(ctx, g.URL, "text/plain", bytes.NewReader(append(bytes.Clone(other), '!')), -1); syncerr.CodeOf(err) != syncerr.BlobTooLarge {
			t.Errorf("PUT past the granted length: %v", err)
		}
		st, b, _ = s.do(http.MethodPut, strings.Replace(g.URL, "st=", "st=x", 1), "", bytes.NewReader(other), nil)
		wantBlobCode(t, "tampered grant", st, b, 403, syncerr.Forbidden)
		st, b, _ = s.do(http.MethodPut, strings.Replace(g.URL, oid, id, 1), "", bytes.NewReader(data), nil)
		wantBlobCode(t, "grant for another blob", st, b, 403, syncerr.Forbidden)
		if err := c.UploadBlobURL(ctx, g.URL, "text/plain", bytes.NewReader(other), int64(len(other))); err != nil {
			t.Errorf("PUT with the grant: %v", err)
		}
		// Expiry (15 min + the 60 s skew).
		g2, err := c.UploadGrant(ctx, bigID[:len(bigID)-1]+"0", 10, "")
		if err != nil {
			t.Fatal(err)
		}
		s.clock.advance(17 * time.Minute)
		st, b, _ = s.do(http.MethodPut, g2.URL, "", bytes.NewReader(data), nil)
		wantBlobCode(t, "expired grant", st, b, 403, syncerr.Forbidden)
		// The server keeps serving.
		if err := c.UploadBlob(ctx, id, "text/plain", bytes.NewReader(data), int64(len(data))); err != nil {
			t.Errorf("upload after the refusals: %v", err)
		}
	})
}

// TestBlobReferenceAndFetch: upload, reference, fetch (scenario 13): a
// push naming a missing blob is rejected and rolled back; downloads are
// authorized against the referencing rows (cross-scope, revocation,
// resolver failure), with ETag/304/Range.
func TestBlobReferenceAndFetch(t *testing.T) {
	forEachBlobBackend(t, false, func(t *testing.T, s *blobServer) {
		ctx := context.Background()
		data := bytes.Repeat([]byte("0123456789"), 30000) // 300 kB
		id := blobstore.IDOf(data)
		alice := s.client("alice")
		s.grant("alice", "L1")
		s.grant("bob", "L2")

		// A reference to a blob not uploaded: blob.not_found, rolled back.
		pr := s.pushFile(alice, "c1", "f1", "L1", blobRef(id, len(data)))
		if pr.Status != ssp2.CommitRejected || pr.Results[0].Code != string(syncerr.BlobNotFound) {
			t.Fatalf("push with a missing blob: %+v", pr)
		}
		if pr := s.pushFile(alice, "c2", "f0", "L1", nil); pr.Status != ssp2.CommitApplied || *pr.CommitSeq != 1 {
			t.Fatalf("push after the rejection: %+v (the rejected commit must leave no seq)", pr)
		}
		st, b, _ := s.do(http.MethodGet, "/blobs/"+id, "alice", nil, nil)
		wantBlobCode(t, "GET unknown", st, b, 404, syncerr.BlobNotFound)

		if err := alice.UploadBlob(ctx, id, "application/x-test", bytes.NewReader(data), int64(len(data))); err != nil {
			t.Fatal(err)
		}
		// Stored but referenced by no row: forbidden, never 404.
		st, b, _ = s.do(http.MethodGet, "/blobs/"+id, "alice", nil, nil)
		wantBlobCode(t, "GET unreferenced", st, b, 403, syncerr.BlobForbidden)

		if pr := s.pushFile(alice, "c3", "f1", "L1", blobRef(id, len(data))); pr.Status != ssp2.CommitApplied {
			t.Fatalf("push with the uploaded blob: %+v", pr)
		}
		var got bytes.Buffer
		if n, err := alice.DownloadBlob(ctx, id, &got); err != nil || n != int64(len(data)) || !bytes.Equal(got.Bytes(), data) {
			t.Fatalf("download: %d, %v", n, err)
		}
		st, b, h := s.do(http.MethodGet, "/blobs/"+id, "alice", nil, nil)
		if st != 200 || h.Get("ETag") != `"`+id+`"` || h.Get("Cache-Control") != "private, max-age=0" ||
			h.Get("Vary") != "Authorization, Accept-Encoding" || h.Get("Content-Type") != "application/x-test" || !bytes.Equal(b, data) {
			t.Errorf("GET: %d %v", st, h)
		}
		st, b, _ = s.do(http.MethodGet, "/blobs/"+id, "alice", nil, map[string]string{"If-None-Match": `"` + id + `"`})
		if st != 304 || len(b) != 0 {
			t.Errorf("If-None-Match: HTTP %d", st)
		}
		for _, rg := range []struct {
			hdr    string
			status int
			from   int
			to     int // exclusive
		}{
			{"bytes=2-5", 206, 2, 6},
			{"bytes=299990-", 206, 299990, 300000},
			{"bytes=-4", 206, 299996, 300000},
			{"bytes=10-999999", 206, 10, 300000},
			{"bytes=0-1,5-6", 200, 0, 300000},
			{"bytes=300000-", 416, 0, 0},
		} {
			st, b, h := s.do(http.MethodGet, "/blobs/"+id, "alice", nil, map[string]string{"Range": rg.hdr})
			if st != rg.status || (st != 416 && !bytes.Equal(b, data[rg.from:rg.to])) {
				t.Errorf("Range %s: HTTP %d, %d bytes", rg.hdr, st, len(b))
			}
			if st == 206 && h.Get("Content-Range") != fmt.Sprintf("bytes %d-%d/%d", rg.from, rg.to-1, len(data)) {
				t.Errorf("Range %s: Content-Range %q", rg.hdr, h.Get("Content-Range"))
			}
		}

		// Cross-scope: bob may access L2 only.
		st, b, _ = s.do(http.MethodGet, "/blobs/"+id, "bob", nil, nil)
		wantBlobCode(t, "cross-scope fetch", st, b, 403, syncerr.BlobForbidden)
		// Another partition sees no referencing row.
		st, b, _ = s.do(http.MethodGet, "/blobs/"+id, "", nil, map[string]string{"X-Actor": "alice", "X-Partition": "other"})
		wantBlobCode(t, "other partition", st, b, 403, syncerr.BlobForbidden)
		// A second row in L2 opens it to bob.
		if pr := s.pushFile(alice, "c4", "f2", "L2", blobRef(id, len(data))); pr.Status != ssp2.CommitRejected {
			t.Fatalf("alice wrote into L2: %+v", pr)
		}
		s.grant("alice", "L1", "L2")
		if pr := s.pushFile(alice, "c5", "f2", "L2", blobRef(id, len(data))); pr.Status != ssp2.CommitApplied {
			t.Fatalf("push into L2: %+v", pr)
		}
		if st, _, _ := s.do(http.MethodGet, "/blobs/"+id, "bob", nil, nil); st != 200 {
			t.Errorf("bob after an L2 row references the blob: HTTP %d", st)
		}
		// Revocation between upload and fetch.
		s.grant("bob", "L3")
		st, b, _ = s.do(http.MethodGet, "/blobs/"+id, "bob", nil, nil)
		wantBlobCode(t, "revoked", st, b, 403, syncerr.BlobForbidden)
		// Resolver failure: closed.
		s.failResolver("alice", true)
		st, b, _ = s.do(http.MethodGet, "/blobs/"+id, "alice", nil, nil)
		wantBlobCode(t, "resolver failure", st, b, 403, syncerr.BlobForbidden)
		s.failResolver("alice", false)
		// Dropping the references (NULL, delete) forbids again.
		s.pushFile(alice, "c6", "f1", "L1", nil)
		s.deleteFile(alice, "c7", "f2")
		st, b, _ = s.do(http.MethodGet, "/blobs/"+id, "alice", nil, nil)
		wantBlobCode(t, "no referencing row left", st, b, 403, syncerr.BlobForbidden)
		st, b, _ = s.do(http.MethodGet, "/blobs/"+id, "", nil, nil)
		wantBlobCode(t, "GET without auth", st, b, 401, syncerr.AuthRequired)
	})
}

// TestBlobSignedURLs: with signed URLs a download answers {"url"}; the URL
// serves without credentials until it expires; tampering gets no bytes.
func TestBlobSignedURLs(t *testing.T) {
	forEachBlobBackend(t, true, func(t *testing.T, s *blobServer) {
		ctx := context.Background()
		data := []byte("signed bytes")
		id := blobstore.IDOf(data)
		alice := s.client("alice")
		if err := alice.UploadBlob(ctx, id, "", bytes.NewReader(data), int64(len(data))); err != nil {
			t.Fatal(err)
		}
		s.pushFile(alice, "c1", "f1", "L1", blobRef(id, len(data)))
		var buf bytes.Buffer
		if _, err := alice.DownloadBlob(ctx, id, &buf); err != nil || !bytes.Equal(buf.Bytes(), data) {
			t.Fatalf("download through the signed URL: %v", err)
		}
		st, b, _ := s.do(http.MethodGet, "/blobs/"+id, "alice", nil, nil)
		var g httpsync.BlobGrant
		if st != 200 || jsonUnmarshal(b, &g) != nil || !strings.HasPrefix(g.URL, s.http.URL+"/blobs/"+id+"?st=") || g.URLExpiresAtMs <= s.clock.now().UnixMilli() {
			t.Fatalf("signed answer: %d %s", st, b)
		}
		st, b, h := s.do(http.MethodGet, g.URL, "", nil, map[string]string{"Range": "bytes=0-5"})
		if st != 206 || string(b) != "signed" || h.Get("ETag") != `"`+id+`"` {
			t.Errorf("signed fetch: HTTP %d %q", st, b)
		}
		st, b, _ = s.do(http.MethodGet, g.URL+"x", "", nil, nil)
		wantBlobCode(t, "tampered URL", st, b, 403, syncerr.BlobForbidden)
		// An upload grant never opens a download, nor the reverse.
		ug, err := alice.UploadGrant(ctx, blobstore.IDOf([]byte("new")), 3, "")
		if err != nil {
			t.Fatal(err)
		}
		st, b, _ = s.do(http.MethodGet, strings.Replace(ug.URL, blobstore.IDOf([]byte("new")), id, 1), "", nil, nil)
		wantBlobCode(t, "upload token used for a download", st, b, 403, syncerr.BlobForbidden)
		st, b, _ = s.do(http.MethodPut, g.URL, "", bytes.NewReader(data), nil)
		wantBlobCode(t, "download token used for an upload", st, b, 403, syncerr.Forbidden)
		s.clock.advance(5*time.Minute + 61*time.Second)
		st, b, _ = s.do(http.MethodGet, g.URL, "", nil, nil)
		wantBlobCode(t, "expired URL", st, b, 403, syncerr.BlobForbidden)
	})
}

// TestBlobOrphanSweep: the maintenance pass removes blobs unreferenced for
// 24 h, keeps referenced ones, and counts both in /metrics.
func TestBlobOrphanSweep(t *testing.T) {
	forEachBlobBackend(t, false, func(t *testing.T, s *blobServer) {
		ctx := context.Background()
		alice := s.client("alice")
		kept, orphan, dropped := []byte("kept"), []byte("orphan"), []byte("dropped")
		for _, d := range [][]byte{kept, orphan, dropped} {
			if err := alice.UploadBlob(ctx, blobstore.IDOf(d), "", bytes.NewReader(d), int64(len(d))); err != nil {
				t.Fatal(err)
			}
		}
		s.pushFile(alice, "c1", "k", "L1", blobRef(blobstore.IDOf(kept), len(kept)))
		s.pushFile(alice, "c2", "d", "L1", blobRef(blobstore.IDOf(dropped), len(dropped)))
		s.clock.advance(23 * time.Hour)
		s.deleteFile(alice, "c3", "d") // dropped's orphan clock starts now
		if rep, err := s.eng.Retention().MaintenancePass(ctx, false); err != nil || rep.BlobsSwept != 0 {
			t.Fatalf("pass at 23 h: %+v, %v", rep, err)
		}
		s.clock.advance(2 * time.Hour)
		if rep, err := s.eng.Retention().MaintenancePass(ctx, false); err != nil || rep.BlobsSwept != 1 {
			t.Fatalf("pass at 25 h: %+v, %v; want the orphan swept", rep, err)
		}
		st, b, _ := s.do(http.MethodGet, "/blobs/"+blobstore.IDOf(orphan), "alice", nil, nil)
		wantBlobCode(t, "swept blob", st, b, 404, syncerr.BlobNotFound)
		// A push referencing the swept blob is refused; re-uploading it works.
		if pr := s.pushFile(alice, "c4", "o", "L1", blobRef(blobstore.IDOf(orphan), len(orphan))); pr.Status != ssp2.CommitRejected {
			t.Errorf("push naming a swept blob: %+v", pr)
		}
		if err := alice.UploadBlob(ctx, blobstore.IDOf(orphan), "", bytes.NewReader(orphan), int64(len(orphan))); err != nil {
			t.Errorf("re-upload after the sweep: %v", err)
		}
		s.clock.advance(24*time.Hour + time.Minute)
		if rep, err := s.eng.Retention().MaintenancePass(ctx, false); err != nil || rep.BlobsSwept != 2 {
			t.Fatalf("pass at 49 h: %+v, %v; want dropped and orphan swept", rep, err)
		}
		var buf bytes.Buffer
		if _, err := alice.DownloadBlob(ctx, blobstore.IDOf(kept), &buf); err != nil {
			t.Errorf("the referenced blob is gone: %v", err)
		}
		st, b, _ = s.do(http.MethodGet, "/metrics", "", nil, nil)
		for _, want := range []string{"synclane_blobs_swept_total 3", "synclane_blob_uploads_total 4", "synclane_blob_sweep_passes_total 3"} {
			if !promtext.Has(b, want) {
				t.Errorf("/metrics lacks %q", want)
			}
		}
	})
}
