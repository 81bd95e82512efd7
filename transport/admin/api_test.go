package admin_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	adminsvc "github.com/synclane/synclane/engine/admin"
	"github.com/synclane/synclane/engine/events"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage/memory"
	"github.com/synclane/synclane/transport/admin"
	"github.com/synclane/synclane/transport/httpsync"
)

// Every API route refuses a request without the token and one with a
// wrong token (401, JSON error in words), and serves the right token.
func TestEveryEndpointRequiresTheToken(t *testing.T) {
	s := newServer(t, memory.New())
	s.push("p1", "ada", "c1", "cc1", "t1", "P", "first")
	routes := []struct{ method, path string }{
		{"GET", "/api/overview"},
		{"GET", "/api/partitions"},
		{"GET", "/api/partitions/p1"},
		{"GET", "/api/partitions/p1/clients"},
		{"GET", "/api/partitions/p1/clients/c1"},
		{"GET", "/api/partitions/p1/commits"},
		{"GET", "/api/partitions/p1/commits/1"},
		{"GET", "/api/partitions/p1/rows/tasks/t1"},
		{"GET", "/api/partitions/p1/scopes"},
		{"GET", "/api/events"},
		{"GET", "/api/events/stream"},
		{"POST", "/api/partitions/p1/rotate-epoch"},
		{"POST", "/api/maintenance?dryRun=true"},
		{"GET", "/api/reactions?limit=5"},
		{"POST", "/api/partitions/p1/clients/c1/revoke-lease"},
		{"POST", "/api/reactions/1/redrive"},
		{"GET", "/api/no-such-route"},
	}
	tokens := []struct {
		name, token, header string
		msg                 string
	}{
		{"missing", "", "", "missing admin token"},
		{"wrong", "", "Bearer wrong-token-0123456789", "wrong admin token"},
		{"prefix of the right one", "", "Bearer " + testToken[:len(testToken)-1], "wrong admin token"},
		{"not bearer", "", "Basic " + testToken, "wrong admin token"},
	}
	for _, r := range routes {
		for _, tk := range tokens {
			t.Run(r.method+" "+r.path+" "+tk.name, func(t *testing.T) {
				req, _ := http.NewRequest(r.method, s.admin.URL+r.path, nil)
				if tk.header != "" {
					req.Header.Set("Authorization", tk.header)
				}
				res, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer res.Body.Close()
				var eb admin.ErrorBody
				if err := decodeJSON(res, &eb); err != nil {
					t.Fatal(err)
				}
				if res.StatusCode != http.StatusUnauthorized || eb.Error.Code != "admin.unauthorized" || !strings.Contains(eb.Error.Message, tk.msg) {
					t.Fatalf("status %d %+v, want 401 admin.unauthorized %q", res.StatusCode, eb, tk.msg)
				}
				if res.Header.Get("WWW-Authenticate") == "" {
					t.Fatal("401 without WWW-Authenticate")
				}
			})
		}
	}
	// With the token every route answers (the stream is checked in its own
	// test; the unknown route is a 404 in words).
	for _, r := range routes {
		if strings.HasSuffix(r.path, "/stream") {
			continue
		}
		if r.path == "/api/no-such-route" {
			s.wantError(r.method, r.path, http.StatusNotFound, "admin.not_found")
			continue
		}
		if strings.HasSuffix(r.path, "/revoke-lease") || strings.HasSuffix(r.path, "/redrive") { // this server runs without leases and reactions
			s.wantError(r.method, r.path, http.StatusConflict, "admin.feature_off")
			continue
		}
		s.ok(r.method, r.path, nil)
	}
	// Failed admin authentications are events too.
	found := false
	for _, e := range s.ring.Recent(0, 0) {
		found = found || (e.Kind == events.AuthFailed && e.Source == "admin")
	}
	if !found {
		t.Fatal("no auth.failed event from the admin API")
	}
}

func decodeJSON(res *http.Response, out any) error {
	if ct := res.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		return fmt.Errorf("content type %q", ct)
	}
	return jsonDecode(res.Body, out)
}

func TestNewRefusesAMissingOrShortToken(t *testing.T) {
	for _, tok := range []string{"", "short", strings.Repeat("x", admin.MinTokenBytes-1)} {
		if _, err := admin.New(nil, admin.Options{Token: tok}); !errors.Is(err, admin.ErrWeakToken) {
			t.Fatalf("New with token %q: %v, want ErrWeakToken", tok, err)
		}
	}
}

