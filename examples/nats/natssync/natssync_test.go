package natssync

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/storage/memory"
	"github.com/synclane/synclane/transport/auth"
	"github.com/synclane/synclane/transport/httpsync"
)

// natsURL is the server the tests use: SYNCLANE_NATS_URL, else the local
// default.
func natsURL() string {
	if u := os.Getenv("SYNCLANE_NATS_URL"); u != "" {
		return u
	}
	return nats.DefaultURL
}

// connect connects to the test NATS server, or skips (fails with
// SYNCLANE_REQUIRE_NATS=1) when none is reachable.
func connect(t *testing.T) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(natsURL(), nats.Timeout(2*time.Second), nats.Name("synclane-natssync-test"))
	if err != nil {
		msg := fmt.Sprintf("NATS not reachable at %s (%v): start nats-server (e.g. nats-server -a 127.0.0.1 -p 4222) or point SYNCLANE_NATS_URL at one; SYNCLANE_REQUIRE_NATS=1 makes this a failure", natsURL(), err)
		if os.Getenv("SYNCLANE_REQUIRE_NATS") == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	t.Cleanup(nc.Close)
	return nc
}

// prefix is a subject prefix of this test alone (tests may share the
// server with other runs).
func prefix(t *testing.T) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := strings.NewReplacer("/", "_", " ", "_", ".", "_").Replace(t.Name())
	return "synclane-test." + name + "." + hex.EncodeToString(b)
}

// fixture is an engine on the memory store served over NATS.
type fixture struct {
	nc       *nats.Conn
	eng      *engine.Engine
	subject  string
	notifier *Notifier
}

// start builds the engine (with a Notifier hooked in), runs the server
// and the notifier until the test ends.
func start(t *testing.T, nc *nats.Conn, opts Options) *fixture {
	t.Helper()
	p := prefix(t)
	sch := schema.MustDemo()
	n := NewNotifier(nc, p+".commits", nil)
	cfg := engine.Config{Schema: sch, Backend: memory.New().Backend(), Resolver: engine.AllowAll(sch)}
	cfg.Extensions = append(cfg.Extensions, n)
	eng, err := engine.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	opts.Subject = p + ".sync"
	if opts.Auth == nil {
		opts.Auth = DevAuth{}
	}
	srv, err := New(nc, eng, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served, notified := make(chan error, 1), make(chan struct{})
	go func() { served <- srv.Serve(ctx) }()
	go func() { n.Run(ctx); close(notified) }()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
		<-notified
		eng.Close()
	})
	select {
	case <-srv.Ready():
	case err := <-served:
		served <- err // for the cleanup
		t.Fatalf("Serve: %v", err)
	}
	return &fixture{nc: nc, eng: eng, subject: opts.Subject, notifier: n}
}

// client is an SSP2 client speaking over NATS with hdr as credentials.
func (f *fixture) client(clientID string, hdr nats.Header) *httpsync.Client {
	return &httpsync.Client{ClientID: clientID, Rounds: &Client{Conn: f.nc, Subject: f.subject, Header: hdr}}
}

func devHeader(actor, partition string) nats.Header {
	return nats.Header{HeaderActor: {actor}, HeaderPartition: {partition}}
}

