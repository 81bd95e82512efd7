package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/synclane/synclane/internal/browsertest"
)

// demoTab is one tab of the demo page in the test's Chromium.
type demoTab struct {
	name string
	*browsertest.Page
	ctx context.Context
}

func openDemoTab(t *testing.T, bctx context.Context, name, url string) *demoTab {
	t.Helper()
	ctx, cancel := chromedp.NewContext(bctx) // a tab of its own
	t.Cleanup(cancel)
	// The tab is created by the first run on its context: one without a
	// timeout, or the tab would close when the first step's timeout ends.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("%s: open a tab: %v", name, err)
	}
	tab := &demoTab{name: name, Page: browsertest.NewPage(t, ctx, 30*time.Second), ctx: ctx}
	tab.Step(name+": open the demo", chromedp.Navigate(url))
	tab.Poll(name+": live (socket open, bootstrapped)", `window.demo && demo.client.status.socket === 'open' && demo.client.cursor >= 0 && demo.client.pending() === 0`)
	return tab
}

// eval runs a statement on the tab.
func (d *demoTab) eval(what, js string) {
	browsertest.Eval[bool](d.Page, d.name+": "+what, "(() => { "+js+"; return true; })()")
}

// titleJS is the expression of the title input of the todo titled title.
func rowJS(title string) string {
	return fmt.Sprintf(`[...document.querySelectorAll('#todos li')].find(li => li.querySelector('input.title').value === %q)`, title)
}

// editTitle types a new title into the row's title input and commits it as
// a user would (the input's change event).
func (d *demoTab) editTitle(from, to string) {
	d.eval("edit title "+from, fmt.Sprintf(`const i = %s.querySelector('input.title'); i.value = %q; i.dispatchEvent(new Event('change'))`, rowJS(from), to))
}

// setOffline flips the page's "work offline" switch.
func (d *demoTab) setOffline(on bool) {
	d.eval("work offline", fmt.Sprintf(`const c = document.querySelector('#offline'); if (c.checked !== %t) c.click()`, on))
}

// emulateOffline takes the tab's network down (or back up) with Chromium's
// network emulation: requests and sockets fail, navigator.onLine follows.
func (d *demoTab) emulateOffline(t *testing.T, offline bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(d.ctx, 10*time.Second)
	defer cancel()
	thr := -1.0
	if _, err := chromedp.Call(ctx, network.EmulateNetworkConditionsByRule, network.EmulateNetworkConditionsByRuleParams{
		MatchedNetworkConditions: []*network.Conditions{{Offline: offline, DownloadThroughput: thr, UploadThroughput: thr}}}); err != nil {
		t.Fatalf("%s: emulate offline=%t: %v", d.name, offline, err)
	}
	if _, err := chromedp.Call(ctx, network.OverrideNetworkState, network.OverrideNetworkStateParams{
		Offline: offline, DownloadThroughput: thr, UploadThroughput: thr}); err != nil {
		t.Fatalf("%s: network state offline=%t: %v", d.name, offline, err)
	}
}