func TestPartitionsAndClientsPaginate(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s *server) {
		names := []string{"p5", "p1", "p4", "p2", "p3"}
		for i, p := range names {
			s.push(p, "ada", "c1", fmt.Sprint("cc", i), "t1", "P", "x")
		}
		for i := range 5 {
			s.push("p1", "bob", fmt.Sprint("k", i), fmt.Sprint("kk", i), fmt.Sprint("k", i), "P", "x")
		}
		var got []string
		after := ""
		for pages := 0; ; pages++ {
			if pages > 5 {
				t.Fatal("partition pages never end")
			}
			var pg adminsvc.Page[adminsvc.PartitionView]
			s.ok("GET", "/api/partitions?limit=2&after="+after, &pg)
			if len(pg.Items) > 2 {
				t.Fatalf("page of %d > limit", len(pg.Items))
			}
			for _, p := range pg.Items {
				got = append(got, p.Partition)
				if p.MaxSeq < 1 || p.LogEpoch == "" || p.Clients < 1 || p.LastActivityMs == 0 {
					t.Fatalf("partition %+v lacks its figures", p)
				}
			}
			if pg.Next == "" {
				break
			}
			after = pg.Next
		}
		if !slices.Equal(got, []string{"p1", "p2", "p3", "p4", "p5"}) {
			t.Fatalf("partitions %v", got)
		}
		var d adminsvc.PartitionDetail
		s.ok("GET", "/api/partitions/p1", &d)
		if d.MaxSeq != 6 || d.Clients != 6 || !d.Live || !d.Gate.Open || d.Gate.RunningVersion != 1 {
			t.Fatalf("p1 detail %+v", d)
		}
		var ids []string
		after = ""
		for {
			var pg adminsvc.Page[adminsvc.ClientView]
			s.ok("GET", "/api/partitions/p1/clients?limit=4&after="+after, &pg)
			for _, c := range pg.Items {
				ids = append(ids, c.ClientID)
			}
			if pg.Next == "" {
				break
			}
			after = pg.Next
		}
		if !slices.Equal(ids, []string{"c1", "k0", "k1", "k2", "k3", "k4"}) {
			t.Fatalf("clients %v", ids)
		}
		// Cursor and wire version are written back by the partition actor
		// every ClientFlushInterval (1s): poll until they show.
		var c adminsvc.ClientView
		deadline := time.Now().Add(15 * time.Second)
		for {
			s.ok("GET", "/api/partitions/p1/clients/k2", &c)
			if c.WireVersion == ssp2.WireV3 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("client k2 never showed its wire version: %+v", c)
			}
			time.Sleep(20 * time.Millisecond)
		}
		if c.Actor != "bob" || c.LastSeenMs == 0 {
			t.Fatalf("client k2 %+v", c)
		}
		s.wantError("GET", "/api/partitions/p1/clients/nobody", http.StatusNotFound, "admin.not_found")
		s.wantError("GET", "/api/partitions/nowhere", http.StatusNotFound, "admin.not_found")
	})
}

func TestCommitsPaginateNewestFirst(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s *server) {
		for i := range 12 {
			cl := "a"
			if i%3 == 0 {
				cl = "b"
			}
			s.push("p", "ada", cl, fmt.Sprint("cc", i), fmt.Sprint("t", i), "P", fmt.Sprint("title ", i))
		}
		var pages []string
		before := ""
		for {
			var pg adminsvc.Page[adminsvc.CommitView]
			s.ok("GET", "/api/partitions/p/commits?limit=5&before="+before, &pg)
			pages = append(pages, seqs(pg.Items))
			if pg.Next == "" {
				break
			}
			before = pg.Next
		}
		if want := []string{"12,11,10,9,8", "7,6,5,4,3", "2,1"}; !slices.Equal(pages, want) {
			t.Fatalf("pages %q, want %q", pages, want)
		}
		var byB adminsvc.Page[adminsvc.CommitView]
		s.ok("GET", "/api/partitions/p/commits?limit=3&client=b", &byB)
		if seqs(byB.Items) != "10,7,4" || byB.Next != "4" {
			t.Fatalf("client b page %q next %q", seqs(byB.Items), byB.Next)
		}
		var one adminsvc.CommitDetail
		s.ok("GET", "/api/partitions/p/commits/3", &one)
		if one.Seq != 3 || one.ClientCommitID != "cc2" || one.Actor != "ada" || len(one.ChangeList) != 1 || one.Tables[0] != "tasks" {
			t.Fatalf("commit 3 %+v", one)
		}
		ch := one.ChangeList[0]
		if ch.RowID != "t2" || ch.Op != "upsert" || ch.Row["title"] != "title 2" || ch.Scopes["project_id"] != "P" {
			t.Fatalf("commit 3 change %+v", ch)
		}
		s.wantError("GET", "/api/partitions/p/commits/99", http.StatusNotFound, "admin.not_found")
		s.wantError("GET", "/api/partitions/p/commits/abc", http.StatusBadRequest, "admin.invalid_argument")
		s.wantError("GET", "/api/partitions/p/commits?before=-3", http.StatusBadRequest, "admin.invalid_argument")
	})
}

