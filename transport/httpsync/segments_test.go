package httpsync_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/storage/segstore"
	"github.com/synclane/synclane/transport/httpsync"
	"github.com/synclane/synclane/transport/httpsync/httpsynctest"
)

// testClock is a settable clock for segment TTLs.
type testClock struct{ ms atomic.Int64 }

func (c *testClock) now() time.Time          { return time.UnixMilli(c.ms.Load()) }
func (c *testClock) advance(d time.Duration) { c.ms.Add(d.Milliseconds()) }

// seed writes n todos of list L in commits of 400.
func seed(t *testing.T, s *server, n int) {
	t.Helper()
	ctx := context.Background()
	w := s.client("writer", "cw")
	var batch []ssp2.Frame
	for i := range n {
		id := fmt.Sprintf("t%05d", i)
		batch = append(batch, commit("c"+id, upsert(t, id, "L", "row "+id, nil)))
		if len(batch) == 400 || i == n-1 {
			if _, err := w.Push(ctx, framesToCommits(batch)...); err != nil {
				t.Fatal(err)
			}
			batch = batch[:0]
		}
	}
}

func refsOf(m *ssp2.Message) []*ssp2.SegmentRef {
	var out []*ssp2.SegmentRef
	for _, f := range m.Frames {
		if r, ok := f.(*ssp2.SegmentRef); ok {
			out = append(out, r)
		}
	}
	return out
}

func inlinesOf(m *ssp2.Message) int {
	n := 0
	for _, f := range m.Frames {
		if _, ok := f.(*ssp2.SegmentInline); ok {
			n++
		}
	}
	return n
}

func listL() map[string][]string { return map[string][]string{"list_id": {"L"}} }

func sub0(cursor int64, token []byte) *ssp2.Subscription {
	return &ssp2.Subscription{ID: "todos", Table: "todos", Scopes: listL(), Cursor: cursor, BootstrapState: token}
}

// TestSegmentLanesEndToEnd bootstraps 2,500 rows over HTTP in each lane
// (inline rows; rows by SEGMENT_REF because only bit 1 is accepted; by
// ref because the first page exceeds the inline limit), with a cut
// connection between pages, and checks the replica holds every row.
func TestSegmentLanesEndToEnd(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s0 *server) {
		s0.stop()
		s := startServerWith(t, s0.be, func(c *engine.Config) { c.Segments.InlineMaxBytes = 16 << 10 })
		const n = 2500
		seed(t, s, n)
		for _, lane := range []struct {
			name     string
			accept   uint8
			wantRefs bool
		}{
			{"inline", ssp2.AcceptInlineRows, false},
			{"ref-only", ssp2.AcceptRefRows, true},
			{"both-over-inline-limit", ssp2.AcceptInlineRows | ssp2.AcceptRefRows, true},
		} {
			t.Run(lane.name, func(t *testing.T) {
				ctx := context.Background()
				c := s.client("reader", "cr-"+lane.name)
				ph := ssp2.PullHeader{Accept: lane.accept, LimitSnapshotRows: 1000, MaxSnapshotPages: 2}
				resp, err := c.Pull(ctx, ph, sub0(-1, nil))
				if err != nil {
					t.Fatal(err)
				}
				refs := refsOf(resp)
				if lane.wantRefs {
					if len(refs) != 2 || inlinesOf(resp) != 0 {
						t.Fatalf("%d refs, %d inline; want 2 refs", len(refs), inlinesOf(resp))
					}
					if refs[0].RowCursor != nil || refs[0].NextRowCursor == nil || refs[1].RowCursor == nil ||
						*refs[1].RowCursor != *refs[0].NextRowCursor || refs[0].RowCount != 1000 || refs[0].MediaType != ssp2.MediaRows ||
						refs[0].ScopeDigest != ssp2.ScopeDigest(listL()) || refs[0].AsOfCommitSeq != int64(n) || refs[0].URL != nil {
						t.Fatalf("refs %+v %+v", refs[0], refs[1])
					}
					if !strings.HasPrefix(refs[0].SegmentID, "sha256:") || len(refs[0].SegmentID) != 7+64 {
						t.Fatalf("segment id %q", refs[0].SegmentID)
					}
				} else if len(refs) != 0 || inlinesOf(resp) != 2 {
					t.Fatalf("%d refs, %d inline; want 2 inline", len(refs), inlinesOf(resp))
				}
				r := httpsynctest.NewReplica(c, s.schema)
				r.Subscribe("todos", "todos", listL())
				r.Limits = ph
				if err := c.ResolveSegments(ctx, resp, sub0(-1, nil)); err != nil {
					t.Fatal(err)
				}
				st, err := r.Apply(resp)
				if err != nil {
					t.Fatal(err)
				}
				if !st.Incomplete || st.SegmentRows != 2000 {
					t.Fatalf("first round %+v", st)
				}
				// The connection is cut mid-response; the client keeps its
				// token and pulls again.
				if m := cutResponse(t, s, r, r.Subs[0].Token); m != nil {
					t.Fatal("a cut response decoded")
				}
				if err := r.SyncUntilIdle(ctx, 10); err != nil {
					t.Fatal(err)
				}
				if got := len(r.Rows["todos"]); got != n {
					t.Fatalf("replica has %d rows, want %d", got, n)
				}
				if r.Subs[0].Cursor != n || r.Subs[0].Token != nil {
					t.Fatalf("cursor %d token %s", r.Subs[0].Cursor, r.Subs[0].Token)
				}
			})
		}
		// Under the default 256 KiB inline limit, a client accepting both
		// lanes gets these pages inline.
		def := startServerWith(t, s0.be, nil)
		resp, err := def.client("reader", "cr-default").Pull(context.Background(),
			ssp2.PullHeader{Accept: ssp2.AcceptInlineRows | ssp2.AcceptRefRows, LimitSnapshotRows: 1000, MaxSnapshotPages: 2}, sub0(-1, nil))
		if err != nil {
			t.Fatal(err)
		}
		if len(refsOf(resp)) != 0 || inlinesOf(resp) != 2 {
			t.Fatalf("default limit: %d refs, %d inline; want 2 inline", len(refsOf(resp)), inlinesOf(resp))
		}
	})
}