// The demo app of `synclane serve` in headless Chromium, two tabs on one
// server: a todo added in one appears in the other; edits of different
// columns of one todo made concurrently (both based on the same version)
// both land (wire v3 sparse pushes); edits of the same column show the
// conflict in the tab that lost; an edit made while the network is down
// (Chromium's emulation) is queued and lands after reconnecting.
func TestDemoInBrowser(t *testing.T) {
	base := startServe(t, "--data", t.TempDir())
	bctx := browsertest.Start(t, 900, 700)
	a := openDemoTab(t, bctx, "tab A", base+"/")
	b := openDemoTab(t, bctx, "tab B", base+"/")
	both := func(what, expr string) {
		t.Helper()
		a.Poll("tab A: "+what, expr)
		b.Poll("tab B: "+what, expr)
	}

	// Converge live: added in A, seen in B (the realtime socket wakes B).
	a.eval("add a todo", `document.querySelector('#new-title').value = 'Buy milk'; document.querySelector('#add').requestSubmit()`)
	both("the new todo is shown and synced", rowJS("Buy milk")+` && demo.client.pending() === 0 && demo.client.rows.size === 1`)

	// Disjoint columns, concurrently: both tabs edit from version 1 while
	// their network is off, then sync; title from A and done from B both land.
	a.setOffline(true)
	b.setOffline(true)
	a.editTitle("Buy milk", "Buy oat milk")
	b.eval("tick done", rowJS("Buy milk")+`.querySelector('input.done').click()`)
	a.Poll("tab A: one edit queued", `demo.client.pending() === 1 && demo.client.outbox[0].baseVersion === 1`)
	b.Poll("tab B: one edit queued", `demo.client.pending() === 1 && demo.client.outbox[0].baseVersion === 1`)
	a.setOffline(false)
	a.Poll("tab A: its title landed", `demo.client.pending() === 0`)
	b.setOffline(false)
	both("title from A and done from B", rowJS("Buy oat milk")+`?.classList.contains('done') && demo.client.pending() === 0 && demo.conflicts.length === 0 && [...demo.client.rows.values()][0].version === 3`)

	// The same column, concurrently: A lands first, B is told of the
	// conflict (conflictColumns: title) and converges on A's value.
	a.setOffline(true)
	b.setOffline(true)
	a.editTitle("Buy oat milk", "Buy soy milk")
	b.editTitle("Buy oat milk", "Buy rice milk")
	a.setOffline(false)
	a.Poll("tab A: its title landed", `demo.client.pending() === 0`)
	b.setOffline(false)
	b.Poll("tab B: the conflict is shown", `!document.querySelector('#conflicts').hidden &&
		document.querySelector('#conflict-list li').dataset.columns === 'title' &&
		document.querySelector('#conflict-list li').textContent.includes('Buy rice milk')`)
	both("both show the winning title", rowJS("Buy soy milk")+` && demo.client.pending() === 0`)

	// Offline for real: B's network goes down, an edit is queued, and it
	// lands in A once B is back online.
	b.emulateOffline(t, true)
	b.Poll("tab B: offline", `!navigator.onLine && document.querySelector('#status').textContent.startsWith('offline')`)
	b.editTitle("Buy soy milk", "Buy milk on the way home")
	b.Poll("tab B: the edit is queued", `demo.client.pending() === 1 && `+rowJS("Buy milk on the way home")+`.classList.contains('pending')`)
	b.emulateOffline(t, false)
	both("the offline edit landed", rowJS("Buy milk on the way home")+` && demo.client.pending() === 0`)
	b.Poll("tab B: live again", `demo.client.status.socket === 'open'`)

	if os.Getenv(updateScreenshots) == "1" {
		a.eval("add todos for the picture", `for (const s of ['Water the plants', 'Call the plumber']) { document.querySelector('#new-title').value = s; document.querySelector('#add').requestSubmit() }`)
		b.Poll("tab B: three todos", `document.querySelectorAll('#todos li').length === 3 && demo.client.pending() === 0`)
		ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
		defer cancel()
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join("..", "..", "docs", "demo.png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote docs/demo.png (%d bytes)", len(png))
	}
}

// updateScreenshots makes TestDemoInBrowser rewrite docs/demo.png (CI
// leaves it alone).
const updateScreenshots = "SYNCLANE_UPDATE_SCREENSHOTS"

// The demo app is served at / only with development authentication and
// the built-in schema, and --demo=false turns it off; its assets carry the
// page's client.
func TestDemoServedOnlyInDevelopment(t *testing.T) {
	secret := strings.Repeat("s", 32)
	for _, tc := range []struct {
		name  string
		flags []string
		want  int
	}{
		{"default", nil, http.StatusOK},
		{"--demo=false", []string{"--demo=false"}, http.StatusNotFound},
		{"--jwt-secret", []string{"--jwt-secret", secret}, http.StatusNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := startServe(t, append([]string{"--data", t.TempDir()}, tc.flags...)...)
			for _, path := range []string{"/", "/demo/client.js"} {
				res, err := http.Get(base + path)
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(res.Body)
				res.Body.Close()
				if res.StatusCode != tc.want {
					t.Errorf("GET %s: %d, want %d", path, res.StatusCode, tc.want)
				}
				if tc.want == http.StatusOK && !strings.Contains(string(body), map[string]string{"/": "An example, not a product", "/demo/client.js": "class SyncClient"}[path]) {
					t.Errorf("GET %s: unexpected body %.200s", path, body)
				}
			}
		})
	}
}
