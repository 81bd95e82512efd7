package httpsync_test

import (
	"bytes"
	"compress/gzip"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/synclane/synclane/protocol/ssp2"
)

// decodeBody decodes a download's body by its Content-Encoding.
func decodeBody(t *testing.T, enc string, body []byte) []byte {
	t.Helper()
	var r io.Reader = bytes.NewReader(body)
	switch enc {
	case "zstd":
		zr, err := zstd.NewReader(r)
		if err != nil {
			t.Fatal(err)
		}
		defer zr.Close()
		r = zr
	case "gzip":
		zr, err := gzip.NewReader(r)
		if err != nil {
			t.Fatal(err)
		}
		r = zr
	}
	out, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("decode %s body: %v", enc, err)
	}
	return out
}

// TestSegmentFormsServed: a compressed download sends the segment's form
// in the negotiated encoding (q-values as before), with its length, the
// segment's ETag and Vary: Accept-Encoding; the form is built on the first
// download in each encoding only; If-None-Match answers 304 in every
// encoding without building anything.
func TestSegmentFormsServed(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s *server) {
		_, _, _, ref := seedAndPullRef(t, s, 1500)
		scopes := string(ssp2.CanonicalScopesJSON(listL()))
		_, identity := getSegment(t, s, ref.SegmentID, "reader", scopes, nil)
		if int64(len(identity)) != ref.ByteLength {
			t.Fatalf("identity download: %d bytes, want %d", len(identity), ref.ByteLength)
		}
		etag := `"` + ref.SegmentID + `"`
		built := func() uint64 { return s.eng.Segments().Stats().FormsBuilt }
		for _, tc := range []struct {
			accept, want string
			builds       uint64 // forms built after both downloads
		}{
			{"gzip, deflate, br, zstd", "zstd", 1},
			{"zstd;q=0, gzip", "gzip", 2},
			{"gzip;q=0.5", "gzip", 2},
			{"br, identity", "", 2},
		} {
			for round := range 2 {
				res, body := getSegment(t, s, ref.SegmentID, "reader", scopes, map[string]string{"Accept-Encoding": tc.accept})
				if res.StatusCode != http.StatusOK || res.Header.Get("Content-Encoding") != tc.want || res.Header.Get("ETag") != etag ||
					!strings.Contains(res.Header.Get("Vary"), "Accept-Encoding") || res.Header.Get("Content-Length") != strconv.Itoa(len(body)) {
					t.Fatalf("%q round %d: %d %v (%d bytes)", tc.accept, round, res.StatusCode, res.Header, len(body))
				}
				if got := decodeBody(t, tc.want, body); !bytes.Equal(got, identity) {
					t.Fatalf("%q round %d: the body decodes to %d other bytes", tc.accept, round, len(got))
				}
			}
			if got := built(); got != tc.builds {
				t.Fatalf("after two downloads with %q: %d forms built, want %d", tc.accept, got, tc.builds)
			}
		}
		if st := s.eng.Segments().Stats(); st.FormsServed < 3 || st.FormsUnstored != 0 {
			t.Fatalf("stats %+v", st)
		}
		for _, accept := range []string{"zstd", "gzip", ""} {
			res, body := getSegment(t, s, ref.SegmentID, "reader", scopes, map[string]string{"Accept-Encoding": accept, "If-None-Match": etag})
			if res.StatusCode != http.StatusNotModified || len(body) != 0 || res.Header.Get("ETag") != etag || res.Header.Get("Content-Encoding") != "" {
				t.Fatalf("If-None-Match with %q: %d %v", accept, res.StatusCode, res.Header)
			}
		}
		if got := built(); got != 2 {
			t.Fatalf("304s built forms: %d", got)
		}
	})
}
