package accesslog

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// logged serves h behind Handler with an observed logger.
func logged(t *testing.T, h http.Handler) (http.Handler, *observer.ObservedLogs) {
	t.Helper()
	core, logs := observer.New(zapcore.DebugLevel)
	return Handler(h, zap.New(core)), logs
}

// only returns the single access log line, failing otherwise.
func only(t *testing.T, logs *observer.ObservedLogs) observer.LoggedEntry {
	t.Helper()
	all := logs.All()
	if len(all) != 1 {
		t.Fatalf("%d log lines, want 1: %+v", len(all), all)
	}
	e := all[0]
	if e.Message != Message || e.Level != zapcore.InfoLevel {
		t.Fatalf("log line %q at %v, want %q at info", e.Message, e.Level, Message)
	}
	return e
}

var uuidRe = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

func TestAccessLogFields(t *testing.T) {
	mux := http.NewServeMux()
	var seenID string
	mux.HandleFunc("GET /items/{id}", func(w http.ResponseWriter, r *http.Request) {
		seenID = r.Header.Get(Header)
		if RequestID(r.Context()) != seenID {
			t.Errorf("RequestID(ctx) %q, request header %q", RequestID(r.Context()), seenID)
		}
		NoteIdentity(r.Context(), "ada", "p7")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, "hello")
		_, _ = io.WriteString(w, ", world")
	})
	mux.HandleFunc("POST /quiet", func(w http.ResponseWriter, r *http.Request) {})
	mux.HandleFunc("GET /file", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(w, strings.NewReader(strings.Repeat("x", 1000))) // through ReadFrom
	})
	for _, tc := range []struct {
		name, method, path, reqID string
		wantID                    string // "" for a generated UUID
		route                     string
		status                    int
		bytes                     int64
		actor, partition          string
	}{
		{name: "pattern, identity, caller's id", method: "GET", path: "/items/42", reqID: "abc-123_X.y", wantID: "abc-123_X.y",
			route: "GET /items/{id}", status: 201, bytes: 12, actor: "ada", partition: "p7"},
		{name: "no id: a fresh one", method: "GET", path: "/items/43", route: "GET /items/{id}", status: 201, bytes: 12, actor: "ada", partition: "p7"},
		{name: "bad id: a fresh one", method: "GET", path: "/items/44", reqID: "has space", route: "GET /items/{id}", status: 201, bytes: 12, actor: "ada", partition: "p7"},
		{name: "too long id", method: "GET", path: "/items/45", reqID: strings.Repeat("a", 129), route: "GET /items/{id}", status: 201, bytes: 12, actor: "ada", partition: "p7"},
		{name: "nothing written, no identity", method: "POST", path: "/quiet", reqID: "q", wantID: "q", route: "POST /quiet", status: 200, bytes: 0},
		{name: "io.Copy body", method: "GET", path: "/file", reqID: "f", wantID: "f", route: "GET /file", status: 200, bytes: 1000},
		{name: "no route", method: "GET", path: "/nowhere/secret-token", reqID: "n", wantID: "n", route: "none", status: 404, bytes: 19},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, logs := logged(t, mux)
			seenID = ""
			req := httptest.NewRequest(tc.method, tc.path, nil)
			if tc.reqID != "" {
				req.Header.Set(Header, tc.reqID)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			e := only(t, logs)
			f := e.ContextMap()
			id := rec.Header().Get(Header)
			if tc.wantID != "" && id != tc.wantID || tc.wantID == "" && !uuidRe.MatchString(id) {
				t.Fatalf("X-Request-Id answered %q, want %q (a UUID when empty)", id, tc.wantID)
			}
			if seenID != "" && seenID != id {
				t.Fatalf("the route saw request id %q, the answer has %q", seenID, id)
			}
			want := map[string]any{"method": tc.method, "route": tc.route, "status": int64(tc.status), "bytes": tc.bytes, "request_id": id}
			if tc.actor != "" {
				want["actor"], want["partition"] = tc.actor, tc.partition
			}
			d, ok := f["duration"].(time.Duration)
			if !ok || d <= 0 {
				t.Fatalf("duration %#v", f["duration"])
			}
			delete(f, "duration")
			if len(f) != len(want) {
				t.Fatalf("fields %v, want %v and duration", f, want)
			}
			for k, v := range want {
				if f[k] != v {
					t.Fatalf("field %s = %#v, want %#v (all: %v)", k, f[k], v, f)
				}
			}
			if rec.Code != tc.status || int64(rec.Body.Len()) != tc.bytes {
				t.Fatalf("answer %d with %d bytes, logged %d with %d", rec.Code, rec.Body.Len(), tc.status, tc.bytes)
			}
		})
	}
}

