package httpsync_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage/memory"
	"github.com/synclane/synclane/transport/auth"
	"github.com/synclane/synclane/transport/httpsync"
)

// smallSendBuffer shrinks the kernel send buffer of every accepted
// connection, so an unread answer of a few hundred KiB blocks the server.
type smallSendBuffer struct{ net.Listener }

func (l smallSendBuffer) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetWriteBuffer(4 << 10)
	}
	return c, err
}

// rawRequest is a POST /sync on its own connection, written by hand.
func rawRequest(body []byte) string {
	return fmt.Sprintf("POST /sync HTTP/1.1\r\nHost: test\r\nContent-Type: %s\r\nX-Actor: ada\r\nContent-Length: %d\r\n\r\n%s",
		httpsync.ContentType, len(body), body)
}

// A client that never reads a large answer is cut off after the write
// timeout: the handler returns (and the reply's memory can be freed)
// instead of blocking forever on a full socket.
func TestWriteTimeoutCutsOffClientThatNeverReads(t *testing.T) {
	s := schema.MustDemo()
	eng, err := engine.New(context.Background(), engine.Config{Schema: s, Backend: memory.New().Backend(), Resolver: engine.AllowAll(s)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	h := httpsync.NewHandler(eng, httpsync.Options{Auth: auth.DevAuth{}, MaxBodyBytes: 8 << 20, WriteTimeout: 300 * time.Millisecond})
	var bootstraps atomic.Int32
	returned := make(chan time.Duration, 16)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		h.ServeHTTP(w, r)
		if r.Header.Get("X-Test") == "never-reads" {
			bootstraps.Add(1)
			returned <- time.Since(start)
		}
	}))
	srv.Listener = smallSendBuffer{srv.Listener}
	srv.Start()
	t.Cleanup(srv.Close)

	// About 2 MiB of rows.
	codec := ssp2.NewRowCodec(s.Table("todos").Columns)
	c := &httpsync.Client{URL: srv.URL + "/sync", ClientID: "writer", Header: http.Header{"X-Actor": {"ada"}}}
	title := strings.Repeat("x", 1000)
	for batch := range 4 {
		pc := &ssp2.PushCommit{ClientCommitID: fmt.Sprint("c", batch)}
		for i := range 500 {
			id := fmt.Sprintf("r%d-%d", batch, i)
			row, err := codec.AppendSparse(nil, ssp2.Row{id, "L", title, false, int64(1), int64(2)}, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			pc.Operations = append(pc.Operations, ssp2.Operation{Table: "todos", RowID: id, Op: ssp2.OpUpsert, Payload: row})
		}
		if rs, err := c.Push(context.Background(), pc); err != nil || rs[0].Status != ssp2.CommitApplied {
			t.Fatalf("push %d: %v", batch, err)
		}
	}
	epoch := c.Epoch
	body, err := ssp2.Encode(&ssp2.Message{WireVersion: ssp2.WireV3, Kind: ssp2.KindRequest, Frames: []ssp2.Frame{
		&ssp2.ReqHeader{ClientID: "sleepy", SchemaVersion: 1, LogEpoch: &epoch},
		&ssp2.PullHeader{Accept: ssp2.AcceptInlineRows, LimitSnapshotRows: 50000, MaxSnapshotPages: 1},
		&ssp2.Subscription{ID: "all", Table: "todos", Scopes: map[string][]string{"list_id": {"L"}}, Cursor: -1},
	}})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.(*net.TCPConn).SetReadBuffer(4 << 10)
	req := strings.Replace(rawRequest(body), "X-Actor: ada\r\n", "X-Actor: ada\r\nX-Test: never-reads\r\n", 1)
	if _, err := conn.Write([]byte(req)); err != nil {
		t.Fatal(err)
	}
	// The client never reads.
	select {
	case d := <-returned:
		t.Logf("handler returned after %v", d)
	case <-time.After(10 * time.Second):
		t.Fatal("the handler is still blocked writing to a client that never reads, 10s after a 300ms write timeout")
	}
	// The connection is gone: reading what was buffered ends in an error
	// or EOF before the whole answer arrives.
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(conn)
	res, err := http.ReadResponse(br, nil)
	if err == nil {
		n, rerr := res.Body.Read(make([]byte, 4<<20))
		for rerr == nil {
			var m int
			m, rerr = res.Body.Read(make([]byte, 1<<20))
			n += m
		}
		if rerr.Error() == "EOF" {
			t.Fatalf("the whole answer arrived (%d bytes): the answer was too small to block the server", n)
		}
	}
}
