package httpsync_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage/memory"
	"github.com/synclane/synclane/transport/auth"
	"github.com/synclane/synclane/transport/httperr"
	"github.com/synclane/synclane/transport/httpsync"
)

// A request that does not decode is answered 400 naming where and why,
// in the message and in details {"offset","reason"}: what the decoder
// itself reports (before, only "malformed SSP2 input").
func TestDecodeErrorSaysWhereAndWhy(t *testing.T) {
	s := schema.MustDemo()
	eng, err := engine.New(context.Background(), engine.Config{Schema: s, Backend: memory.New().Backend(), Resolver: engine.AllowAll(s)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	srv := httptest.NewServer(httpsync.NewMux(eng, httpsync.MuxOptions{Options: httpsync.Options{Auth: auth.DevAuth{}}}))
	t.Cleanup(srv.Close)
	valid, err := ssp2.Encode(&ssp2.Message{WireVersion: ssp2.WireV3, Kind: ssp2.KindRequest, Frames: []ssp2.Frame{
		&ssp2.ReqHeader{ClientID: "c", SchemaVersion: 1}, &ssp2.PullHeader{Accept: ssp2.AcceptInlineRows}}})
	if err != nil {
		t.Fatal(err)
	}
	badAccept := bytes.Clone(valid)
	badAccept[len(badAccept)-6] = 0xf0 // PULL_HEADER's accept byte, just before END: bits 4-7 set
	for _, c := range []struct {
		name string
		body []byte
	}{
		{"no END", valid[:len(valid)-5]},
		{"bad accept bits", badAccept},
		{"unknown wire version", append([]byte("SSP2\x07\x00\x01\x00"), valid[8:]...)},
	} {
		_, derr := ssp2.DecodeRequest(c.body)
		var de *ssp2.DecodeError
		if !errors.As(derr, &de) {
			t.Fatalf("%s: the decoder says %v, want a *DecodeError", c.name, derr)
		}
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/sync", bytes.NewReader(c.body))
		req.Header.Set("Content-Type", httpsync.ContentType)
		req.Header.Set("X-Actor", "ada")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		var e httperr.Body
		var details struct {
			Offset *int   `json:"offset"`
			Reason string `json:"reason"`
		}
		if res.StatusCode != http.StatusBadRequest || json.Unmarshal(b, &e) != nil || e.Code != "sync.invalid_request" {
			t.Fatalf("%s: HTTP %d %s", c.name, res.StatusCode, b)
		}
		if !strings.Contains(e.Message, fmt.Sprintf("offset %d", de.Offset)) || !strings.Contains(e.Message, de.Reason) {
			t.Errorf("%s: message %q does not say offset %d, %q", c.name, e.Message, de.Offset, de.Reason)
		}
		if json.Unmarshal(e.Details, &details) != nil || details.Offset == nil || *details.Offset != de.Offset || details.Reason != de.Reason {
			t.Errorf("%s: details %s, want offset %d, reason %q", c.name, e.Details, de.Offset, de.Reason)
		}
		t.Logf("%s: %s %s", c.name, e.Message, e.Details)
	}
}
