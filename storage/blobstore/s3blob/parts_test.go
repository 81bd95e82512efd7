package s3blob

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/synclane/synclane/storage/blobstore"
	"github.com/synclane/synclane/storage/blobstore/blobstoretest"
)

// fakeS3 is gofakes3 on loopback with bucket "blobs", recording the body
// length of every upload request.
type fakeS3 struct {
	srv   *httptest.Server
	mu    sync.Mutex
	puts  []int64 // single-PUT object uploads (not copies)
	parts []int64 // multipart part uploads, in arrival order
}

func startFake(t *testing.T) *fakeS3 {
	t.Helper()
	be := s3mem.New()
	if err := be.CreateBucket("blobs"); err != nil {
		t.Fatal(err)
	}
	f := &fakeS3{}
	h := gofakes3.New(be).Server()
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut && r.Header.Get("X-Amz-Copy-Source") == "" {
			f.mu.Lock()
			if r.URL.Query().Has("partNumber") {
				f.parts = append(f.parts, r.ContentLength)
			} else {
				f.puts = append(f.puts, r.ContentLength)
			}
			f.mu.Unlock()
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeS3) store(t *testing.T, buffers int) *Store {
	t.Helper()
	s, err := New(t.Context(), Options{Endpoint: strings.TrimPrefix(f.srv.URL, "http://"), Bucket: "blobs", Region: "us-east-1",
		AccessKey: "k", SecretKey: "s", Insecure: true, UploadBuffers: buffers})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func (f *fakeS3) take() (puts, parts []int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	puts, parts, f.puts, f.parts = f.puts, f.parts, nil, nil
	return puts, parts
}

// TestS3PartSize: a body that fits one part buffer is one PUT; a longer
// one is sent in parts of exactly DefaultPartSize bytes (the last
// shorter), so an upload never holds more than one part in memory; every
// size reads back whole.
func TestS3PartSize(t *testing.T) {
	f := startFake(t)
	s := f.store(t, 2)
	const p = DefaultPartSize
	for _, c := range []struct {
		name  string
		size  int
		puts  []int64
		parts []int64
	}{
		{"empty", 0, []int64{0}, nil},
		{"small", 1000, []int64{1000}, nil},
		{"one part exactly", p, nil, []int64{p}},
		{"one byte over a part", p + 1, nil, []int64{p, 1}},
		{"two and a half parts", 2*p + p/2, nil, []int64{p, p, p / 2}},
	} {
		data := make([]byte, c.size)
		_, _ = rand.Read(data)
		id := blobstore.IDOf(data)
		n, err := s.Put(t.Context(), id, bytes.NewReader(data), int64(c.size))
		if err != nil || n != int64(c.size) {
			t.Fatalf("%s: Put = %d, %v", c.name, n, err)
		}
		puts, parts := f.take()
		if !equal(puts, c.puts) || !equal(parts, c.parts) {
			t.Errorf("%s: single PUTs %v and parts %v, want %v and %v", c.name, puts, parts, c.puts, c.parts)
		}
		r, err := s.Open(t.Context(), id, 0, -1)
		if err != nil {
			t.Fatalf("%s: Open: %v", c.name, err)
		}
		got, err := io.ReadAll(r)
		r.Close()
		if err != nil || !bytes.Equal(got, data) {
			t.Errorf("%s: read back %d bytes (%v), want %d", c.name, len(got), err, c.size)
		}
	}
	// A body longer than the cap, or hashing elsewhere, stores nothing.
	data := make([]byte, p+10)
	if _, err := s.Put(t.Context(), blobstore.IDOf(data), bytes.NewReader(data), p+5); !errors.Is(err, blobstore.ErrTooLarge) {
		t.Errorf("Put over the cap: %v, want ErrTooLarge", err)
	}
	other := blobstore.IDOf([]byte("other"))
	if _, err := s.Put(t.Context(), other, bytes.NewReader(data), int64(len(data))); !errors.Is(err, blobstore.ErrHashMismatch) {
		t.Errorf("Put of a body hashing elsewhere: %v, want ErrHashMismatch", err)
	}
	if _, err := s.Stat(t.Context(), other); !errors.Is(err, blobstore.ErrNotFound) {
		t.Errorf("Stat after a refused multipart Put: %v, want ErrNotFound", err)
	}
}

func equal(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestS3UploadBuffersBound: with one upload buffer, a second upload waits
// (without reading its body) until the first returns its buffer, then
// completes.
func TestS3UploadBuffersBound(t *testing.T) {
	f := startFake(t)
	s := f.store(t, 1)
	first := make([]byte, 2*DefaultPartSize)
	pr, pw := io.Pipe()
	done1 := make(chan error, 1)
	go func() {
		_, err := s.Put(t.Context(), blobstore.IDOf(first), pr, int64(len(first)))
		done1 <- err
	}()
	if _, err := pw.Write(first[:1]); err != nil { // returns once the first Put reads: it holds the buffer
		t.Fatal(err)
	}
	second := []byte("second upload")
	sr := &countingReader{r: bytes.NewReader(second)}
	done2 := make(chan error, 1)
	go func() {
		_, err := s.Put(t.Context(), blobstore.IDOf(second), sr, int64(len(second)))
		done2 <- err
	}()
	for deadline := time.Now().Add(10 * time.Second); s.parts.waiting() != 1; {
		if time.Now().After(deadline) {
			t.Fatalf("the second upload did not wait for a buffer (waiting %d, its body read %d times)", s.parts.waiting(), sr.reads())
		}
		time.Sleep(time.Millisecond)
	}
	if n := sr.reads(); n != 0 {
		t.Fatalf("the second upload read its body %d times while the only buffer was taken", n)
	}
	if _, err := pw.Write(first[1:]); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	if err := <-done1; err != nil {
		t.Fatalf("first upload: %v", err)
	}
	if err := <-done2; err != nil {
		t.Fatalf("second upload: %v", err)
	}
	for _, id := range []string{blobstore.IDOf(first), blobstore.IDOf(second)} {
		if _, err := s.Stat(t.Context(), id); err != nil {
			t.Errorf("Stat %s: %v", id, err)
		}
	}
}

type countingReader struct {
	mu sync.Mutex
	n  int
	r  io.Reader
}

func (c *countingReader) Read(p []byte) (int, error) {
	c.mu.Lock()
	c.n++
	c.mu.Unlock()
	return c.r.Read(p)
}

func (c *countingReader) reads() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// TestS3SilentEndpoint: an endpoint that accepts connections and never
// answers fails New with ErrTimeout, naming the endpoint and the timeout.
func TestS3SilentEndpoint(t *testing.T) {
	addr := blobstoretest.SilentListener(t)
	_, err := New(t.Context(), Options{Endpoint: addr, Bucket: "blobs", Region: "us-east-1", AccessKey: "k", SecretKey: "s",
		Insecure: true, Timeout: 300 * time.Millisecond})
	if !errors.Is(err, ErrTimeout) || !strings.Contains(err.Error(), addr) || !strings.Contains(err.Error(), "300ms") {
		t.Fatalf("New on a silent endpoint: %v, want ErrTimeout naming %s and 300ms", err, addr)
	}
}

// TestS3TimeoutWhileServing: once the endpoint stops answering, Stat and
// Delete fail within Options.Timeout instead of hanging.
func TestS3TimeoutWhileServing(t *testing.T) {
	be := s3mem.New()
	if err := be.CreateBucket("blobs"); err != nil {
		t.Fatal(err)
	}
	h := gofakes3.New(be).Server()
	var mu sync.Mutex
	silent := false
	stop := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		s := silent
		mu.Unlock()
		if s {
			select { // never answers: held until the request is abandoned or the test ends
			case <-r.Context().Done():
			case <-stop:
			}
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(func() { close(stop); srv.Close() })
	s, err := New(t.Context(), Options{Endpoint: strings.TrimPrefix(srv.URL, "http://"), Bucket: "blobs", Region: "us-east-1",
		AccessKey: "k", SecretKey: "s", Insecure: true, Timeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	silent = true
	mu.Unlock()
	id := blobstore.IDOf([]byte("x"))
	if _, err := s.Stat(t.Context(), id); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Stat on a silent endpoint: %v, want a deadline exceeded", err)
	}
	if err := s.Delete(t.Context(), id); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Delete on a silent endpoint: %v, want a deadline exceeded", err)
	}
}
