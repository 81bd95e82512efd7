package main

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/transport/httpsync"
)

// TestServeWireVersionsFlag: --wire-versions (and SYNCLANE_WIRE_VERSIONS)
// takes a comma-separated window of versions the codec knows; anything
// else stops serve with exit 2 naming the flag (or the variable), before
// any storage is touched.
func TestServeWireVersionsFlag(t *testing.T) {
	for _, v := range []string{"", "4", "0", "x", "2,,3", "3 2", "65536"} {
		dir := t.TempDir()
		code, _, stderr := runCmdEnv(t, nil, "serve", "--listen", "127.0.0.1:0", "--data", dir, "--wire-versions", v)
		if code != 2 || !strings.Contains(stderr, "wire-versions") {
			t.Errorf("--wire-versions %q: exit %d, want 2 naming the flag; stderr %s", v, code, stderr)
		}
	}
	code, _, stderr := runCmdEnv(t, map[string]string{"SYNCLANE_WIRE_VERSIONS": "1,9"}, "serve", "--listen", "127.0.0.1:0", "--data", t.TempDir())
	if code != 2 || !strings.Contains(stderr, "SYNCLANE_WIRE_VERSIONS") {
		t.Errorf("SYNCLANE_WIRE_VERSIONS=1,9: exit %d, want 2 naming the variable; stderr %s", code, stderr)
	}
	var f wireVersionsFlag
	if err := f.Set(" 3, 2 ,3"); err != nil || f.String() != "2,3" {
		t.Errorf("Set(\" 3, 2 ,3\") = %v, String %q; want 2,3", err, f.String())
	}
}

// TestServeWireVersionWindow: by default serve reads wire version 3 only
// (SPEC §9) and refuses an older envelope with 400 sync.invalid_request
// before reading a frame; --wire-versions 2,3 (or the variable) lets a v2
// client push full rows and pull, while versions outside the window stay
// refused.
func TestServeWireVersionWindow(t *testing.T) {
	client := func(base string, wire uint16, id string) *httpsync.Client {
		return &httpsync.Client{URL: base + "/sync", ClientID: id, WireVersion: wire, Header: http.Header{"X-Actor": {"ada"}}}
	}
	wantRefused := func(t *testing.T, c *httpsync.Client, window string) {
		t.Helper()
		err := c.Handshake(context.Background())
		var se *syncerr.Error
		if !errors.As(err, &se) || se.Code != syncerr.InvalidRequest || !strings.Contains(se.Error(), "HTTP 400") ||
			!strings.Contains(se.Message, "wireVersion") || !strings.Contains(se.Message, window) {
			t.Fatalf("wire v%d against window %s: %v, want 400 sync.invalid_request naming the window", c.WireVersion, window, err)
		}
	}
	full := func(t *testing.T, id, title string) []byte {
		b, err := todoCodec.Append(nil, ssp2.Row{id, "L", title, false, int64(1), int64(2)})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}

	t.Run("default", func(t *testing.T) {
		base := startServe(t, "--data", t.TempDir())
		wantRefused(t, client(base, ssp2.WireV2, "old"), "3")
		wantRefused(t, client(base, ssp2.WireV1, "older"), "3")
		if pr, err := pushTodo(t, base, "ada", "t1"); err != nil || pr.Status != ssp2.CommitApplied {
			t.Fatalf("a v3 push after the refusals: %+v %v", pr, err)
		}
	})
	t.Run("2,3", func(t *testing.T) {
		base := startServe(t, "--data", t.TempDir(), "--wire-versions", "2,3")
		wantRefused(t, client(base, ssp2.WireV1, "older"), "2, 3")
		old := client(base, ssp2.WireV2, "old")
		rs, err := old.Push(context.Background(), &ssp2.PushCommit{ClientCommitID: "c1",
			Operations: []ssp2.Operation{{Table: "todos", RowID: "t1", Op: ssp2.OpUpsert, Payload: full(t, "t1", "from v2")}}})
		if err != nil || rs[0].Status != ssp2.CommitApplied {
			t.Fatalf("v2 push of a full row: %+v %v", rs, err)
		}
		rows, err := pullTodos(t, base, "bob") // a v3 reader
		if err != nil || len(rows) != 1 || rows["t1"].Values[2] != "from v2" {
			t.Fatalf("v3 pull after the v2 push: %v %v", rows, err)
		}
		if pr, err := pushTodo(t, base, "ada", "t2"); err != nil || pr.Status != ssp2.CommitApplied {
			t.Fatalf("v3 push beside v2: %+v %v", pr, err)
		}
	})
	t.Run("env 1,2,3", func(t *testing.T) {
		p := startServeProc(t, map[string]string{"SYNCLANE_WIRE_VERSIONS": "1,2,3"}, "--data", t.TempDir())
		t.Cleanup(func() { p.cancel(); p.wait(t) })
		for _, wire := range []uint16{ssp2.WireV1, ssp2.WireV2, ssp2.WireV3} {
			// An epoch-less pull: v1 has no log epoch, later versions are
			// told to acquire one.
			m, err := client(p.base, wire, "c").Do(context.Background(), &ssp2.PullHeader{Accept: ssp2.AcceptInlineRows})
			if err != nil && !errors.Is(err, httpsync.ErrResetRequired) || m == nil || m.WireVersion != wire {
				t.Fatalf("wire v%d with SYNCLANE_WIRE_VERSIONS=1,2,3: %v %v", wire, m, err)
			}
		}
	})
}
