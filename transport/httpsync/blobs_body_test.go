package httpsync_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/storage/blobstore"
	"github.com/synclane/synclane/transport/auth"
	"github.com/synclane/synclane/transport/httperr"
	"github.com/synclane/synclane/transport/httpsync"
)

// TestBlobUploadCutShortOrStalled: a blob upload whose body ends before
// its Content-Length (the client half-closes) is answered 400
// sync.invalid_request, and one whose body stalls is answered 408 once the
// read timeout has passed without a byte (here 500 ms), as POST /sync
// answers the same bodies; neither is the server's fault (no 500, no warn
// log), nothing is stored, and the same blob uploads whole afterwards.
func TestBlobUploadCutShortOrStalled(t *testing.T) {
	forEachBlobBackend(t, false, func(t *testing.T, s *blobServer) {
		const readTimeout = 500 * time.Millisecond
		core, logs := observer.New(zapcore.WarnLevel)
		srv := httptest.NewUnstartedServer(httpsync.NewMux(s.eng, httpsync.MuxOptions{Options: httpsync.Options{Auth: auth.DevAuth{},
			Logger: zap.New(core), ReadTimeout: readTimeout}}))
		srv.Config.ReadTimeout = readTimeout
		srv.Start()
		t.Cleanup(srv.Close)

		data := bytes.Repeat([]byte("blob bytes "), 10<<10)
		id := blobstore.IDOf(data)
		for _, c := range []struct {
			name   string
			stall  bool
			status int
		}{
			{"cut short", false, http.StatusBadRequest},
			{"stalled", true, http.StatusRequestTimeout},
		} {
			conn, err := net.Dial("tcp", srv.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(conn, "PUT /blobs/%s HTTP/1.1\r\nHost: x\r\nX-Actor: alice\r\nX-Partition: team\r\nContent-Length: %d\r\n\r\n", id, len(data))
			if _, err := conn.Write(data[:len(data)/2]); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			if !c.stall {
				if err := conn.(*net.TCPConn).CloseWrite(); err != nil {
					t.Fatal(err)
				}
			}
			_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
			res, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatalf("%s: no answer within 10 s: %v", c.name, err)
			}
			took := time.Since(start)
			b, _ := io.ReadAll(res.Body)
			conn.Close()
			var e httperr.Body
			if res.StatusCode != c.status || json.Unmarshal(b, &e) != nil || e.Code != string(syncerr.InvalidRequest) || e.Retryable {
				t.Fatalf("%s: HTTP %d %s, want %d sync.invalid_request", c.name, res.StatusCode, b, c.status)
			}
			if c.stall && took < readTimeout {
				t.Fatalf("stalled: answered after %v, before the %v read timeout", took, readTimeout)
			}
			t.Logf("%s: HTTP %d after %v: %s", c.name, res.StatusCode, took, e.Message)
		}
		if n := logs.Len(); n != 0 {
			t.Fatalf("%d warn logs for client faults: %v", n, logs.All())
		}
		if m, err := s.store.Backend().Blobs.GetBlob(context.Background(), id); err != nil || m != nil {
			t.Fatalf("after the failed uploads the blob has metadata %+v (%v)", m, err)
		}
		if st, b, _ := s.do(http.MethodPut, "/blobs/"+id, "alice", bytes.NewReader(data), nil); st != http.StatusOK {
			t.Fatalf("the whole upload afterwards: HTTP %d %s", st, b)
		}
	})
}
