package httperr_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/transport/httperr"
)

func TestWriteStatus(t *testing.T) {
	cases := []struct {
		name       string
		status     int
		err        error
		wantStatus int
		wantCode   syncerr.Code
		wantMsg    string
	}{
		{"catalog status", 0, syncerr.New(syncerr.AuthRequired, "no token"), http.StatusUnauthorized, syncerr.AuthRequired, "no token"},
		{"explicit status", http.StatusMethodNotAllowed, syncerr.New(syncerr.InvalidRequest, "use POST"), http.StatusMethodNotAllowed, syncerr.InvalidRequest, "use POST"},
		{"uncoded error", 0, errors.New("disk on fire"), syncerr.Lookup(syncerr.InternalError).HTTPStatus, syncerr.InternalError, syncerr.As(errors.New("disk on fire")).Message},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			httperr.WriteStatus(rec, c.status, c.err)
			if rec.Code != c.wantStatus {
				t.Fatalf("status %d, want %d", rec.Code, c.wantStatus)
			}
			if ct, cc := rec.Header().Get("Content-Type"), rec.Header().Get("Cache-Control"); ct != "application/json" || cc != "no-store" {
				t.Fatalf("Content-Type %q, Cache-Control %q", ct, cc)
			}
			var b httperr.Body
			if err := json.Unmarshal(rec.Body.Bytes(), &b); err != nil {
				t.Fatalf("body %q: %v", rec.Body.String(), err)
			}
			spec := syncerr.Lookup(c.wantCode)
			want := httperr.Body{Code: string(c.wantCode), Category: spec.Category, Retryable: spec.Retryable,
				RecommendedAction: spec.RecommendedAction, Message: c.wantMsg}
			if b.Code != want.Code || b.Category != want.Category || b.Retryable != want.Retryable ||
				b.RecommendedAction != want.RecommendedAction || b.Message != want.Message || b.Details != nil {
				t.Fatalf("body %+v, want %+v", b, want)
			}
		})
	}
}

// TestWriteDetails: a coded error's details travel in the body.
func TestWriteDetails(t *testing.T) {
	rec := httptest.NewRecorder()
	httperr.Write(rec, syncerr.New(syncerr.RateLimited, "busy").WithDetails(map[string]int{"retryAfterMs": 1000}))
	var b httperr.Body
	if err := json.Unmarshal(rec.Body.Bytes(), &b); err != nil {
		t.Fatal(err)
	}
	if rec.Code != syncerr.Lookup(syncerr.RateLimited).HTTPStatus || string(b.Details) != `{"retryAfterMs":1000}` {
		t.Fatalf("status %d, details %s", rec.Code, b.Details)
	}
}

// noter records the codes it is told.
type noter struct {
	http.ResponseWriter
	codes []string
}

func (n *noter) NoteCode(code string) { n.codes = append(n.codes, code) }

// wrapper hides the writer under it behind Unwrap, as middleware does.
type wrapper struct{ http.ResponseWriter }

func (w wrapper) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// TestNoteCodeThroughWrappers: the code reaches the CodeNoter under
// wrappers (up to the bound), and writing works without one.
func TestNoteCodeThroughWrappers(t *testing.T) {
	for _, depth := range []int{0, 1, 15, 16} {
		n := &noter{ResponseWriter: httptest.NewRecorder()}
		var w http.ResponseWriter = n
		for range depth {
			w = wrapper{w}
		}
		httperr.Write(w, syncerr.New(syncerr.Forbidden, "no"))
		want := 1
		if depth >= 16 { // beyond the bound: not found
			want = 0
		}
		if len(n.codes) != want || want == 1 && n.codes[0] != string(syncerr.Forbidden) {
			t.Fatalf("depth %d: noted %v, want %d note(s) of %s", depth, n.codes, want, syncerr.Forbidden)
		}
	}
	rec := httptest.NewRecorder()
	httperr.NoteCode(rec, "x") // no noter: nothing, no panic
	httperr.Write(wrapper{rec}, syncerr.New(syncerr.Forbidden, "no"))
	if rec.Code != syncerr.Lookup(syncerr.Forbidden).HTTPStatus {
		t.Fatalf("status %d through a wrapper without a noter", rec.Code)
	}
}
