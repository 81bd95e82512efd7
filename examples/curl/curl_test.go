// Package curl holds the request renderings README's curl walkthrough
// encodes with `go run ./cmd/ssp2 encode`, and schema.json (the demo
// schema) that `ssp2 --schema` reads rows with; the test checks they get
// the answers README shows.
package curl

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/protocol/rowjson"
	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage/memory"
	"github.com/synclane/synclane/transport/auth"
	"github.com/synclane/synclane/transport/httperr"
	"github.com/synclane/synclane/transport/httpsync"
)

// post encodes the rendering in file as `ssp2 encode --schema schema.json`
// does and sends it as README's curl does.
func post(t *testing.T, url, file string) (int, []byte) {
	t.Helper()
	rendering, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if rendering, err = rowjson.Collapse(rendering, schema.MustDemo()); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	m, err := ssp2.ParseJSON(rendering)
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	body, err := ssp2.Encode(m)
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/vnd.syncular.sync.v2")
	req.Header.Set("X-Actor", "ada")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, b
}

func TestCurlWalkthrough(t *testing.T) {
	s := schema.MustDemo()
	eng, err := engine.New(context.Background(), engine.Config{Schema: s, Backend: memory.New().Backend(), Resolver: engine.AllowAll(s)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	srv := httptest.NewServer(httpsync.NewMux(eng, httpsync.MuxOptions{Options: httpsync.Options{Auth: auth.DevAuth{}}}))
	t.Cleanup(srv.Close)
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}

	// pull.json: the epoch handshake.
	status, b := post(t, srv.URL+"/sync", "pull.json")
	if status != 200 {
		t.Fatalf("pull.json: HTTP %d %s", status, b)
	}
	m, err := ssp2.DecodeResponse(b)
	if err != nil {
		t.Fatal(err)
	}
	if h, ok := m.Frames[0].(*ssp2.RespHeader); !ok || !h.ResetRequired || len(h.LogEpoch) != 32 || len(m.Frames) != 1 {
		t.Fatalf("pull.json: not the epoch handshake: %+v", m.Frames)
	}

	epoch := m.Frames[0].(*ssp2.RespHeader).LogEpoch
	// withEpoch is file with the handshake's epoch put in, as README's sed
	// does.
	withEpoch := func(file string) string {
		t.Helper()
		tmpl, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(tmpl, []byte(`"EPOCH"`)) {
			t.Fatalf("%s has no EPOCH placeholder for README's sed", file)
		}
		out := t.TempDir() + "/" + file
		if err := os.WriteFile(out, bytes.ReplaceAll(tmpl, []byte("EPOCH"), []byte(epoch)), 0o600); err != nil {
			t.Fatal(err)
		}
		return out
	}
	decode := func(file string, status int, b []byte) *ssp2.Message {
		t.Helper()
		if status != 200 {
			t.Fatalf("%s: HTTP %d %s", file, status, b)
		}
		m, err := ssp2.DecodeResponse(b)
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if m.WireVersion != ssp2.WireV3 {
			t.Fatalf("%s: answered in wire version %d, want 3", file, m.WireVersion)
		}
		return m
	}

	// pull-unknown-table.json: the protocol's JSON error, as README shows it.
	status, b = post(t, srv.URL+"/sync", withEpoch("pull-unknown-table.json"))
	var e httperr.Body
	if status != 400 || json.Unmarshal(b, &e) != nil || e.Code != "sync.unknown_table" {
		t.Fatalf("pull-unknown-table.json: HTTP %d %s", status, b)
	}
	if !bytes.Contains(readme, bytes.TrimSpace(b)) {
		t.Errorf("README does not show the answer to pull-unknown-table.json:\n%s", b)
	}
	for _, f := range []string{"examples/curl/pull.json", "examples/curl/pull-unknown-table.json", "%{http_code}", "mktemp -d"} {
		if !strings.Contains(string(readme), f) {
			t.Errorf("README's curl walkthrough does not use %s", f)
		}
	}

	// push.json: its commit is applied and its pull bootstraps the row it
	// wrote; sent again, the commit is answered cached.
	pushFile := withEpoch("push.json")
	for i, want := range []ssp2.CommitStatus{ssp2.CommitApplied, ssp2.CommitCached} {
		status, b = post(t, srv.URL+"/sync", pushFile)
		m := decode("push.json", status, b)
		var pr *ssp2.PushResult
		var ss *ssp2.SubStart
		var seg *ssp2.Segment
		for _, f := range m.Frames {
			switch f := f.(type) {
			case *ssp2.PushResult:
				pr = f
			case *ssp2.SubStart:
				ss = f
			case *ssp2.SegmentInline:
				if seg, err = ssp2.DecodeSegment(f.Payload); err != nil {
					t.Fatal(err)
				}
			}
		}
		if pr == nil || pr.Status != want || pr.CommitSeq == nil || *pr.CommitSeq != 1 {
			t.Fatalf("push.json #%d: push result %+v, want status %d at commitSeq 1", i+1, pr, want)
		}
		if ss == nil || ss.Status != ssp2.SubActive || !ss.Bootstrap {
			t.Fatalf("push.json #%d: subscription %+v, want an active bootstrap", i+1, ss)
		}
		if seg == nil || len(seg.Blocks) != 1 || len(seg.Blocks[0]) != 1 {
			t.Fatalf("push.json #%d: want one inline segment with one row, got %+v", i+1, seg)
		}
		if row := seg.Blocks[0][0]; row.ServerVersion != 1 || row.Values[0] != "milk" || row.Values[2] != "Buy milk" {
			t.Fatalf("push.json #%d: bootstrapped row %+v", i+1, row)
		}
	}

	// patch.json: a sparse patch of one column, applied as commit 2.
	status, b = post(t, srv.URL+"/sync", withEpoch("patch.json"))
	prs := httpsync.PushResults(decode("patch.json", status, b))
	if len(prs) != 1 || prs[0].Status != ssp2.CommitApplied || *prs[0].CommitSeq != 2 {
		t.Fatalf("patch.json: %+v, want applied at commitSeq 2", prs)
	}

	// pull-since.json: commit 2 carries the whole row, done and otherwise
	// as inserted, at version 2.
	status, b = post(t, srv.URL+"/sync", withEpoch("pull-since.json"))
	var cm *ssp2.Commit
	for _, f := range decode("pull-since.json", status, b).Frames {
		if c, ok := f.(*ssp2.Commit); ok {
			cm = c
		}
	}
	if cm == nil || cm.CommitSeq != 2 || len(cm.Changes) != 1 || cm.Changes[0].RowVersion == nil || *cm.Changes[0].RowVersion != 2 {
		t.Fatalf("pull-since.json: commit %+v, want commit 2 changing milk to version 2", cm)
	}
	row, err := ssp2.NewRowCodec(s.Table("todos").Columns).Decode(cm.Changes[0].Row)
	if err != nil || !reflect.DeepEqual(row, ssp2.Row{"milk", "groceries", "Buy milk", true, int64(1), int64(1700000000000)}) {
		t.Fatalf("pull-since.json: the change's row %v (%v), want the inserted row with done", row, err)
	}

	// conflict.json: baseVersion 1 after the patch conflicts on done
	// alone (title was not written since version 1).
	status, b = post(t, srv.URL+"/sync", withEpoch("conflict.json"))
	prs = httpsync.PushResults(decode("conflict.json", status, b))
	if len(prs) != 1 || prs[0].Status != ssp2.CommitRejected || len(prs[0].Results) != 1 {
		t.Fatalf("conflict.json: %+v, want a rejected commit", prs)
	}
	if r := prs[0].Results[0]; r.Status != ssp2.OpConflict || r.ServerVersion != 2 || !bytes.Equal(r.ConflictColumns, []byte{0x08}) {
		t.Fatalf("conflict.json: %+v, want a conflict at version 2 marking done (0x08)", r)
	}
	for _, f := range []string{"examples/curl/push.json", "examples/curl/patch.json", "examples/curl/pull-since.json", "examples/curl/conflict.json",
		`"title": "Buy milk"`, `"status": "applied"`, `"conflictColumns": "CA=="`} {
		if !strings.Contains(string(readme), f) {
			t.Errorf("README's push walkthrough does not show %s", f)
		}
	}
}

// schema.json, which README's walkthrough gives to ssp2 --schema, is the
// demo schema the server serves without --schema.
func TestSchemaFileIsTheDemo(t *testing.T) {
	src, err := os.ReadFile("schema.json")
	if err != nil {
		t.Fatal(err)
	}
	got, err := schema.Parse(src)
	if err != nil {
		t.Fatal(err)
	}
	want := schema.MustDemo()
	if got.Version != want.Version || len(got.Tables) != len(want.Tables) {
		t.Fatalf("schema.json: version %d, %d tables; the demo: version %d, %d tables", got.Version, len(got.Tables), want.Version, len(want.Tables))
	}
	for i, w := range want.Tables {
		g := got.Tables[i]
		if g.Name != w.Name || !reflect.DeepEqual(g.Columns, w.Columns) || g.PK != w.PK || !reflect.DeepEqual(g.Scopes, w.Scopes) {
			t.Fatalf("schema.json table %q differs from the demo's %q:\n%+v\n%+v", g.Name, w.Name, g, w)
		}
	}
}