// seedAndPullRef seeds n rows and pulls the first 1,000-row page by
// reference as "reader" (client "cr"): the client, its pull header, the
// response and the page's SEGMENT_REF.
func seedAndPullRef(t *testing.T, s *server, n int) (*httpsync.Client, ssp2.PullHeader, *ssp2.Message, *ssp2.SegmentRef) {
	t.Helper()
	seed(t, s, n)
	c := s.client("reader", "cr")
	ph := ssp2.PullHeader{Accept: ssp2.AcceptRefRows, LimitSnapshotRows: 1000, MaxSnapshotPages: 1}
	resp, err := c.Pull(context.Background(), ph, sub0(-1, nil))
	if err != nil {
		t.Fatal(err)
	}
	refs := refsOf(resp)
	if len(refs) == 0 {
		t.Fatal("the pull answered no SEGMENT_REF")
	}
	return c, ph, resp, refs[0]
}

// getSegment downloads id with raw headers.
func getSegment(t *testing.T, s *server, id, actor, scopes string, hdr map[string]string) (*http.Response, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, strings.TrimSuffix(s.url, "/sync")+"/segments/"+id, nil)
	req.Header.Set("X-Actor", actor)
	req.Header.Set("X-Partition", "team")
	if scopes != "" {
		req.Header.Set(httpsync.ScopesHeader, scopes)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	tr := &http.Transport{DisableCompression: true}
	defer tr.CloseIdleConnections()
	res, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res, b
}

func wantCode(t *testing.T, res *http.Response, body []byte, status int, code syncerr.Code) {
	t.Helper()
	if res.StatusCode != status || !strings.Contains(string(body), `"code":"`+string(code)+`"`) {
		t.Fatalf("got %d %s, want %d %s", res.StatusCode, body, status, code)
	}
}