func TestAccessLogPanic(t *testing.T) {
	h, logs := logged(t, http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic("boom") }))
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("the panic did not go on to the server")
			}
		}()
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))
	}()
	if f := only(t, logs).ContextMap(); f["status"] != int64(500) {
		t.Fatalf("status %v, want 500", f["status"])
	}
}

// A streamed answer goes out as it is flushed: the client reads the first
// part while the handler still waits to write the second.
func TestAccessLogKeepsFlusher(t *testing.T) {
	proceed := make(chan struct{})
	h, logs := logged(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := w.(http.Flusher); !ok {
			t.Error("ResponseWriter is not an http.Flusher")
		}
		_, _ = io.WriteString(w, "first\n")
		w.(http.Flusher).Flush()
		select {
		case <-proceed:
		case <-time.After(10 * time.Second):
			t.Error("the client never read the flushed part")
		}
		_, _ = io.WriteString(w, "second\n")
	}))
	srv := httptest.NewServer(h)
	defer srv.Close()
	res, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	br := bufio.NewReader(res.Body)
	if line, err := br.ReadString('\n'); err != nil || line != "first\n" {
		t.Fatalf("first part %q, %v", line, err)
	}
	close(proceed)
	if rest, err := io.ReadAll(br); err != nil || string(rest) != "second\n" {
		t.Fatalf("rest %q, %v", rest, err)
	}
	srv.Close() // waits for the handler, so its line is written
	if f := only(t, logs).ContextMap(); f["bytes"] != int64(13) || f["status"] != int64(200) {
		t.Fatalf("fields %v", f)
	}
}

// A WebSocket upgrade hijacks the connection through the wrapper; the
// line, written when the socket closes, has status 101.
func TestAccessLogKeepsHijacker(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /ws", func(w http.ResponseWriter, r *http.Request) {
		if _, ok := w.(http.Hijacker); !ok {
			t.Error("ResponseWriter is not an http.Hijacker")
		}
		NoteIdentity(r.Context(), "bob", "default")
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			t.Errorf("accept: %v", err)
			return
		}
		defer c.CloseNow()
		typ, msg, err := c.Read(r.Context())
		if err == nil {
			err = c.Write(r.Context(), typ, append([]byte("echo "), msg...))
		}
		if err != nil {
			t.Errorf("echo: %v", err)
			return
		}
		_, _, _ = c.Read(r.Context()) // until the client closes
	})
	h, logs := logged(t, mux)
	served := make(chan struct{}) // closed once Handler has returned (a hijacked request is not waited for by srv.Close)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r)
		close(served)
	}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, res, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http")+"/ws", &websocket.DialOptions{HTTPHeader: http.Header{Header: {"ws-1"}}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Header.Get(Header) != "ws-1" {
		t.Fatalf("upgrade answer X-Request-Id %q", res.Header.Get(Header))
	}
	if err := c.Write(ctx, websocket.MessageText, []byte("hi")); err != nil {
		t.Fatal(err)
	}
	if _, msg, err := c.Read(ctx); err != nil || string(msg) != "echo hi" {
		t.Fatalf("read %q, %v", msg, err)
	}
	_ = c.Close(websocket.StatusNormalClosure, "")
	select {
	case <-served:
	case <-ctx.Done():
		t.Fatal("the socket's handler did not return after the close")
	}
	f := only(t, logs).ContextMap()
	if f["status"] != int64(101) || f["route"] != "GET /ws" || f["request_id"] != "ws-1" || f["actor"] != "bob" || f["partition"] != "default" {
		t.Fatalf("fields %v", f)
	}
}

// Outside Handler the notes do nothing and there is no id.
func TestNotesOutsideHandler(t *testing.T) {
	NoteIdentity(context.Background(), "a", "p")
	if id := RequestID(context.Background()); id != "" {
		t.Fatalf("RequestID outside Handler: %q", id)
	}
}

// With info off the request is served and its id echoed, and nothing is
// logged; a logger at info logs the line.
func TestAccessLogInfoOff(t *testing.T) {
	for _, lvl := range []zapcore.Level{zapcore.WarnLevel, zapcore.InfoLevel} {
		core, logs := observer.New(lvl)
		h := Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") }), zap.New(core))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/x", nil))
		if rec.Body.String() != "ok" || !uuidRe.MatchString(rec.Header().Get(Header)) {
			t.Fatalf("%v: body %q, request id %q", lvl, rec.Body.String(), rec.Header().Get(Header))
		}
		if want := map[zapcore.Level]int{zapcore.WarnLevel: 0, zapcore.InfoLevel: 1}[lvl]; logs.Len() != want {
			t.Fatalf("%v: %d log lines, want %d", lvl, logs.Len(), want)
		}
	}
}
