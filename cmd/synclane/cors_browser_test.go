package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/synclane/synclane/internal/browsertest"

	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/transport/httpsync"
)

// corsPage is the script of the test pages: run() pushes, pulls (binary
// SSP2 bodies built by the test, base64 in the page) and opens the
// realtime socket, and resolves to what the page could read of each.
const corsPage = `<!doctype html><meta charset="utf-8"><title>cors</title><script>
const cfg = %s;
const unb64 = s => Uint8Array.from(atob(s), c => c.charCodeAt(0));
const b64 = u => { let s = ""; for (const b of u) s += String.fromCharCode(b); return btoa(s); };
async function post(body) {
  try {
    const res = await fetch(cfg.base + "/sync", {method: "POST", body: unb64(body),
      headers: {"Content-Type": "application/vnd.syncular.sync.v2", "X-Actor": "ada", "X-Request-Id": cfg.rid}});
    return {status: res.status, requestId: res.headers.get("X-Request-Id") || "", body: b64(new Uint8Array(await res.arrayBuffer()))};
  } catch (e) { return {error: String(e)}; }
}
function socket() {
  return new Promise(resolve => {
    const ws = new WebSocket(cfg.ws + "/realtime?clientId=" + cfg.client + "&actor=ada");
    const timer = setTimeout(() => { ws.close(); resolve({error: "no message in 5s"}); }, 5000);
    ws.onmessage = ev => { clearTimeout(timer); ws.close(); resolve({message: String(ev.data)}); };
    ws.onclose = ev => { clearTimeout(timer); resolve({error: "closed " + ev.code}); };
  });
}
async function run() {
  const push = await post(cfg.push);
  const pull = await post(cfg.pull);
  const ws = await socket();
  return JSON.stringify({push, pull, ws});
}
</script><p>cors test page</p>`

type pageFetch struct {
	Status    int    `json:"status"`
	RequestID string `json:"requestId"`
	Body      string `json:"body"`
	Error     string `json:"error"`
}

type pageResult struct {
	Push, Pull pageFetch
	WS         struct {
		Message string `json:"message"`
		Error   string `json:"error"`
	} `json:"ws"`
}

