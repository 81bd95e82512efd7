package httpsync_test

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/internal/promtext"
	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/storage/memory"
	"github.com/synclane/synclane/transport/auth"
	"github.com/synclane/synclane/transport/bodybudget"
	"github.com/synclane/synclane/transport/httperr"
	"github.com/synclane/synclane/transport/httpsync"
	"github.com/synclane/synclane/transport/httpsync/httpsynctest"
)

// budgetServer is a memory-backed Mux whose handler reports on served
// each request it has finished with (its deferred releases done).
type budgetServer struct {
	*httptest.Server
	served chan struct{}
}

func newBudgetServer(t *testing.T, opts httpsync.Options) *budgetServer {
	t.Helper()
	s := schema.MustDemo()
	eng, err := engine.New(context.Background(), engine.Config{Schema: s, Backend: memory.New().Backend(), Resolver: engine.AllowAll(s)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	opts.Auth = auth.DevAuth{}
	mux := httpsync.NewMux(eng, httpsync.MuxOptions{Options: opts})
	bs := &budgetServer{served: make(chan struct{}, 16)}
	bs.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mux.ServeHTTP(w, r)
		if r.URL.Path == "/sync" {
			bs.served <- struct{}{}
		}
	}))
	t.Cleanup(bs.Close)
	return bs
}

func (bs *budgetServer) client(id string) *httpsync.Client {
	return &httpsync.Client{URL: bs.URL + "/sync", ClientID: id, Header: http.Header{"X-Actor": {"ada"}}}
}

