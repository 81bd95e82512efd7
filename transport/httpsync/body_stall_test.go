package httpsync_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/storage/memory"
	"github.com/synclane/synclane/transport/auth"
	"github.com/synclane/synclane/transport/bodybudget"
	"github.com/synclane/synclane/transport/httpsync"
)

// The documented bound of a stalled body (docs/limits.md): an
// authenticated request declaring a Content-Length is charged
// DecodedFactor × its length up front, and a client that then sends
// nothing holds that charge until the server's read timeout ends the read,
// not longer, though it keeps its connection open.
func TestStalledDeclaredBodyHoldsBudgetUntilReadTimeout(t *testing.T) {
	s := schema.MustDemo()
	eng, err := engine.New(context.Background(), engine.Config{Schema: s, Backend: memory.New().Backend(), Resolver: engine.AllowAll(s)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	budget := bodybudget.New(bodybudget.Options{Limit: 8 << 20})
	mux := httpsync.NewMux(eng, httpsync.MuxOptions{Options: httpsync.Options{Auth: auth.DevAuth{}, BodyBudget: budget, MaxBodyBytes: 1 << 20}})
	served := make(chan time.Time, 1)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mux.ServeHTTP(w, r)
		served <- time.Now()
	}))
	const readTimeout = 300 * time.Millisecond
	srv.Config.ReadTimeout = readTimeout
	srv.Start()
	t.Cleanup(srv.Close)

	// start is taken before the dial: the server's read deadline runs
	// from the accepted connection, which may come before Dial returns.
	start := time.Now()
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	const declared = 900 << 10
	fmt.Fprintf(conn, "POST /sync HTTP/1.1\r\nHost: x\r\nContent-Type: %s\r\nX-Actor: ada\r\nContent-Length: %d\r\n\r\n", httpsync.ContentType, declared)

	// Charged up front, before a byte of the body came.
	want := int64(bodybudget.DecodedFactor * declared)
	deadline := time.Now().Add(5 * time.Second)
	for budget.Stats().InUse != want {
		select {
		case <-served:
			t.Fatalf("the request ended before it was seen charged %d bytes", want)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("stalled body charged %d bytes, want %d", budget.Stats().InUse, want)
		}
		time.Sleep(time.Millisecond)
	}
	// Released when the read timeout ends the read, the connection still open.
	select {
	case end := <-served:
		if end.Sub(start) < readTimeout {
			t.Fatalf("the stalled request ended after %v, before the %v read timeout", end.Sub(start), readTimeout)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the stalled request was not ended by the read timeout")
	}
	if st := budget.Stats(); st.InUse != 0 {
		t.Fatalf("%d bytes still charged after the read timeout", st.InUse)
	}
}
