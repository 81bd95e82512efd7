package httpsync_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"testing/iotest"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/engine/cluster"
	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage/postgres/pgtest"
	"github.com/synclane/synclane/transport/auth"
	"github.com/synclane/synclane/transport/httpsync"
)

// fixedView is a membership that never changes.
type fixedView cluster.View

func (v fixedView) View() cluster.View       { return cluster.View(v) }
func (v fixedView) Changed() <-chan struct{} { return nil }

// ownedIn returns a partition cluster.Owner places on owner in v.
func ownedIn(v cluster.View, owner string) string {
	for i := 0; ; i++ {
		p := fmt.Sprint("part-", i)
		if m, _ := cluster.Owner(v, p); m.ID == owner {
			return p
		}
	}
}

// breakingPeers answers every forwarded sync with prefix, then a broken
// stream (the owner failed mid-answer).
type breakingPeers struct{ prefix []byte }

func (p breakingPeers) Sync(context.Context, string, engine.Identity, []byte) (io.ReadCloser, error) {
	return io.NopCloser(io.MultiReader(bytes.NewReader(p.prefix), iotest.ErrReader(errors.New("the owner is gone")))), nil
}

func (breakingPeers) ClientState(context.Context, string, engine.Identity, string) (engine.ClientState, error) {
	return engine.ClientState{}, engine.ErrPeerUnreachable
}

func (breakingPeers) BuildDeltas(context.Context, string, string, engine.DeltaRequest) (*engine.DeltaResult, error) {
	return nil, engine.ErrPeerUnreachable
}

func (breakingPeers) Ack(context.Context, string, string, []engine.Ack) error {
	return engine.ErrPeerUnreachable
}

// A forwarded answer (cluster mode) that breaks off after its first bytes
// reaches the client as a broken response, never as a complete-looking
// truncated 200.
func TestForwardedAnswerBreakingOffAbortsTheResponse(t *testing.T) {
	st := pgtest.Open(t)
	s := schema.MustDemo()
	view := fixedView{Healthy: true, Members: []cluster.Member{{ID: "http://a"}, {ID: "http://b"}}}
	prefix := []byte("SSP2 the first bytes of the owner's answer")
	eng, err := engine.New(context.Background(), engine.Config{Schema: s, Backend: st.Backend(), Resolver: engine.AllowAll(s),
		Cluster: &engine.ClusterConfig{Self: "http://a", Membership: view, Peers: breakingPeers{prefix: prefix}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	srv := httptest.NewServer(httpsync.NewHandler(eng, httpsync.Options{Auth: auth.DevAuth{}}))
	t.Cleanup(srv.Close)

	body, err := ssp2.Encode(&ssp2.Message{WireVersion: ssp2.WireV3, Kind: ssp2.KindRequest, Frames: []ssp2.Frame{
		&ssp2.ReqHeader{ClientID: "c1", SchemaVersion: 1}, &ssp2.PullHeader{Accept: ssp2.AcceptInlineRows}}})
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodPost, srv.URL+"/sync", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", httpsync.ContentType)
	req.Header.Set("X-Actor", "ada")
	req.Header.Set("X-Partition", ownedIn(cluster.View(view), "http://b"))
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	got, err := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusOK || !bytes.Equal(got, prefix) || !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("answer %d %q, read error %v; want 200, the prefix, then a broken body (unexpected EOF)", res.StatusCode, got, err)
	}
}