// A page on an origin listed in --cors-origin pushes, pulls and opens the
// realtime socket of a synclane on another origin (another port) in
// headless Chromium; the same page on an origin not listed is refused all
// three by the browser (the preflight and the upgrade are refused), and
// its push never reaches the engine.
func TestCORSInBrowser(t *testing.T) {
	var allowedHTML, blockedHTML atomic.Value
	page := func(v *atomic.Value) *httptest.Server {
		return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			_, _ = w.Write([]byte(v.Load().(string)))
		}))
	}
	allowedPage, blockedPage := page(&allowedHTML), page(&blockedHTML)
	defer allowedPage.Close()
	defer blockedPage.Close()
	base := startServe(t, "--data", t.TempDir(), "--cors-origin", allowedPage.URL)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	hdr := http.Header{"X-Actor": {"ada"}}
	hs := &httpsync.Client{URL: base + "/sync", ClientID: "probe", Header: hdr}
	if err := hs.Handshake(ctx); err != nil {
		t.Fatal(err)
	}
	codec := ssp2.NewRowCodec(schema.MustDemo().Table("todos").Columns)
	request := func(client string, frames ...ssp2.Frame) string {
		epoch := hs.Epoch
		msg := &ssp2.Message{WireVersion: ssp2.WireV3, Kind: ssp2.KindRequest,
			Frames: append([]ssp2.Frame{&ssp2.ReqHeader{ClientID: client, SchemaVersion: 1, LogEpoch: &epoch}}, frames...)}
		b, err := ssp2.Encode(msg)
		if err != nil {
			t.Fatal(err)
		}
		return base64.StdEncoding.EncodeToString(b)
	}
	pushOf := func(client, commit, rowID, title string) string {
		row, err := codec.AppendSparse(nil, ssp2.Row{rowID, "l1", title, false, int64(1), int64(1)}, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		return request(client, &ssp2.PushCommit{ClientCommitID: commit,
			Operations: []ssp2.Operation{{Table: "todos", RowID: rowID, Op: ssp2.OpUpsert, Payload: row}}})
	}
	pullOf := func(client string) string {
		return request(client, &ssp2.PullHeader{Accept: ssp2.AcceptInlineRows},
			&ssp2.Subscription{ID: "s", Table: "todos", Scopes: map[string][]string{"list_id": {"l1"}}, Cursor: -1})
	}
	html := func(client, rid, push string) string {
		cfg := fmt.Sprintf(`{"base":%q,"ws":%q,"client":%q,"rid":%q,"push":%q,"pull":%q}`,
			base, "ws"+strings.TrimPrefix(base, "http"), client, rid, push, pullOf(client))
		return fmt.Sprintf(corsPage, cfg)
	}
	allowedHTML.Store(html("web", "page-allowed-1", pushOf("web", "c-allowed", "t-allowed", "written from the allowed page")))
	blockedHTML.Store(html("evil", "page-blocked-1", pushOf("evil", "c-blocked", "t-blocked", "written from the blocked page")))

	bctx := browsertest.Start(t, 1280, 800)
	runPage := func(url string) pageResult {
		t.Helper()
		sctx, cancel := context.WithTimeout(bctx, 15*time.Second)
		defer cancel()
		if err := chromedp.Do(sctx, chromedp.Navigate(url)); err != nil {
			t.Fatalf("page %s: %v", url, err)
		}
		out, err := chromedp.Run(sctx, chromedp.Evaluate[string](`run()`, chromedp.EvalAwaitPromise))
		if err != nil {
			t.Fatalf("page %s: %v", url, err)
		}
		var res pageResult
		if err := json.Unmarshal([]byte(out), &res); err != nil {
			t.Fatalf("page result %q: %v", out, err)
		}
		return res
	}
	decode := func(what string, f pageFetch) *ssp2.Message {
		t.Helper()
		if f.Error != "" || f.Status != http.StatusOK {
			t.Fatalf("%s from the allowed page: status %d, error %q", what, f.Status, f.Error)
		}
		if f.RequestID != "page-allowed-1" {
			t.Errorf("%s: the page read X-Request-Id %q, want the echo of page-allowed-1 (exposed)", what, f.RequestID)
		}
		b, err := base64.StdEncoding.DecodeString(f.Body)
		if err != nil {
			t.Fatal(err)
		}
		m, err := ssp2.DecodeResponse(b)
		if err != nil {
			t.Fatalf("%s: the page read %d bytes that do not decode: %v", what, len(b), err)
		}
		return m
	}

	ok := runPage(allowedPage.URL)
	prs := httpsync.PushResults(decode("push", ok.Push))
	if len(prs) != 1 || prs[0].ClientCommitID != "c-allowed" || prs[0].Status != ssp2.CommitApplied {
		t.Fatalf("push from the allowed page: results %+v, want c-allowed applied", prs)
	}
	pull := decode("pull", ok.Pull)
	pullBytes, _ := base64.StdEncoding.DecodeString(ok.Pull.Body)
	for _, f := range pull.Frames {
		if ef, isErr := f.(*ssp2.ErrorFrame); isErr {
			t.Fatalf("pull from the allowed page: error frame %+v", ef)
		}
	}
	if !bytes.Contains(pullBytes, []byte("written from the allowed page")) {
		t.Errorf("the pull the allowed page read (%d bytes) lacks the row it pushed", len(pullBytes))
	}
	if !strings.Contains(ok.WS.Message, `"event":"hello"`) || !strings.Contains(ok.WS.Message, `"clientId":"web"`) {
		t.Errorf("realtime from the allowed page: message %q, error %q; want the hello", ok.WS.Message, ok.WS.Error)
	}

	bad := runPage(blockedPage.URL)
	if bad.Push.Error == "" || bad.Pull.Error == "" {
		t.Errorf("the blocked page read its push (status %d) or pull (status %d); want both refused by the browser", bad.Push.Status, bad.Pull.Status)
	}
	if bad.WS.Message != "" || bad.WS.Error == "" {
		t.Errorf("realtime from the blocked page: message %q, error %q; want the upgrade refused", bad.WS.Message, bad.WS.Error)
	}
	// The blocked page's push never ran: its preflight was refused.
	body, _ := base64.StdEncoding.DecodeString(pullOf("probe"))
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/sync", bytes.NewReader(body))
	req.Header.Set("Content-Type", httpsync.ContentType)
	req.Header.Set("X-Actor", "ada")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK || bytes.Contains(raw, []byte("written from the blocked page")) || !bytes.Contains(raw, []byte("written from the allowed page")) {
		t.Errorf("after both pages (pull status %d), the table holds the blocked page's row or lacks the allowed page's", res.StatusCode)
	}
}