// pushBody is an encoded push request of p for client id (its epoch
// acquired first).
func (bs *budgetServer) pushBody(t *testing.T, id, tag string, p httpsynctest.LargePush) []byte {
	t.Helper()
	c := bs.client(id)
	if err := c.Handshake(context.Background()); err != nil {
		t.Fatal(err)
	}
	<-bs.served
	epoch := c.Epoch
	frames := []ssp2.Frame{&ssp2.ReqHeader{ClientID: id, SchemaVersion: 1, LogEpoch: &epoch}}
	for _, cm := range p.Build(tag, "big") {
		frames = append(frames, cm)
	}
	b, err := ssp2.Encode(&ssp2.Message{WireVersion: ssp2.WireV3, Kind: ssp2.KindRequest, Frames: frames})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// post sends body to /sync (Content-Length declared unless chunked) and
// returns the answer; the handler has finished when it returns.
func (bs *budgetServer) post(t *testing.T, body []byte, encoding string, chunked bool) (*http.Response, []byte) {
	t.Helper()
	var rd io.Reader = bytes.NewReader(body)
	if chunked {
		rd = io.MultiReader(rd) // no length known: sent chunked
	}
	req, _ := http.NewRequest(http.MethodPost, bs.URL+"/sync", rd)
	req.Header.Set("Content-Type", httpsync.ContentType)
	req.Header.Set("X-Actor", "ada")
	if encoding != "" {
		req.Header.Set("Content-Encoding", encoding)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	<-bs.served
	return res, b
}

func wantApplied(t *testing.T, what string, res *http.Response, b []byte, commits int) {
	t.Helper()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("%s: HTTP %d %s", what, res.StatusCode, b)
	}
	m, err := ssp2.DecodeResponse(b)
	if err != nil {
		t.Fatal(err)
	}
	prs := httpsync.PushResults(m)
	if len(prs) != commits {
		t.Fatalf("%s: %d push results, want %d", what, len(prs), commits)
	}
	for _, pr := range prs {
		if pr.Status != ssp2.CommitApplied {
			t.Fatalf("%s: commit %s %v", what, pr.ClientCommitID, pr.Status)
		}
	}
}

// The official client cuts a push at 500 operations, never by bytes: a
// 20 MB push in either of its shapes, plain, gzip, zstd or chunked, is
// applied with the default limits (it was 413 with the old 8 MiB default,
// and the client resent it forever).
func TestLargePushAcceptedWithDefaultLimits(t *testing.T) {
	bs := newBudgetServer(t, httpsync.Options{})
	zenc, _ := zstd.NewWriter(nil)
	for _, c := range []struct {
		push     httpsynctest.LargePush
		encoding string
		chunked  bool
	}{
		{httpsynctest.LargePush{Commits: 1, OpsPerCommit: 100, TitleBytes: 200_000}, "", false},
		{httpsynctest.LargePush{Commits: 500, OpsPerCommit: 1, TitleBytes: 40_000}, "", true},
		{httpsynctest.LargePush{Commits: 1, OpsPerCommit: 100, TitleBytes: 200_000}, "gzip", false},
		{httpsynctest.LargePush{Commits: 500, OpsPerCommit: 1, TitleBytes: 40_000}, "zstd", false},
	} {
		name := fmt.Sprintf("%s %s chunked=%v", c.push, c.encoding, c.chunked)
		body := bs.pushBody(t, "w-"+c.encoding, strings.ReplaceAll(name, " ", "_"), c.push)
		if len(body) < 20_000_000 {
			t.Fatalf("%s: body of %d bytes", name, len(body))
		}
		switch c.encoding {
		case "gzip":
			var gz bytes.Buffer
			zw := gzip.NewWriter(&gz)
			zw.Write(body)
			zw.Close()
			body = gz.Bytes()
		case "zstd":
			body = zenc.EncodeAll(body, nil)
		}
		res, b := bs.post(t, body, c.encoding, c.chunked)
		wantApplied(t, name, res, b, c.push.Commits)
	}
}

// Over the budget a push waits, then is answered 503 sync.rate_limited
// (retryable, retryLater) with Retry-After; counted in /metrics. The same
// push succeeds once the budget has room, and nothing stays charged.
func TestBodyBudgetRefusesAfterTheWaitThenServes(t *testing.T) {
	waiting := make(chan struct{}, 4)
	hook := func() { waiting <- struct{}{} }
	p := httpsynctest.LargePush{Commits: 4, OpsPerCommit: 1, TitleBytes: 50_000}

	short := bodybudget.New(bodybudget.Options{Limit: 1 << 20, Wait: 20 * time.Millisecond, OnWait: hook})
	bs := newBudgetServer(t, httpsync.Options{BodyBudget: short})
	body := bs.pushBody(t, "w", "refused", p)
	filler := short.Charge()
	if err := filler.Grow(context.Background(), 1<<20); err != nil {
		t.Fatal(err)
	}
	res, b := bs.post(t, body, "", false)
	select {
	case <-waiting:
	default:
		t.Fatal("the refused push never waited for the budget")
	}
	var eb httperr.Body
	if err := json.Unmarshal(b, &eb); err != nil || res.StatusCode != http.StatusServiceUnavailable || eb.Code != string(syncerr.RateLimited) ||
		!eb.Retryable || eb.RecommendedAction != "retryLater" || res.Header.Get("Retry-After") != "1" || !strings.Contains(string(eb.Details), `"retryAfterMs":1000`) {
		t.Fatalf("over the budget: HTTP %d Retry-After %q %s", res.StatusCode, res.Header.Get("Retry-After"), b)
	}
	if st := short.Stats(); st.InUse != 1<<20 || st.Refusals != 1 {
		t.Fatalf("after the refusal: %+v (want only the filler charged)", st)
	}
	mres, err := http.Get(bs.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	mb, _ := io.ReadAll(mres.Body)
	mres.Body.Close()
	for _, want := range []string{"synclane_inflight_body_refusals_total 1", "synclane_inflight_body_limit_bytes 1048576",
		"synclane_inflight_body_bytes 1048576", `synclane_http_requests_total{route="sync",status="503",code="sync.rate_limited"} 1`} {
		if !promtext.Has(mb, want) {
			t.Fatalf("/metrics lacks %q", want)
		}
	}
	filler.Release()

	long := bodybudget.New(bodybudget.Options{Limit: 1 << 20, Wait: time.Minute, OnWait: hook})
	bs = newBudgetServer(t, httpsync.Options{BodyBudget: long})
	body = bs.pushBody(t, "w", "served", p)
	filler = long.Charge()
	if err := filler.Grow(context.Background(), 1<<20); err != nil {
		t.Fatal(err)
	}
	type answer struct {
		res *http.Response
		b   []byte
	}
	done := make(chan answer, 1)
	go func() {
		res, b := bs.post(t, body, "", false)
		done <- answer{res, b}
	}()
	<-waiting
	filler.Release()
	a := <-done
	wantApplied(t, "once the budget has room", a.res, a.b, p.Commits)
	if st := long.Stats(); st.InUse != 0 || st.Refusals != 0 || st.Waits != 1 {
		t.Fatalf("after the push: %+v", st)
	}
}

// Whatever ends a request — a body that does not decode, one over the
// limit, one cut off by its client, a client gone while it waited — its
// charge is given back.
func TestBodyBudgetReleasedOnEveryPath(t *testing.T) {
	waiting := make(chan struct{}, 4)
	budget := bodybudget.New(bodybudget.Options{Limit: 4 << 20, Wait: 50 * time.Millisecond, OnWait: func() { waiting <- struct{}{} }})
	bs := newBudgetServer(t, httpsync.Options{BodyBudget: budget, MaxBodyBytes: 1 << 20})
	garbage := append([]byte("SSP2\x03\x00\x01\x00"), bytes.Repeat([]byte{0xff}, 300<<10)...)
	inUse := func(what string, want int64) {
		t.Helper()
		if st := budget.Stats(); st.InUse != want {
			t.Fatalf("%s: %d bytes still charged, want %d", what, st.InUse, want)
		}
	}

	res, _ := bs.post(t, garbage, "", false)
	if res.StatusCode != http.StatusBadRequest {
		t.Fatalf("undecodable body: HTTP %d", res.StatusCode)
	}
	inUse("after an undecodable body", 0)

	res, _ = bs.post(t, bytes.Repeat([]byte{0}, 2<<20), "", true)
	if res.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("chunked body over the limit: HTTP %d", res.StatusCode)
	}
	inUse("after a chunked body over the limit", 0)

	zenc, _ := zstd.NewWriter(nil)
	res, _ = bs.post(t, zenc.EncodeAll(garbage, nil), "zstd", false)
	if res.StatusCode != http.StatusBadRequest {
		t.Fatalf("undecodable zstd body: HTTP %d", res.StatusCode)
	}
	inUse("after an undecodable zstd body", 0)

	// A client that sends part of its body and goes away.
	conn, err := net.Dial("tcp", bs.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(conn, "POST /sync HTTP/1.1\r\nHost: x\r\nContent-Type: %s\r\nX-Actor: ada\r\nContent-Length: %d\r\n\r\n", httpsync.ContentType, 900<<10)
	conn.Write(garbage)
	conn.Close()
	<-bs.served
	inUse("after a client left mid-body", 0)

	// A client that goes away while its request waits for the budget.
	filler := budget.Charge()
	if err := filler.Grow(context.Background(), 4<<20); err != nil {
		t.Fatal(err)
	}
	conn, err = net.Dial("tcp", bs.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(conn, "POST /sync HTTP/1.1\r\nHost: x\r\nContent-Type: %s\r\nX-Actor: ada\r\nContent-Length: %d\r\n\r\n", httpsync.ContentType, 900<<10)
	<-waiting
	conn.Close()
	<-bs.served
	inUse("after a client left while waiting", 4<<20)
	filler.Release()
	inUse("after the filler", 0)
}

// A body over the per-request limit is still 413: at once when its
// Content-Length says so (nothing read, nothing charged), with the
// default limit too.
func TestBodyOverTheLimitIs413(t *testing.T) {
	budget := bodybudget.New(bodybudget.Options{})
	bs := newBudgetServer(t, httpsync.Options{BodyBudget: budget})
	conn, err := net.Dial("tcp", bs.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /sync HTTP/1.1\r\nHost: x\r\nContent-Type: %s\r\nX-Actor: ada\r\nContent-Length: %d\r\n\r\n",
		httpsync.ContentType, bodybudget.DefaultMaxBodyBytes+1)
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(string(b), `"code":"sync.invalid_request"`) {
		t.Fatalf("declared %d bytes: HTTP %d %s", bodybudget.DefaultMaxBodyBytes+1, res.StatusCode, b)
	}
	<-bs.served
	if st := budget.Stats(); st.InUse != 0 || st.Waits != 0 {
		t.Fatalf("after the refusal: %+v", st)
	}
}