// A row's stored values, version and scopes, and the commits that touched
// it, newest first, including its deletion.
func TestRowHistory(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s *server) {
		s.push("p", "ada", "c1", "v1", "r1", "P", "one")
		s.push("p", "bob", "c2", "other", "r2", "P", "unrelated")
		s.push("p", "ada", "c1", "v2", "r1", "P", "two")
		s.push("p", "bob", "c2", "v3", "r1", "P", "three")
		var d adminsvc.RowDetail
		s.ok("GET", "/api/partitions/p/rows/tasks/r1", &d)
		if !d.Exists || d.Version != 3 || d.Values["title"] != "three" || d.Scopes["project_id"] != "P" || !d.Complete || d.ScannedCommits != 4 {
			t.Fatalf("row r1 %+v", d)
		}
		var hist []string
		for _, h := range d.History {
			hist = append(hist, fmt.Sprintf("%d:%s:%s:%v", h.Seq, h.ClientCommitID, h.Change.Op, h.Change.Row["title"]))
		}
		if want := []string{"4:v3:upsert:three", "3:v2:upsert:two", "1:v1:upsert:one"}; !slices.Equal(hist, want) {
			t.Fatalf("history %v, want %v", hist, want)
		}
		s.ok("GET", "/api/partitions/p/rows/tasks/r1?limit=1", &d)
		if len(d.History) != 1 || d.History[0].Seq != 4 {
			t.Fatalf("limited history %+v", d.History)
		}
		s.push("p", "ada", "c1", "gone", "r1", "P", "")
		s.ok("GET", "/api/partitions/p/rows/tasks/r1", &d)
		if d.Exists || len(d.History) != 4 || d.History[0].Change.Op != "delete" {
			t.Fatalf("deleted row %+v", d)
		}
		s.wantError("GET", "/api/partitions/p/rows/tasks/never", http.StatusNotFound, "admin.not_found")
		s.wantError("GET", "/api/partitions/p/rows/nope/r1", http.StatusNotFound, "admin.not_found")
	})
}

func TestScopeActivity(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s *server) {
		for i := range 5 {
			s.push("p", "ada", "c1", fmt.Sprint("a", i), fmt.Sprint("a", i), "A", "x")
		}
		s.push("p", "ada", "c1", "b0", "b0", "B", "x")
		var a adminsvc.ScopeActivity
		s.ok("GET", "/api/partitions/p/scopes?window=4", &a)
		if a.ScannedCommits != 4 || a.FromSeq != 3 || a.ToSeq != 6 || len(a.Values) != 2 {
			t.Fatalf("activity %+v", a)
		}
		if v := a.Values[0]; v.Var != "project_id" || v.Value != "A" || v.Commits != 3 {
			t.Fatalf("busiest %+v", v)
		}
		if v := a.Values[1]; v.Value != "B" || v.Commits != 1 {
			t.Fatalf("second %+v", v)
		}
	})
}