// TestSegmentDownloadRules covers GET /segments/{id}: headers, 304,
// compression, revocation between the REF and the download (403), a
// scope map whose digest differs (403), an unknown id (404 not_found), an
// expired segment (404 segment_expired, then the client re-pulls and
// converges), and another process serving a segment this one built.
func TestSegmentDownloadRules(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s0 *server) {
		s0.stop()
		clk := &testClock{}
		clk.ms.Store(time.Now().UnixMilli())
		s := startServerWith(t, s0.be, func(c *engine.Config) { c.Now = clk.now; c.Segments.TTL = time.Hour })
		const n = 1500
		ctx := context.Background()
		c, ph, resp, ref := seedAndPullRef(t, s, n)
		scopes := string(ssp2.CanonicalScopesJSON(listL()))

		res, body := getSegment(t, s, ref.SegmentID, "reader", scopes, nil)
		if res.StatusCode != 200 || int64(len(body)) != ref.ByteLength || res.Header.Get("ETag") != `"`+ref.SegmentID+`"` ||
			res.Header.Get("Cache-Control") != "private, max-age=0" || res.Header.Get("Content-Type") != "application/octet-stream" ||
			!strings.Contains(res.Header.Get("Vary"), "X-Syncular-Scopes") || !strings.Contains(res.Header.Get("Vary"), "Authorization") {
			t.Fatalf("download: %d %d bytes %v", res.StatusCode, len(body), res.Header)
		}
		if _, err := ssp2.DecodeSegment(body); err != nil {
			t.Fatalf("not an SSG2 segment: %v", err)
		}
		res, body = getSegment(t, s, ref.SegmentID, "reader", scopes, map[string]string{"If-None-Match": `"` + ref.SegmentID + `"`})
		if res.StatusCode != http.StatusNotModified || len(body) != 0 {
			t.Fatalf("If-None-Match: %d", res.StatusCode)
		}
		for _, enc := range []string{"zstd", "gzip"} {
			res, _ = getSegment(t, s, ref.SegmentID, "reader", scopes, map[string]string{"Accept-Encoding": enc})
			if res.StatusCode != 200 || res.Header.Get("Content-Encoding") != enc {
				t.Fatalf("Accept-Encoding %s: %d %q", enc, res.StatusCode, res.Header.Get("Content-Encoding"))
			}
		}
		// Another process on the same database serves the segment.
		other := startServerWith(t, s0.be, func(c *engine.Config) { c.Now = clk.now; c.Segments.TTL = time.Hour })
		other.segDir = s.segDir
		other.restart()
		if res, _ := getSegment(t, other, ref.SegmentID, "reader", scopes, nil); res.StatusCode != 200 {
			t.Fatalf("other process: %d", res.StatusCode)
		}
		// A different requested map digests differently.
		res, body = getSegment(t, s, ref.SegmentID, "reader", `{"list_id":["L","M"]}`, nil)
		wantCode(t, res, body, 403, syncerr.Forbidden)
		// Revoked between the REF and the download.
		s.grant("reader", "M")
		res, body = getSegment(t, s, ref.SegmentID, "reader", scopes, nil)
		wantCode(t, res, body, 403, syncerr.Forbidden)
		if _, err := c.FetchSegment(ctx, ref, listL()); syncerr.CodeOf(err) != syncerr.Forbidden {
			t.Fatalf("client fetch after revocation: %v", err)
		}
		s.grant("reader", "L")
		res, body = getSegment(t, s, "sha256:"+strings.Repeat("0", 64), "reader", scopes, nil)
		wantCode(t, res, body, 404, syncerr.NotFound)
		res, body = getSegment(t, s, ref.SegmentID, "reader", "", nil)
		wantCode(t, res, body, 400, syncerr.InvalidRequest)

		// Expired: the download answers segment_expired even after the
		// sweep, and the client's re-pull gets a fresh segment.
		r := httpsynctest.NewReplica(c, s.schema)
		r.Subscribe("todos", "todos", listL())
		r.Limits = ph
		clk.advance(time.Hour)
		res, body = getSegment(t, s, ref.SegmentID, "reader", scopes, nil)
		wantCode(t, res, body, 404, syncerr.SegmentExpired)
		if n, err := s.eng.Segments().Sweep(ctx); err != nil || n == 0 {
			t.Fatalf("sweep: %d %v", n, err)
		}
		res, body = getSegment(t, s, ref.SegmentID, "reader", scopes, nil)
		wantCode(t, res, body, 404, syncerr.SegmentExpired)
		if err := c.ResolveSegments(ctx, resp, sub0(-1, nil)); syncerr.CodeOf(err) != syncerr.SegmentExpired {
			t.Fatalf("resolving an expired ref: %v", err)
		}
		if err := r.SyncUntilIdle(ctx, 10); err != nil {
			t.Fatal(err)
		}
		if got := len(r.Rows["todos"]); got != n {
			t.Fatalf("replica has %d rows after re-pull, want %d", got, n)
		}
		if st := s.eng.Segments().Stats(); st.Expired == 0 || st.Served == 0 || st.ServedBytes == 0 || st.Built < 3 {
			t.Fatalf("stats %+v", st)
		}
	})
}

