package peer

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/storage/memory"
)

// member serves a single-process engine's member routes over h2c, as
// serve does in cluster mode (the *Owned calls then run locally).
func member(t *testing.T, secret Secret) (*engine.Engine, *httptest.Server) {
	eng, srv, _ := memberHandler(t, secret)
	return eng, srv
}

// memberHandler is member, with its Handler (whose Close ends its frames
// connections, which srv.Close does not see: they are hijacked).
func memberHandler(t testing.TB, secret Secret) (*engine.Engine, *httptest.Server, *Handler) {
	t.Helper()
	sch := schema.MustDemo()
	eng, err := engine.New(context.Background(), engine.Config{Schema: sch, Backend: memory.New().Backend(), Resolver: engine.AllowAll(sch)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	h := NewHandler(eng, HandlerOptions{Secret: secret})
	srv := httptest.NewUnstartedServer(h)
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	t.Cleanup(func() { srv.Close(); h.Close(context.Background()) })
	return eng, srv, h
}

func request(t *testing.T, cid string, epoch string, frames ...ssp2.Frame) []byte {
	t.Helper()
	h := &ssp2.ReqHeader{ClientID: cid, SchemaVersion: 1}
	if epoch != "" {
		h.LogEpoch = &epoch
	}
	b, err := ssp2.Encode(&ssp2.Message{WireVersion: ssp2.WireV3, Kind: ssp2.KindRequest, Frames: append([]ssp2.Frame{h}, frames...)})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func decodeResponse(t *testing.T, rc io.ReadCloser) *ssp2.Message {
	t.Helper()
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	m, err := ssp2.DecodeResponse(b)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// Every call crosses the wire intact over the frames transport, HTTP/1.1 and HTTP/2 (h2c): a forwarded push is
// applied and its answer streamed back; the client state, a delta built
// on the callee and an ack come back as the engine answered them.
func TestCallsOverBothProtocols(t *testing.T) {
	secret, _ := NewSecret([]byte("cluster secret"))
	eng, srv := member(t, secret)
	for _, proto := range []string{ProtocolFrames, ProtocolHTTP1, ProtocolH2} {
		t.Run(proto, func(t *testing.T) { callsOverProtocol(t, eng, srv, secret, proto) })
	}
}

func callsOverProtocol(t *testing.T, eng *engine.Engine, srv *httptest.Server, secret Secret, proto string) {
	c, err := NewClient(ClientOptions{Self: "http://caller", Secret: secret, Protocol: proto})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	cid := "c-" + proto
	id := engine.Identity{ActorID: "u1", Partition: "p-" + proto, Grants: map[string][]string{"list_id": {"L"}}}

	first := decodeResponse(t, must(c.Sync(ctx, srv.URL, id, request(t, cid, "", &ssp2.PullHeader{Accept: 1}))))
	epoch := first.Frames[0].(*ssp2.RespHeader).LogEpoch
	if epoch == "" {
		t.Fatalf("no epoch in %+v", first.Frames)
	}
	row, err := ssp2.NewRowCodec(eng.Schema().Table("todos").Columns).AppendSparse(nil, ssp2.Row{"t1", "L", "hello", false, int64(1), int64(2)}, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	push := &ssp2.PushCommit{ClientCommitID: "k1", Operations: []ssp2.Operation{{Table: "todos", RowID: "t1", Op: ssp2.OpUpsert, Payload: row}}}
	m := decodeResponse(t, must(c.Sync(ctx, srv.URL, id, request(t, cid, epoch, push))))
	var pr *ssp2.PushResult
	for _, f := range m.Frames {
		if p, ok := f.(*ssp2.PushResult); ok {
			pr = p
		}
	}
	if pr == nil || pr.Status != ssp2.CommitApplied {
		t.Fatalf("push through the member route: %+v", m.Frames)
	}

	st, err := c.ClientState(ctx, srv.URL, id, cid)
	if err != nil || !st.Exists || st.ActorID != "u1" || st.Info.MaxCommitSeq != 1 || st.Info.LogEpoch != epoch {
		t.Fatalf("client state %+v, %v", st, err)
	}
	want, err := eng.BuildDeltasOwned(ctx, id.Partition, engine.DeltaRequest{Groups: []engine.DeltaGroup{{Subs: []engine.DeltaSub{
		{ID: "s", Table: "todos", Effective: map[string][]string{"list_id": {"L"}}, Cursor: 0}}}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := encodeDeltas(want); err != nil {
		t.Fatalf("encodeDeltas: %v", err)
	}
	got, err := c.BuildDeltas(ctx, srv.URL, id.Partition, engine.DeltaRequest{Groups: []engine.DeltaGroup{{Subs: []engine.DeltaSub{
		{ID: "s", Table: "todos", Effective: map[string][]string{"list_id": {"L"}}, Cursor: 0}}}}})
	if err != nil {
		t.Fatal(err)
	}
	if got.UpTo != 1 || got.LogEpoch != epoch || len(got.Groups) != 1 || got.Groups[0].Commits != 1 {
		t.Fatalf("deltas %+v", got)
	}
	if enc(t, got.Groups[0].Frames) != enc(t, want.Groups[0].Frames) {
		t.Fatal("the delta frames changed on the wire")
	}
	if err := c.Ack(ctx, srv.URL, id.Partition, []engine.Ack{{ClientID: cid, ActorID: "u1", Cursor: 1}}); err != nil {
		t.Fatal(err)
	}
}

func enc(t *testing.T, frames []ssp2.Frame) string {
	t.Helper()
	b, err := ssp2.Encode(&ssp2.Message{WireVersion: ssp2.WireV3, Kind: ssp2.KindResponse, Frames: append([]ssp2.Frame{&ssp2.RespHeader{LogEpoch: "-"}}, frames...)})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func must(rc io.ReadCloser, err error) io.ReadCloser {
	if err != nil {
		panic(err)
	}
	return rc
}

// A protocol error of the callee reaches the caller with its code; an
// unsigned call or one signed with another secret gets 401 before
// anything is read, which the caller takes as an unreachable owner
// (ErrRefused), not as its client's auth_required; a member that cannot
// be reached is ErrPeerUnreachable.
func TestErrorsAndAuth(t *testing.T) {
	for _, proto := range []string{ProtocolFrames, ProtocolHTTP1, ProtocolH2} {
		t.Run(proto, func(t *testing.T) { errorsAndAuth(t, proto) })
	}
}

func errorsAndAuth(t *testing.T, proto string) {
	secret, _ := NewSecret([]byte("cluster secret"))
	_, srv, h := memberHandler(t, secret)
	ctx := context.Background()
	id := engine.Identity{ActorID: "u1", Partition: "p1"}

	c, _ := NewClient(ClientOptions{Self: "http://caller", Secret: secret, Protocol: proto})
	defer c.Close()
	_, err := c.Sync(ctx, srv.URL, id, []byte("not ssp2"))
	if syncerr.CodeOf(err) != syncerr.InvalidRequest {
		t.Fatalf("garbage request: %v, want sync.invalid_request", err)
	}

	other, _ := NewSecret([]byte("another secret"))
	bad, _ := NewClient(ClientOptions{Self: "http://caller", Secret: other, Protocol: proto})
	defer bad.Close()
	_, err = bad.Sync(ctx, srv.URL, id, request(t, "c1", "", &ssp2.PullHeader{Accept: 1}))
	if !errors.Is(err, ErrRefused) || !errors.Is(err, engine.ErrPeerUnreachable) || syncerr.CodeOf(err) == syncerr.AuthRequired {
		t.Fatalf("wrong secret: %v, want ErrRefused and ErrPeerUnreachable, never the callee's sync.auth_required", err)
	}
	res, err := http.Post(srv.URL+pathSync, "application/octet-stream", bytes.NewReader(request(t, "c1", "", &ssp2.PullHeader{Accept: 1})))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusUnauthorized {
		t.Fatalf("unsigned call: HTTP %d, want 401", res.StatusCode)
	}

	addr := srv.URL
	srv.Close()
	h.Close(ctx)
	_, err = c.Sync(ctx, addr, id, request(t, "c1", "", &ssp2.PullHeader{Accept: 1}))
	if !errors.Is(err, engine.ErrPeerUnreachable) {
		t.Fatalf("closed member: %v, want ErrPeerUnreachable", err)
	}
}

func TestUnknownProtocolRefused(t *testing.T) {
	secret, _ := NewSecret([]byte("s"))
	if _, err := NewClient(ClientOptions{Self: "http://a", Secret: secret, Protocol: "h3"}); err == nil {
		t.Fatal("an unknown protocol was accepted")
	}
}