func TestRotateEpochAndMaintenance(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s *server) {
		s.push("p", "ada", "c1", "x", "t", "P", "x")
		var before adminsvc.PartitionDetail
		s.ok("GET", "/api/partitions/p", &before)
		var rot map[string]string
		s.ok("POST", "/api/partitions/p/rotate-epoch", &rot)
		var after adminsvc.PartitionDetail
		s.ok("GET", "/api/partitions/p", &after)
		if rot["logEpoch"] == "" || rot["logEpoch"] == before.LogEpoch || after.LogEpoch != rot["logEpoch"] || after.Clients != 0 {
			t.Fatalf("rotation %v: before %q, after %+v", rot, before.LogEpoch, after)
		}
		// The old client is told to reset on its next pull and still works.
		c := s.client("p", "ada", "c1")
		if _, err := c.Pull(context.Background(), ssp2.PullHeader{Accept: 1}); !errors.Is(err, httpsync.ErrResetRequired) || c.Epoch != rot["logEpoch"] {
			t.Fatalf("pull after rotation: %v (epoch %q), want a reset to %q", err, c.Epoch, rot["logEpoch"])
		}
		s.wantError("POST", "/api/partitions/ghost/rotate-epoch", http.StatusNotFound, "admin.not_found")
		s.wantError("GET", "/api/partitions/p/rotate-epoch", http.StatusNotFound, "admin.not_found")
		var m adminsvc.MaintenanceView
		s.ok("POST", "/api/maintenance?dryRun=true", &m)
		if m.Skipped || m.Checked < 1 || !m.DryRun {
			t.Fatalf("maintenance %+v", m)
		}
		var evs struct {
			Items []events.Event `json:"items"`
		}
		s.ok("GET", "/api/events", &evs)
		var got []events.Kind
		for _, e := range evs.Items {
			got = append(got, e.Kind)
		}
		if !slices.Contains(got, events.EpochRotated) || !slices.Contains(got, events.MaintenanceRun) {
			t.Fatalf("events %v lack the rotation and the maintenance pass", got)
		}
	})
}

func TestOverviewShowsRegisteredSections(t *testing.T) {
	s := newServer(t, memory.New())
	var o adminsvc.Overview
	s.ok("GET", "/api/overview", &o)
	if !o.Ready || o.SchemaVersion != 1 || len(o.Tables) != 1 || o.Tables[0].Name != "tasks" || o.Retention.MinRetainedCommits == 0 {
		t.Fatalf("overview %+v", o)
	}
	if len(o.Sections) != 1 || o.Sections[0].Name != "test-section" || fmt.Sprint(o.Sections[0].Stats) != "map[answer:42]" {
		t.Fatalf("sections %+v", o.Sections)
	}
}

// The event stream replays what the ring holds after Last-Event-ID and
// then delivers events as they happen: a rejected push shows up live.
func TestEventStreamIsLive(t *testing.T) {
	s := newServer(t, memory.New())
	s.eng.Events().Emit(events.Event{Kind: "test.before", Message: "one"})
	s.eng.Events().Emit(events.Event{Kind: "test.before", Message: "two"})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", s.admin.URL+"/api/events/stream", nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	req.Header.Set("Last-Event-ID", "1")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != 200 || res.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("stream answered %d %q", res.StatusCode, res.Header.Get("Content-Type"))
	}
	lines := bufio.NewScanner(res.Body)
	next := func() (id, data string) {
		t.Helper()
		for lines.Scan() {
			l := lines.Text()
			switch {
			case strings.HasPrefix(l, "id: "):
				id = l[4:]
			case strings.HasPrefix(l, "data: "):
				data = l[6:]
			case l == "" && data != "":
				return id, data
			}
		}
		t.Fatalf("stream ended: %v", lines.Err())
		return "", ""
	}
	if id, data := next(); id != "2" || !strings.Contains(data, `"message":"two"`) {
		t.Fatalf("replay after Last-Event-ID 1 gave %s %s", id, data)
	}
	pr := s.push("p", "ada", "c1", "bad", "t", "P", "x")
	if pr.Status != ssp2.CommitApplied {
		t.Fatalf("setup push %+v", pr)
	}
	// A push to an unknown table is rejected and streamed.
	res2, err := s.client("p", "ada", "c1").Push(context.Background(), &ssp2.PushCommit{ClientCommitID: "rej",
		Operations: []ssp2.Operation{{Table: "nope", RowID: "x", Op: ssp2.OpDelete}}})
	if err != nil || res2[0].Status != ssp2.CommitRejected {
		t.Fatalf("rejected push: %v %+v", err, res2)
	}
	for {
		_, data := next()
		if strings.Contains(data, `"kind":"push.rejected"`) {
			if !strings.Contains(data, "sync.unknown_table") || !strings.Contains(data, `"partition":"p"`) {
				t.Fatalf("rejection event %s", data)
			}
			break
		}
	}
	// Close ends the stream.
	s.handler.Close()
	for lines.Scan() {
	}
}
