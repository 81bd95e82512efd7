package httpsync_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/storage/segstore"
	"github.com/synclane/synclane/transport/httperr"
	"github.com/synclane/synclane/transport/httpsync"
)

// answer is an HTTP answer of a segment download: status, protocol code
// ("" on success), the body.
type answer struct {
	status int
	code   syncerr.Code
	body   []byte
}

func (a answer) String() string {
	if a.status == 200 {
		return fmt.Sprintf("200 (%d bytes)", len(a.body))
	}
	return fmt.Sprintf("%d %s", a.status, a.body)
}

func readAnswer(t *testing.T, res *http.Response) answer {
	t.Helper()
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	a := answer{status: res.StatusCode, body: b}
	var eb httperr.Body
	if res.StatusCode != 200 && json.Unmarshal(b, &eb) == nil {
		a.code = syncerr.Code(eb.Code)
	}
	return a
}

// TestSegmentPublicationsBindPartitionAndEpoch (SPEC §3.5, §5.1, §5.4,
// §5.5), on every segment store: a segment is served, directly and by
// signed URL, only under a publication of the caller's partition in its
// live log epoch. Another partition's caller, or any caller after the
// publishing partition's epoch rotated, gets 404 sync.not_found, the same
// answer as for an id never stored; the publisher is served. When the
// other partition publishes the same bytes (one content address), both
// partitions are served, each under its own publication, and a rotation
// of one partition leaves the other's publication (and the shared bytes)
// served. After the rotation the publisher's next pull publishes again in
// the new epoch and is served.
func TestSegmentPublicationsBindPartitionAndEpoch(t *testing.T) {
	for _, be := range backends(t) {
		for _, store := range []string{"native", "memory"} {
			if store == "memory" && be.name != "sqlite" {
				continue // the memory store runs once
			}
			name := be.name + "/" + map[string]string{"native": map[string]string{"sqlite": "sqlitefile", "postgres": "pgseg"}[be.name], "memory": "memory"}[store]
			t.Run(name, func(t *testing.T) {
				clk := &testClock{}
				clk.ms.Store(time.Now().UnixMilli())
				signer := segstore.NewSigner([]byte(strings.Repeat("k", 32)), 5*time.Minute, clk.now)
				var s *server
				s = startServerWith(t, be, func(c *engine.Config) {
					c.Now, c.SignedURLs = clk.now, signer
					c.PublicURL = func() string { return strings.TrimSuffix(s.url, "/sync") }
					if store == "memory" {
						_ = c.Segments.Store.Close()
						c.Segments.Store = segstore.NewMemory()
					}
				})
				publicationsCase(t, s, signer)
			})
		}
	}
}

func publicationsCase(t *testing.T, s *server, signer *segstore.Signer) {
	ctx := context.Background()
	scopes := string(ssp2.CanonicalScopesJSON(listL()))
	digest := ssp2.ScopeDigest(listL())
	clientIn := func(part, clientID string) *httpsync.Client {
		return &httpsync.Client{URL: s.url, ClientID: clientID, Header: http.Header{"X-Actor": {"reader"}, "X-Partition": {part}}}
	}
	seedIn := func(part string, n int) {
		w := clientIn(part, "writer-"+part)
		var batch []*ssp2.PushCommit
		for i := range n {
			id := fmt.Sprintf("t%05d", i)
			batch = append(batch, commit("c"+id, upsert(t, id, "L", "row "+id, nil)))
			if len(batch) == 400 || i == n-1 {
				if _, err := w.Push(ctx, batch...); err != nil {
					t.Fatal(err)
				}
				batch = batch[:0]
			}
		}
	}
	pullRef := func(part, clientID string) *ssp2.SegmentRef {
		t.Helper()
		resp, err := clientIn(part, clientID).Pull(ctx, ssp2.PullHeader{Accept: ssp2.AcceptRefRows | ssp2.AcceptSignedURLs,
			LimitSnapshotRows: 1000, MaxSnapshotPages: 1}, sub0(-1, nil))
		if err != nil {
			t.Fatal(err)
		}
		refs := refsOf(resp)
		if len(refs) != 1 || refs[0].URL == nil {
			t.Fatalf("%s: %d refs (first %+v), want one signed ref", part, len(refs), refs)
		}
		return refs[0]
	}
	direct := func(part, id string) answer {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, strings.TrimSuffix(s.url, "/sync")+"/segments/"+id, nil)
		req.Header.Set("X-Actor", "reader")
		req.Header.Set("X-Partition", part)
		req.Header.Set(httpsync.ScopesHeader, scopes)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return readAnswer(t, res)
	}
	signed := func(u string) answer {
		t.Helper()
		res, err := http.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		return readAnswer(t, res)
	}
	served := func(what string, a answer, ref *ssp2.SegmentRef) {
		t.Helper()
		if a.status != 200 || segstore.ID(a.body) != ref.SegmentID {
			t.Fatalf("%s: %v, want the segment", what, a)
		}
	}
	unknown := "sha256:" + strings.Repeat("0", 64)
	// notFound checks a refusal is exactly the answer an unknown id gets
	// (the ids in the messages aside): nothing tells "not yours" from
	// "never existed".
	notFound := func(what string, a answer, id string) {
		t.Helper()
		u := direct("team", unknown)
		if a.status != 404 || a.code != syncerr.NotFound ||
			strings.ReplaceAll(string(a.body), id, "") != strings.ReplaceAll(string(u.body), unknown, "") {
			t.Fatalf("%s: %v; want the answer of an unknown id, %v", what, a, u)
		}
	}
	otherURL := func(ref *ssp2.SegmentRef, part string) string {
		tok, _ := signer.Sign(part, ref.SegmentID, digest)
		base, _, _ := strings.Cut(*ref.URL, "?st=")
		return base + "?st=" + tok
	}

	seedIn("team", 1500)
	a := pullRef("team", "ca")
	for range 3 { // the later ones from the hot set
		served("the publisher, direct", direct("team", a.SegmentID), a)
		served("the publisher, signed", signed(*a.URL), a)
	}
	// Partition "other" never published the segment.
	notFound("another partition, direct", direct("other", a.SegmentID), a.SegmentID)
	notFound("another partition's signed URL", signed(otherURL(a, "other")), a.SegmentID)

	// "other" publishes the same bytes (one content address): each
	// partition is served under its own publication.
	seedIn("other", 1500)
	b := pullRef("other", "cb")
	if b.SegmentID != a.SegmentID {
		t.Fatalf("the two partitions' pages differ (%s, %s): the case needs one content address", a.SegmentID, b.SegmentID)
	}
	served("other's own publication, direct", direct("other", b.SegmentID), b)
	served("other's own publication, signed", signed(*b.URL), b)
	served("the first publisher after the second published, direct", direct("team", a.SegmentID), a)
	served("the first publisher after the second published, signed", signed(*a.URL), a)

	// "team" rotates its log epoch: its publication is of an older epoch.
	if _, err := s.eng.RotateEpoch(ctx, "team"); err != nil {
		t.Fatal(err)
	}
	notFound("the publisher after a rotation, direct", direct("team", a.SegmentID), a.SegmentID)
	notFound("the publisher's signed URL after a rotation", signed(*a.URL), a.SegmentID)
	served("the other partition after team's rotation, direct", direct("other", b.SegmentID), b)
	served("the other partition after team's rotation, signed", signed(*b.URL), b)

	// The next pull in the new epoch publishes the page again.
	a2 := pullRef("team", "ca2")
	served("the publisher in its new epoch, direct", direct("team", a2.SegmentID), a2)
	served("the publisher in its new epoch, signed", signed(*a2.URL), a2)
}