// TestSegmentStormBuildsOnce: 50 concurrent bootstraps of one scope build
// each segment once and reuse it 49 times (segment metrics).
func TestSegmentStormBuildsOnce(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s *server) {
		const n, pages = 1500, 3
		seed(t, s, n)
		before := s.eng.Segments().Stats()
		ctx := context.Background()
		var wg sync.WaitGroup
		errs := make([]error, 50)
		for i := range errs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := httpsynctest.NewReplica(s.client("reader", fmt.Sprintf("storm-%d", i)), s.schema)
				r.Subscribe("todos", "todos", listL())
				r.Limits = ssp2.PullHeader{Accept: ssp2.AcceptRefRows, LimitSnapshotRows: 500, MaxSnapshotPages: 1}
				if err := r.SyncUntilIdle(ctx, 10); err != nil {
					errs[i] = err
					return
				}
				if len(r.Rows["todos"]) != n {
					errs[i] = fmt.Errorf("client %d has %d rows", i, len(r.Rows["todos"]))
				}
			}()
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
		st := s.eng.Segments().Stats()
		if built, reused := st.Built-before.Built, st.Reused-before.Reused; built != pages || reused != 49*pages {
			t.Fatalf("built %d reused %d, want %d and %d", built, reused, pages, 49*pages)
		}
	})
}

