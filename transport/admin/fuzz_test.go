package admin_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/synclane/synclane/storage/memory"
)

// FuzzAdminRequest throws arbitrary methods, paths and queries at the
// admin API with the right token: every /api/ answer is a JSON object with
// a status the API documents (or net/http's redirect of a non-canonical
// path), never a 5xx other than 503, and the server keeps serving.
func FuzzAdminRequest(f *testing.F) {
	s := newServer(f, memory.New())
	s.push("p", "ada", "c1", "cc1", "t1", "P", "first")
	for _, seed := range []struct{ method, target string }{
		{"GET", "/api/partitions?limit=-1&after=%00"},
		{"GET", "/api/partitions/p/commits?before=abc"},
		{"GET", "/api/partitions/p/commits/99999999999999999999"},
		{"GET", "/api/partitions/p/rows/tasks/t1?limit=100000&scan=-5"},
		{"GET", "/api/partitions/%ff/clients/%00"},
		{"GET", "/api/partitions/p/scopes?window=999999999"},
		{"GET", "/api/events?after=18446744073709551615&limit=1"},
		{"POST", "/api/partitions/" + "x%2Fy" + "/rotate-epoch"},
		{"POST", "/api/maintenance?dryRun=maybe"},
		{"DELETE", "/api/overview"},
	} {
		f.Add(seed.method, seed.target)
	}
	h := s.handler
	f.Fuzz(func(t *testing.T, method, target string) {
		if method == "" || len(target) == 0 || target[0] != '/' || len(target) > 2048 {
			return
		}
		switch method {
		case "GET", "POST", "DELETE", "PUT", "HEAD":
		default:
			return
		}
		req, err := http.NewRequest(method, "http://admin"+target, nil)
		if err != nil || req.URL.Path == "" {
			return
		}
		req.Header.Set("Authorization", "Bearer "+testToken)
		if req.URL.Path == "/api/events/stream" {
			return // a stream does not end by itself
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if p := req.URL.EscapedPath(); len(p) < 5 || p[:5] != "/api/" {
			return // the console's static files (the mux routes on the escaped path)
		}
		switch rec.Code {
		case http.StatusMovedPermanently, http.StatusTemporaryRedirect, http.StatusPermanentRedirect:
			// net/http's ServeMux sends non-canonical paths (//, /./) to
			// their clean form; nothing is read or changed.
			if rec.Header().Get("Location") == "" {
				t.Fatalf("%s %s: redirect without Location", method, target)
			}
			return
		case 200, 400, 404, 503:
		default:
			t.Fatalf("%s %s: status %d: %s", method, target, rec.Code, rec.Body)
		}
		if method == "HEAD" {
			return
		}
		var v map[string]any
		if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil {
			t.Fatalf("%s %s: not a JSON object (%v): %s", method, target, err, rec.Body)
		}
		if rec.Code != 200 {
			e, _ := v["error"].(map[string]any)
			if e == nil || e["code"] == "" || e["message"] == "" {
				t.Fatalf("%s %s: error without code and message: %s", method, target, rec.Body)
			}
		}
	})
	// The server still serves after the corpus.
	res, err := http.Get(s.admin.URL + "/")
	if err != nil {
		f.Fatal(err)
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
}
