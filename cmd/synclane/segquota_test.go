package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/synclane/synclane/internal/promtext"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/transport/httpsync"
)

// TestServeFakeScopeStormStaysWithinSegmentQuota drives the real server:
// 100 bootstraps by ref whose scope sets each add one allowed value that
// matches no rows (100 scope digests, one page of identical bytes) leave
// the embedded segment store within --segment-store-max-files and
// --segment-store-max-bytes (one shared file), every storm client's
// download is still authorized, and an honest client then bootstraps and
// downloads the right bytes.
func TestServeFakeScopeStormStaysWithinSegmentQuota(t *testing.T) {
	const maxFiles, maxBytes = 4, 1 << 20
	data := t.TempDir()
	base := startTestControl(t, "--data", data, "--inline-segment-max-bytes", "0",
		"--segment-store-max-files", strconv.Itoa(maxFiles), "--segment-store-max-bytes", strconv.Itoa(maxBytes))
	allowed := []string{"p1"}
	for i := range 100 {
		allowed = append(allowed, fmt.Sprintf("fake-%03d", i))
	}
	grant, _ := json.Marshal(map[string][]string{"project_id": allowed})
	if code := control(t, "PUT", base+"/_test/allowed-scopes/ada", string(grant), nil); code != 200 {
		t.Fatalf("grant: %d", code)
	}
	w := newThingsClient(base, "ada", "c-writer")
	for i := range 20 {
		pushThing(t, w, fmt.Sprint("i", i), "p1", fmt.Sprint("commit-", i))
	}
	// bootstrap pulls scopes by ref and downloads the segment with them.
	bootstrap := func(clientID string, scopes []string) (*ssp2.SegmentRef, error) {
		c := newThingsClient(base, "ada", clientID)
		sc := map[string][]string{"project_id": scopes}
		resp, err := c.Pull(context.Background(), ssp2.PullHeader{Accept: ssp2.AcceptInlineRows | ssp2.AcceptRefRows},
			&ssp2.Subscription{ID: "s", Table: "things", Scopes: sc, Cursor: -1})
		if err != nil {
			return nil, err
		}
		var ref *ssp2.SegmentRef
		for _, f := range resp.Frames {
			if r, ok := f.(*ssp2.SegmentRef); ok {
				ref = r
			}
		}
		if ref == nil {
			return nil, fmt.Errorf("%s: no SEGMENT_REF", clientID)
		}
		hdr, _ := json.Marshal(sc)
		req, _ := http.NewRequest(http.MethodGet, base+"/segments/"+ref.SegmentID, nil)
		req.Header.Set("X-Actor", "ada")
		req.Header.Set(httpsync.ScopesHeader, string(hdr))
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil, err
		}
		defer res.Body.Close()
		body, _ := io.ReadAll(res.Body)
		if res.StatusCode != 200 {
			return nil, fmt.Errorf("%s: download %d %s", clientID, res.StatusCode, body)
		}
		sum := sha256.Sum256(body)
		if "sha256:"+hex.EncodeToString(sum[:]) != ref.SegmentID || int64(len(body)) != ref.ByteLength {
			return nil, fmt.Errorf("%s: downloaded bytes do not match %s", clientID, ref.SegmentID)
		}
		return ref, nil
	}
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	digests := sync.Map{}
	for g := range 10 {
		wg.Go(func() {
			for i := g; i < 100; i += 10 {
				ref, err := bootstrap(fmt.Sprintf("c-storm-%03d", i), []string{"p1", allowed[1+i]})
				if err != nil {
					errs <- err
					return
				}
				digests.Store(ref.ScopeDigest, true)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	n := 0
	digests.Range(func(any, any) bool { n++; return true })
	if n != 100 {
		t.Fatalf("%d distinct scope digests in the storm, want 100", n)
	}
	ref, err := bootstrap("c-honest", []string{"p1"})
	if err != nil {
		t.Fatal(err)
	}
	if ref.RowCount != 20 {
		t.Fatalf("honest bootstrap: %d rows, want 20", ref.RowCount)
	}
	ents, err := os.ReadDir(filepath.Join(data, "segments.db-data"))
	if err != nil {
		t.Fatal(err)
	}
	var bytes int64
	for _, e := range ents {
		if info, err := e.Info(); err == nil {
			bytes += info.Size()
		}
	}
	if len(ents) > maxFiles || bytes > maxBytes {
		t.Fatalf("segment store after the storm: %d files, %d bytes; quota %d files, %d bytes", len(ents), bytes, maxFiles, maxBytes)
	}
	res, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	_ = res.Body.Close()
	samples, err := promtext.Samples(body)
	if err != nil {
		t.Fatal(err)
	}
	got, ok := samples["synclane_segment_store_files"]
	if !ok {
		t.Fatal("/metrics lacks synclane_segment_store_files")
	}
	if got != float64(len(ents)) {
		t.Fatalf("synclane_segment_store_files %v, %d files on disk", got, len(ents))
	}
}

// TestServeSegmentQuotaAnswers drives the real server with a one-segment
// store and the virtual clock: a segment handed out more than 5 minutes
// ago is evicted for a new one, and its download answers 404
// sync.segment_expired (pull again), not a 500; while the one stored
// segment is pinned (handed out within 5 minutes), a bootstrap needing a
// new one by ref gets 429 sync.rate_limited; the pinned segment still
// downloads.
func TestServeSegmentQuotaAnswers(t *testing.T) {
	base := startTestControl(t, "--clock-ms", "1700000000000", "--inline-segment-max-bytes", "0", "--segment-store-max-files", "1")
	if code := control(t, "PUT", base+"/_test/allowed-scopes/ada", `{"project_id":["p1","p2","p3"]}`, nil); code != 200 {
		t.Fatalf("grant: %d", code)
	}
	w := newThingsClient(base, "ada", "c-writer")
	for i, p := range []string{"p1", "p2", "p3"} {
		pushThing(t, w, fmt.Sprint("i", i), p, fmt.Sprint("commit-", i))
	}
	pull := func(project string) (*ssp2.SegmentRef, error) {
		c := newThingsClient(base, "ada", "c-"+project)
		resp, err := c.Pull(context.Background(), ssp2.PullHeader{Accept: ssp2.AcceptInlineRows | ssp2.AcceptRefRows},
			&ssp2.Subscription{ID: "s", Table: "things", Scopes: map[string][]string{"project_id": {project}}, Cursor: -1})
		if err != nil {
			return nil, err
		}
		for _, f := range resp.Frames {
			if r, ok := f.(*ssp2.SegmentRef); ok {
				return r, nil
			}
		}
		return nil, fmt.Errorf("no SEGMENT_REF for %s", project)
	}
	download := func(ref *ssp2.SegmentRef, project string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, base+"/segments/"+ref.SegmentID, nil)
		req.Header.Set("X-Actor", "ada")
		req.Header.Set(httpsync.ScopesHeader, `{"project_id":["`+project+`"]}`)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	r1, err := pull("p1")
	if err != nil {
		t.Fatal(err)
	}
	if code := control(t, "POST", base+"/_test/clock/advance", `{"ms":360000}`, nil); code != 200 {
		t.Fatalf("advance: %d", code)
	}
	r2, err := pull("p2")
	if err != nil {
		t.Fatal(err)
	}
	if code, body := download(r1, "p1"); code != 404 || !strings.Contains(body, string(syncerr.SegmentExpired)) {
		t.Fatalf("download of the evicted segment: %d %s", code, body)
	}
	if code, body := download(r2, "p2"); code != 200 {
		t.Fatalf("download of the stored segment: %d %s", code, body)
	}
	_, err = pull("p3")
	if e := syncerr.As(err); err == nil || e.Code != syncerr.RateLimited {
		t.Fatalf("bootstrap by ref while the store is full of pinned segments: %v, want %s", err, syncerr.RateLimited)
	}
	if code, body := download(r2, "p2"); code != 200 {
		t.Fatalf("the pinned segment after the refusal: %d %s", code, body)
	}
}