// TestSQLiteImageLane: a client accepting images (bit 2) gets the whole
// 1,200-row table as one SQLite image by reference (no row cursors, no
// token); the image opens with the sqlite3 CLI, holds exactly two tables and
// exactly the snapshot rows, is reused by the next client, and a replica
// applying it converges with one bootstrapped inline. A table that fits one
// page is never imaged.
func TestSQLiteImageLane(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s *server) {
		const n = 1200
		seed(t, s, n)
		ctx := context.Background()
		ph := ssp2.PullHeader{Accept: ssp2.AcceptInlineRows | ssp2.AcceptRefRows | ssp2.AcceptSQLite, LimitSnapshotRows: 500, MaxSnapshotPages: 4}
		c := s.client("reader", "img")
		resp, err := c.Pull(ctx, ph, sub0(-1, nil))
		if err != nil {
			t.Fatal(err)
		}
		refs := refsOf(resp)
		if len(refs) != 1 || inlinesOf(resp) != 0 {
			t.Fatalf("%d refs %d inline, want one image", len(refs), inlinesOf(resp))
		}
		ref := refs[0]
		if ref.MediaType != ssp2.MediaSQLite || ref.RowCursor != nil || ref.NextRowCursor != nil || ref.RowCount != n || ref.AsOfCommitSeq != n {
			t.Fatalf("image ref %+v", ref)
		}
		for _, f := range resp.Frames {
			if e, ok := f.(*ssp2.SubEnd); ok && (e.BootstrapState != nil || e.NextCursor != n) {
				t.Fatalf("SUB_END after an image: %+v", e)
			}
		}
		res, body := getSegment(t, s, ref.SegmentID, "reader", string(ssp2.CanonicalScopesJSON(listL())), nil)
		if res.StatusCode != 200 || int64(len(body)) != ref.ByteLength {
			t.Fatalf("download: %d", res.StatusCode)
		}
		path := filepath.Join(t.TempDir(), "image.db")
		if err := os.WriteFile(path, body, 0o600); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command("sqlite3", path, `SELECT name FROM sqlite_master WHERE type='table' ORDER BY name;`+
			`SELECT count(*), count(DISTINCT id), min(id), max(id), min(_syncular_version) FROM todos;`+
			`SELECT format, "table", schemaVersion, asOfCommitSeq, scopeDigest, rowCount FROM _syncular_segment;`+
			`SELECT type FROM pragma_table_info('todos') ORDER BY cid;`).CombinedOutput()
		if err != nil {
			t.Fatalf("sqlite3: %v: %s", err, out)
		}
		want := fmt.Sprintf("_syncular_segment\ntodos\n%d|%d|t00000|t%05d|1\n1|todos|1|%d|%s|%d\nTEXT\nTEXT\nTEXT\nINTEGER\nINTEGER\nINTEGER\nINTEGER\n",
			n, n, n-1, n, ssp2.ScopeDigest(listL()), n)
		if string(out) != want {
			t.Fatalf("sqlite3 says\n%s\nwant\n%s", out, want)
		}
		// The next client of the same scope at the same pin gets the same image.
		before := s.eng.Segments().Stats()
		resp2, err := s.client("reader", "img2").Pull(ctx, ph, sub0(-1, nil))
		if err != nil {
			t.Fatal(err)
		}
		if r2 := refsOf(resp2); len(r2) != 1 || r2[0].SegmentID != ref.SegmentID || s.eng.Segments().Stats().Built != before.Built {
			t.Fatalf("second client did not reuse the image")
		}
		// Applied, it converges with an inline bootstrap.
		img := s.replica("reader", "img3", "L")
		img.Limits = ph
		if err := img.SyncUntilIdle(ctx, 5); err != nil {
			t.Fatal(err)
		}
		inl := s.replica("reader", "inl", "L")
		inl.Limits = ssp2.PullHeader{Accept: ssp2.AcceptInlineRows, LimitSnapshotRows: 500, MaxSnapshotPages: 4}
		if err := inl.SyncUntilIdle(ctx, 5); err != nil {
			t.Fatal(err)
		}
		sameRows(t, img, inl)
		if len(img.Rows["todos"]) != n {
			t.Fatalf("image replica has %d rows", len(img.Rows["todos"]))
		}
		// One page's worth: rows, never an image.
		small, err := s.client("reader", "img-small").Pull(ctx, ssp2.PullHeader{Accept: ph.Accept, LimitSnapshotRows: 5000, MaxSnapshotPages: 1}, sub0(-1, nil))
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range refsOf(small) {
			if r.MediaType == ssp2.MediaSQLite {
				t.Fatal("a table that fits one page was imaged")
			}
		}
	})
}

