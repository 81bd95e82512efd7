package httpsync_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/klauspost/compress/zstd"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage/memory"
	"github.com/synclane/synclane/transport/auth"
	"github.com/synclane/synclane/transport/httpsync"
)

func newMemoryServer(t *testing.T, maxBody int64) *httptest.Server {
	t.Helper()
	return newMemoryServerOpts(t, httpsync.Options{MaxBodyBytes: maxBody})
}

// newMemoryServerOpts serves a memory-backed engine with opts (development
// auth unless opts.Auth is set).
func newMemoryServerOpts(t *testing.T, opts httpsync.Options) *httptest.Server {
	t.Helper()
	s := schema.MustDemo()
	eng, err := engine.New(context.Background(), engine.Config{Schema: s, Backend: memory.New().Backend(), Resolver: engine.AllowAll(s)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	if opts.Auth == nil {
		opts.Auth = auth.DevAuth{}
	}
	srv := httptest.NewServer(httpsync.NewHandler(eng, opts))
	t.Cleanup(srv.Close)
	return srv
}

func handshakeBody(t *testing.T) []byte {
	b, err := ssp2.Encode(&ssp2.Message{WireVersion: ssp2.WireV3, Kind: ssp2.KindRequest, Frames: []ssp2.Frame{
		&ssp2.ReqHeader{ClientID: "c", SchemaVersion: 1}, &ssp2.PullHeader{Accept: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// rawPost sends body with the given encodings, without Go's transparent
// gzip handling, and returns status, response Content-Encoding and body.
func rawPost(t *testing.T, url string, body []byte, contentEncoding, acceptEncoding string) (int, string, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	req.Header.Set("Content-Type", httpsync.ContentType)
	req.Header.Set("X-Actor", "ada")
	if contentEncoding != "" {
		req.Header.Set("Content-Encoding", contentEncoding)
	}
	req.Header.Set("Accept-Encoding", acceptEncoding) // set explicitly: no transparent decompression
	res, err := (&http.Client{Transport: &http.Transport{DisableCompression: true}}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, res.Header.Get("Content-Encoding"), b
}

func TestCompressionBothWays(t *testing.T) {
	// Compress every answer, however small, to see both directions work.
	srv := newMemoryServerOpts(t, httpsync.Options{MaxBodyBytes: 1 << 20, CompressMinBytes: -1})
	plain := handshakeBody(t)
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(plain)
	zw.Close()
	zenc, _ := zstd.NewWriter(nil)
	zs := zenc.EncodeAll(plain, nil)
	cases := []struct {
		name, ce, ae, wantCE string
		body                 []byte
	}{
		{"identity", "", "identity", "", plain},
		{"gzip request, gzip response", "gzip", "gzip", "gzip", gz.Bytes()},
		{"zstd request, zstd response", "zstd", "zstd, gzip", "zstd", zs},
		{"zstd refused by q=0", "", "zstd;q=0, gzip", "gzip", plain},
		{"zstd refused by q=0.0", "", "zstd; q=0.0, gzip;q=0.5", "gzip", plain},
	}
	for _, c := range cases {
		status, ce, b := rawPost(t, srv.URL, c.body, c.ce, c.ae)
		if status != 200 || ce != c.wantCE {
			t.Fatalf("%s: HTTP %d, Content-Encoding %q (want %q): %s", c.name, status, ce, c.wantCE, b)
		}
		switch ce {
		case "gzip":
			zr, err := gzip.NewReader(bytes.NewReader(b))
			if err != nil {
				t.Fatal(err)
			}
			b, _ = io.ReadAll(zr)
		case "zstd":
			zr, _ := zstd.NewReader(nil)
			out, err := zr.DecodeAll(b, nil)
			if err != nil {
				t.Fatal(err)
			}
			b = out
		}
		m, err := ssp2.DecodeResponse(b)
		if err != nil || !m.Frames[0].(*ssp2.RespHeader).ResetRequired {
			t.Fatalf("%s: response %v %+v", c.name, err, m)
		}
	}
}

func TestDecompressionBombIsRefused(t *testing.T) {
	srv := newMemoryServer(t, 64<<10)
	var gz bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&gz, gzip.BestCompression)
	zw.Write(bytes.Repeat([]byte{0}, 16<<20)) // 16 MiB of zeros, ~16 KiB compressed
	zw.Close()
	status, _, b := rawPost(t, srv.URL, gz.Bytes(), "gzip", "identity")
	if status != http.StatusRequestEntityTooLarge || !bytes.Contains(b, []byte("sync.invalid_request")) {
		t.Fatalf("bomb: HTTP %d %s", status, b)
	}
	// The server keeps serving.
	if status, _, b := rawPost(t, srv.URL, handshakeBody(t), "", "identity"); status != 200 {
		t.Fatalf("after the bomb: HTTP %d %s", status, b)
	}
}

func TestMethodAndAuthRefusals(t *testing.T) {
	srv := newMemoryServer(t, 1<<20)
	res, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusMethodNotAllowed || res.Header.Get("Allow") != "POST" {
		t.Fatalf("GET /sync: %d", res.StatusCode)
	}
}

// Every response carries a request id: the caller's own when it is a
// plain token, a fresh UUID otherwise (also on refusals before the engine).
func TestRequestID(t *testing.T) {
	srv := newMemoryServer(t, 0)
	cases := []struct {
		name, sent, contentType string
		keep                    bool
	}{
		{"minted", "", httpsync.ContentType, false},
		{"kept", "trace-42.a_b", httpsync.ContentType, true},
		{"hostile replaced", "<script>alert(1)</script> x", httpsync.ContentType, false},
		{"too long replaced", strings.Repeat("a", 129), httpsync.ContentType, false},
		{"refusal still has one", "", "text/plain", false},
	}
	seen := map[string]bool{}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodPost, srv.URL, bytes.NewReader(handshakeBody(t)))
			req.Header.Set("Content-Type", tc.contentType)
			req.Header.Set("X-Actor", "ada")
			if tc.sent != "" {
				req.Header[httpsync.RequestIDHeader] = []string{tc.sent}
			}
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			got := res.Header.Get(httpsync.RequestIDHeader)
			if tc.keep {
				if got != tc.sent {
					t.Fatalf("request id %q, want the caller's %q", got, tc.sent)
				}
				return
			}
			if _, err := uuid.Parse(got); err != nil || seen[got] {
				t.Fatalf("request id %q is not a fresh UUID (err %v)", got, err)
			}
			seen[got] = true
		})
	}
}

// Under the default policy a small answer goes out uncompressed with a
// Content-Length even when the client accepts zstd, and an answer above
// the threshold is compressed; pooled encoders never leak one answer's
// bytes into another's.
func TestCompressionThreshold(t *testing.T) {
	srv := newMemoryServerOpts(t, httpsync.Options{})
	for range 3 { // pooled encoders are reused across requests
		req, _ := http.NewRequest(http.MethodPost, srv.URL, bytes.NewReader(handshakeBody(t)))
		req.Header.Set("Content-Type", httpsync.ContentType)
		req.Header.Set("X-Actor", "ada")
		req.Header.Set("Accept-Encoding", "gzip, deflate, br, zstd")
		res, err := (&http.Client{Transport: &http.Transport{DisableCompression: true}}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if ce := res.Header.Get("Content-Encoding"); ce != "" || res.ContentLength != int64(len(b)) || len(b) >= httpsync.DefaultCompressMinBytes {
			t.Fatalf("small answer: Content-Encoding %q, Content-Length %d, %d bytes", ce, res.ContentLength, len(b))
		}
		if _, err := ssp2.DecodeResponse(b); err != nil {
			t.Fatal(err)
		}
	}
	// A large answer: a bootstrap of many rows, compressed with zstd.
	s := schema.MustDemo()
	codec := ssp2.NewRowCodec(s.Table("todos").Columns)
	c := &httpsync.Client{URL: srv.URL, ClientID: "big", Header: http.Header{"X-Actor": {"ada"}}}
	var ops []ssp2.Operation
	for i := range 200 {
		id := fmt.Sprintf("row-%03d", i)
		row, _ := codec.AppendSparse(nil, ssp2.Row{id, "L", strings.Repeat("title ", 10), false, int64(i), int64(i)}, nil, 0)
		ops = append(ops, ssp2.Operation{Table: "todos", RowID: id, Op: ssp2.OpUpsert, Payload: row})
	}
	if _, err := c.Push(context.Background(), &ssp2.PushCommit{ClientCommitID: "seed", Operations: ops}); err != nil {
		t.Fatal(err)
	}
	body, err := ssp2.Encode(&ssp2.Message{WireVersion: ssp2.WireV3, Kind: ssp2.KindRequest, Frames: []ssp2.Frame{
		&ssp2.ReqHeader{ClientID: "big", SchemaVersion: 1, LogEpoch: &c.Epoch},
		&ssp2.PullHeader{LimitSnapshotRows: 1000, MaxSnapshotPages: 1, Accept: 1},
		&ssp2.Subscription{ID: "s", Table: "todos", Scopes: map[string][]string{"list_id": {"L"}}, Cursor: -1}}})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		status, ce, b := rawPost(t, srv.URL, body, "", "gzip, deflate, br, zstd")
		if status != 200 || ce != "zstd" {
			t.Fatalf("large answer: HTTP %d, Content-Encoding %q", status, ce)
		}
		zr, _ := zstd.NewReader(nil)
		plain, err := zr.DecodeAll(b, nil)
		if err != nil || len(plain) < httpsync.DefaultCompressMinBytes {
			t.Fatalf("large answer decodes to %d bytes: %v", len(plain), err)
		}
		m, err := ssp2.DecodeResponse(plain)
		if err != nil {
			t.Fatal(err)
		}
		rows := 0
		for _, f := range m.Frames {
			if seg, ok := f.(*ssp2.SegmentInline); ok {
				sg, err := ssp2.DecodeSegment(seg.Payload)
				if err != nil {
					t.Fatal(err)
				}
				for _, blk := range sg.Blocks {
					rows += len(blk)
				}
			}
		}
		if rows != 200 {
			t.Fatalf("large answer carries %d rows, want 200", rows)
		}
	}
}