func todoCommit(t *testing.T, id, title string) *ssp2.PushCommit {
	t.Helper()
	codec := ssp2.NewRowCodec(schema.MustDemo().Table("todos").Columns)
	row, err := codec.AppendSparse(nil, ssp2.Row{id, "groceries", title, false, int64(0), int64(0)}, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	return &ssp2.PushCommit{ClientCommitID: "cc-" + id, Operations: []ssp2.Operation{{Table: "todos", RowID: id, Op: ssp2.OpUpsert, Payload: row}}}
}

// bootstrapTitles pulls the groceries list from scratch and returns the
// titles of its rows by id.
func bootstrapTitles(t *testing.T, c *httpsync.Client) map[string]string {
	t.Helper()
	resp, err := c.Pull(context.Background(), ssp2.PullHeader{Accept: ssp2.AcceptInlineRows},
		&ssp2.Subscription{ID: "s1", Table: "todos", Scopes: map[string][]string{"list_id": {"groceries"}}, Cursor: -1})
	if err != nil {
		t.Fatalf("pull: %v", err)
	}
	titles := map[string]string{}
	for _, fr := range resp.Frames {
		if seg, ok := fr.(*ssp2.SegmentInline); ok {
			sg, err := ssp2.DecodeSegment(seg.Payload)
			if err != nil {
				t.Fatal(err)
			}
			for _, blk := range sg.Blocks {
				for _, r := range blk {
					titles[r.Values[0].(string)] = r.Values[2].(string)
				}
			}
		}
	}
	return titles
}

// TestPushThenPull pushes through NATS with one client and bootstraps the
// row with another, in the same partition; a client of another partition
// sees nothing.
func TestPushThenPull(t *testing.T) {
	f := start(t, connect(t), Options{})
	rs, err := f.client("writer", devHeader("ada", "p1")).Push(context.Background(), todoCommit(t, "t1", "milk"))
	if err != nil || len(rs) != 1 || rs[0].Status != ssp2.CommitApplied {
		t.Fatalf("push: %+v %v", rs, err)
	}
	if got := bootstrapTitles(t, f.client("reader", devHeader("grace", "p1"))); len(got) != 1 || got["t1"] != "milk" {
		t.Fatalf("p1 bootstrap: %v, want t1=milk", got)
	}
	if got := bootstrapTitles(t, f.client("other", devHeader("grace", "p2"))); len(got) != 0 {
		t.Fatalf("p2 bootstrap: %v, want nothing (partitions are separate)", got)
	}
}

// TestReplyInManyMessages serves a reply larger than one message (the
// chunk size cut to 512 bytes) and checks the client reassembles it.
func TestReplyInManyMessages(t *testing.T) {
	f := start(t, connect(t), Options{chunk: 512})
	w := f.client("writer", devHeader("ada", "p1"))
	want := map[string]string{}
	for i := range 40 {
		id, title := fmt.Sprintf("t%02d", i), strings.Repeat(fmt.Sprintf("title %d ", i), 8)
		want[id] = title
		if rs, err := w.Push(context.Background(), todoCommit(t, id, title)); err != nil || rs[0].Status != ssp2.CommitApplied {
			t.Fatalf("push %s: %+v %v", id, rs, err)
		}
	}
	reader := f.client("reader", devHeader("ada", "p1"))
	rec := &sizeRecorder{rt: reader.Rounds}
	reader.Rounds = rec
	got := bootstrapTitles(t, reader)
	if rec.last <= 4*512 {
		t.Fatalf("the bootstrap reply is %d bytes: too small to need several messages", rec.last)
	}
	if len(got) != len(want) {
		t.Fatalf("bootstrap carried %d rows, want %d", len(got), len(want))
	}
	for id, title := range want {
		if got[id] != title {
			t.Fatalf("row %s: %q, want %q", id, got[id], title)
		}
	}
}

// sizeRecorder records the size of the last response through rt.
type sizeRecorder struct {
	rt   httpsync.RoundTripper
	last int
}

func (s *sizeRecorder) RoundTrip(ctx context.Context, req []byte) ([]byte, error) {
	b, err := s.rt.RoundTrip(ctx, req)
	s.last = len(b)
	return b, err
}

// TestAuthFailures answers refused credentials with the protocol's JSON
// error body, marked by HeaderError, and serves a valid token: the JWTs
// are checked by the HTTP transport's own authenticator (auth.JWTAuth)
// through HTTPAuth.
func TestAuthFailures(t *testing.T) {
	secret := []byte("nats-test-secret")
	f := start(t, connect(t), Options{Auth: HTTPAuth{Auth: auth.JWTAuth{Secret: secret}}})
	exp := time.Now().Add(time.Hour).Unix()
	bearer := func(tok string) nats.Header { return nats.Header{HeaderAuthorization: {"Bearer " + tok}} }
	valid := auth.SignJWT(secret, map[string]any{"sub": "ada", "partition": "p1", "exp": exp})
	if err := f.client("good", bearer(valid)).Handshake(context.Background()); err != nil {
		t.Fatalf("valid token: %v", err)
	}
	for _, tc := range []struct {
		name string
		hdr  nats.Header
		want string // in the message
	}{
		{"no credentials", nil, "missing bearer token"},
		{"wrong secret", bearer(auth.SignJWT([]byte("other"), map[string]any{"sub": "ada", "exp": exp})), "invalid token signature"},
		{"expired", bearer(auth.SignJWT(secret, map[string]any{"sub": "ada", "exp": time.Now().Add(-time.Hour).Unix()})), "token expired"},
		{"dev headers are not credentials", devHeader("ada", "p1"), "missing bearer token"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The raw reply: one message, marked, carrying the JSON body.
			m := nats.NewMsg(f.subject)
			for k, v := range tc.hdr {
				m.Header[k] = v
			}
			m.Data = []byte("not even SSP2: refused before decoding")
			r, err := f.nc.RequestMsg(m, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if r.Header.Get(HeaderError) != string(syncerr.AuthRequired) || r.Header.Get(HeaderEnd) != "1" {
				t.Fatalf("headers %v, want %s=%s and %s=1", r.Header, HeaderError, syncerr.AuthRequired, HeaderEnd)
			}
			var body map[string]any
			if err := json.Unmarshal(r.Data, &body); err != nil {
				t.Fatalf("body %q: %v", r.Data, err)
			}
			spec := syncerr.Lookup(syncerr.AuthRequired)
			if body["code"] != string(syncerr.AuthRequired) || body["category"] != spec.Category || body["retryable"] != spec.Retryable ||
				body["recommendedAction"] != spec.RecommendedAction || !strings.Contains(body["message"].(string), tc.want) {
				t.Fatalf("body %s, want %s (%s, retryable %v, %s) saying %q", r.Data, syncerr.AuthRequired, spec.Category, spec.Retryable, spec.RecommendedAction, tc.want)
			}
			// Through Client: a *ReplyError with the code.
			err = f.client("bad", tc.hdr).Handshake(context.Background())
			var re *ReplyError
			if !errors.As(err, &re) || syncerr.CodeOf(err) != syncerr.AuthRequired || re.Body.Category != spec.Category {
				t.Fatalf("client error %#v, want a ReplyError of %s", err, syncerr.AuthRequired)
			}
		})
	}
	// Every refusal (two per case) is counted for the metric.
	if n := f.eng.AuthFailureCounts()[engine.AuthFailureKey{Route: "other", Reason: string(syncerr.AuthRequired)}]; n != 8 {
		t.Fatalf("auth failures counted: %d, want 8", n)
	}
}

// TestBodyLimit refuses a body above MaxBodyBytes with
// sync.invalid_request before the engine sees it.
func TestBodyLimit(t *testing.T) {
	f := start(t, connect(t), Options{MaxBodyBytes: 64})
	_, err := f.client("big", devHeader("ada", "p1")).Push(context.Background(), todoCommit(t, "t1", strings.Repeat("x", 200)))
	var re *ReplyError
	if !errors.As(err, &re) || re.Err.Code != syncerr.InvalidRequest || !strings.Contains(re.Err.Message, "byte limit") {
		t.Fatalf("push of a body above the limit: %v, want %s naming the limit", err, syncerr.InvalidRequest)
	}
	// Above the server's max payload NATS refuses the message before it
	// leaves; Client answers with the protocol code too.
	c := &Client{Conn: f.nc, Subject: f.subject, Header: devHeader("ada", "p1")}
	if _, err := c.RoundTrip(context.Background(), make([]byte, f.nc.MaxPayload()+1)); syncerr.CodeOf(err) != syncerr.InvalidRequest {
		t.Fatalf("request above the max payload: %v, want %s", err, syncerr.InvalidRequest)
	}
}

// TestCommitNotification receives the (partition, seq) notification of a
// push on the partition's subject, and none on another partition's.
func TestCommitNotification(t *testing.T) {
	nc := connect(t)
	f := start(t, nc, Options{})
	part := "team.a b" // a dot and a space: escaped into one token
	sub, err := nc.SubscribeSync(f.notifier.Subject(part))
	if err != nil {
		t.Fatal(err)
	}
	other, err := nc.SubscribeSync(f.notifier.Subject("team"))
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	c := f.client("writer", devHeader("ada", part))
	for i, id := range []string{"t1", "t2"} {
		rs, err := c.Push(context.Background(), todoCommit(t, id, "milk"))
		if err != nil || rs[0].Status != ssp2.CommitApplied {
			t.Fatalf("push: %+v %v", rs, err)
		}
		// Notifications may coalesce: read until this commit's seq shows.
		want := *rs[0].CommitSeq
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		for {
			m, err := sub.NextMsgWithContext(ctx)
			if err != nil {
				cancel()
				t.Fatalf("push %d (seq %d): no notification: %v", i, want, err)
			}
			var n Notification
			if err := json.Unmarshal(m.Data, &n); err != nil || n.Partition != part {
				cancel()
				t.Fatalf("notification %q: %+v %v", m.Data, n, err)
			}
			if n.Seq >= want {
				break
			}
		}
		cancel()
	}
	// Messages from one connection arrive in order: after a round trip
	// to the server, a notification for "team" would be pending.
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if n, _, _ := other.Pending(); n != 0 {
		t.Fatalf("partition team got %d notifications", n)
	}
}

func TestSubjectToken(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"default", "default"},
		{"team-1_a", "team-1_a"},
		{"a.b", "a%2Eb"},
		{"*>", "%2A%3E"},
		{"a b%", "a%20b%25"},
		{"é", "%C3%A9"},
	} {
		if got := SubjectToken(tc.in); got != tc.want {
			t.Errorf("SubjectToken(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