// TestSignedSegmentURLs: with accept bit 3 every REF carries a signed URL
// that downloads without host auth; the Go client follows it; tampered,
// expired (TTL passed beyond the skew, or born expired), wrong-segment and
// wrong-digest tokens get 403 sync.forbidden; a token of another audience
// (a partition that did not publish the segment) gets 404 sync.not_found,
// as an unknown segment. Without bit 3 no URL is issued.
func TestSignedSegmentURLs(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s0 *server) {
		s0.stop()
		clk := &testClock{}
		clk.ms.Store(time.Now().UnixMilli())
		signer := segstore.NewSigner([]byte(strings.Repeat("k", 32)), 5*time.Minute, clk.now)
		var s *server
		s = startServerWith(t, s0.be, func(c *engine.Config) {
			c.Now, c.SignedURLs = clk.now, signer
			c.PublicURL = func() string { return strings.TrimSuffix(s.url, "/sync") }
		})
		seed(t, s, 1500)
		ctx := context.Background()
		c := s.client("reader", "signed")
		ph := ssp2.PullHeader{Accept: ssp2.AcceptRefRows | ssp2.AcceptSignedURLs, LimitSnapshotRows: 1000, MaxSnapshotPages: 2}
		resp, err := c.Pull(ctx, ph, sub0(-1, nil))
		if err != nil {
			t.Fatal(err)
		}
		refs := refsOf(resp)
		if len(refs) != 2 {
			t.Fatalf("%d refs", len(refs))
		}
		ref := refs[0]
		if ref.URL == nil || ref.URLExpiresAtMs == nil || *ref.URLExpiresAtMs/1000 != (clk.ms.Load()+5*60_000)/1000 {
			t.Fatalf("ref without a signed URL or wrong expiry: %+v", ref)
		}
		fetch := func(u string) (int, []byte) {
			res, err := http.Get(u)
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			b, _ := io.ReadAll(res.Body)
			return res.StatusCode, b
		}
		if code, b := fetch(*ref.URL); code != 200 || int64(len(b)) != ref.ByteLength {
			t.Fatalf("signed download: %d %s", code, b)
		}
		// The client follows the URL (no host headers needed).
		anon := &httpsync.Client{URL: s.url}
		if _, err := anon.FetchSegment(ctx, ref, nil); err != nil {
			t.Fatalf("client follows the signed URL: %v", err)
		}
		base, tok, _ := strings.Cut(*ref.URL, "?st=")
		forbidden := func(what, u string) {
			t.Helper()
			code, b := fetch(u)
			if code != 403 || !strings.Contains(string(b), `"sync.forbidden"`) {
				t.Fatalf("%s: %d %s, want 403 sync.forbidden", what, code, b)
			}
		}
		tampered := []byte(tok)
		tampered[3] ^= 1
		forbidden("tampered payload", base+"?st="+string(tampered))
		flip := byte('A')
		if tok[len(tok)-2] == 'A' {
			flip = 'B'
		}
		forbidden("tampered MAC", base+"?st="+tok[:len(tok)-2]+string(flip)+tok[len(tok)-1:])
		forbidden("other segment", strings.TrimSuffix(s.url, "/sync")+"/segments/"+refs[1].SegmentID+"?st="+tok)
		wrongAud, _ := signer.Sign("another-partition", ref.SegmentID, ref.ScopeDigest)
		if code, b := fetch(base + "?st=" + wrongAud); code != 404 || !strings.Contains(string(b), `"sync.not_found"`) {
			t.Fatalf("wrong audience: %d %s, want 404 sync.not_found", code, b)
		}
		wrongSD, _ := signer.Sign("team", ref.SegmentID, ssp2.ScopeDigest(map[string][]string{"list_id": {"Z"}}))
		forbidden("wrong scope digest", base+"?st="+wrongSD)
		otherKey, _ := segstore.NewSigner([]byte(strings.Repeat("x", 32)), time.Minute, clk.now).Sign("team", ref.SegmentID, ref.ScopeDigest)
		forbidden("other key", base+"?st="+otherKey)
		// Within the skew after expiry it still works; beyond it, not.
		clk.advance(5*time.Minute + 30*time.Second)
		if code, _ := fetch(*ref.URL); code != 200 {
			t.Fatalf("within skew: %d", code)
		}
		clk.advance(31 * time.Second)
		forbidden("expired", *ref.URL)
		signer.SetTTL(0)
		born, _ := signer.Sign("team", ref.SegmentID, ref.ScopeDigest)
		forbidden("born expired", base+"?st="+born)
		// Without bit 3: no URL.
		resp, err = s.client("reader", "unsigned").Pull(ctx, ssp2.PullHeader{Accept: ssp2.AcceptRefRows, LimitSnapshotRows: 1000, MaxSnapshotPages: 2}, sub0(-1, nil))
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range refsOf(resp) {
			if r.URL != nil || r.URLExpiresAtMs != nil {
				t.Fatal("URL issued without accept bit 3")
			}
		}
	})
}

// TestSegmentFileSpoiledOnDisk: on the embedded store a segment's bytes
// are a file; one torn or altered on disk is answered 404
// sync.segment_expired (never served), and the client's re-pull gets the
// page rebuilt instead of the same reference again.
func TestSegmentFileSpoiledOnDisk(t *testing.T) {
	for _, be := range backends(t) {
		if be.name != "sqlite" { // PostgreSQL keeps segments in a table
			continue
		}
		s := startServer(t, be)
		dataDir := filepath.Join(s.segDir, "segments.db-data")
		const n = 1500
		ctx := context.Background()
		c, ph, _, ref := seedAndPullRef(t, s, n)
		scopes := string(ssp2.CanonicalScopesJSON(listL()))
		files, err := filepath.Glob(filepath.Join(dataDir, "*.seg"))
		if err != nil || len(files) != 1 {
			t.Fatalf("segment files %v, %v; want one", files, err)
		}
		b, err := os.ReadFile(files[0])
		if err != nil {
			t.Fatal(err)
		}
		b[len(b)/2] ^= 0xff
		if err := os.WriteFile(files[0], b, 0o600); err != nil {
			t.Fatal(err)
		}
		res, body := getSegment(t, s, ref.SegmentID, "reader", scopes, nil)
		wantCode(t, res, body, 404, syncerr.SegmentExpired)
		r := httpsynctest.NewReplica(c, s.schema)
		r.Subscribe("todos", "todos", listL())
		r.Limits = ph
		if err := r.SyncUntilIdle(ctx, 10); err != nil {
			t.Fatal(err)
		}
		if got := len(r.Rows["todos"]); got != n {
			t.Fatalf("replica has %d rows after re-pull, want %d", got, n)
		}
		if res, body := getSegment(t, s, ref.SegmentID, "reader", scopes, nil); res.StatusCode != 200 || int64(len(body)) != ref.ByteLength {
			t.Fatalf("the rebuilt segment: %d, %d bytes", res.StatusCode, len(body))
		}
	}
}

// TestStreamedRefsUnderEveryEncoding: a by-ref bootstrap whose later pages
// are streamed (and flushed page by page) decodes whole with the answer
// identity, gzip or zstd.
func TestStreamedRefsUnderEveryEncoding(t *testing.T) {
	for _, be := range backends(t) {
		if be.name != "sqlite" {
			continue
		}
		s := startServer(t, be)
		const n = 3000
		seed(t, s, n)
		c := s.client("reader", "cr")
		if err := c.Handshake(context.Background()); err != nil {
			t.Fatal(err)
		}
		epoch := c.Epoch
		body, err := ssp2.Encode(&ssp2.Message{WireVersion: ssp2.WireV3, Kind: ssp2.KindRequest, Frames: []ssp2.Frame{
			&ssp2.ReqHeader{ClientID: "cr", SchemaVersion: 1, LogEpoch: &epoch},
			&ssp2.PullHeader{Accept: ssp2.AcceptRefRows, LimitSnapshotRows: 1000, MaxSnapshotPages: 3}, sub0(-1, nil)}})
		if err != nil {
			t.Fatal(err)
		}
		for _, enc := range []string{"identity", "gzip", "zstd"} {
			req, _ := http.NewRequest(http.MethodPost, s.url, bytes.NewReader(body))
			req.Header.Set("Content-Type", httpsync.ContentType)
			req.Header.Set("X-Actor", "reader")
			req.Header.Set("X-Partition", "team")
			req.Header.Set("Accept-Encoding", enc)
			res, err := (&http.Client{Transport: &http.Transport{DisableCompression: true}}).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(res.Body)
			res.Body.Close()
			if err != nil || res.StatusCode != 200 {
				t.Fatalf("%s: HTTP %d, %v", enc, res.StatusCode, err)
			}
			if ce := res.Header.Get("Content-Encoding"); (enc == "identity" && ce != "") || (enc != "identity" && ce != enc) {
				t.Fatalf("%s: Content-Encoding %q", enc, ce)
			}
			switch enc {
			case "gzip":
				zr, err := gzip.NewReader(bytes.NewReader(b))
				if err != nil {
					t.Fatal(err)
				}
				if b, err = io.ReadAll(zr); err != nil {
					t.Fatal(err)
				}
			case "zstd":
				zr, _ := zstd.NewReader(nil)
				if b, err = zr.DecodeAll(b, nil); err != nil {
					t.Fatal(err)
				}
				zr.Close()
			}
			m, err := ssp2.DecodeResponse(b)
			if err != nil {
				t.Fatalf("%s: %v", enc, err)
			}
			if got := len(refsOf(m)); got != 3 {
				t.Fatalf("%s: %d refs, want 3", enc, got)
			}
		}
	}
}
