package admin_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/synclane/synclane/internal/browsertest"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/engine/blobs"
	"github.com/synclane/synclane/storage/blobstore"
)

// updateScreenshots makes TestConsoleLiveInBrowser rewrite the console's
// screenshots in docs/ (CI leaves them alone).
const updateScreenshots = "SYNCLANE_UPDATE_SCREENSHOTS"

// The overview in headless Chromium: sections are tables holding the real
// values, the request chart has points once there was traffic, counters
// update without a reload, counts are spelled right, a failing refresh
// marks the figures stale until the API answers again, and a page that
// fails to load shows nothing of the previous one.
func TestConsoleLiveInBrowser(t *testing.T) {
	s := newServerWith(t, backends[1].open(t), func(c *engine.Config) {
		fs, err := blobstore.NewFS(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		c.Blobs = blobs.Options{Store: fs, MaxBytes: 1 << 20}
	})
	s.push("acme", "ada", "laptop", "c1", "task-1", "roadmap", "Write the release notes")
	s.push("acme", "bob", "phone", "c2", "task-2", "roadmap", "Ship 1.0")
	s.push("globex", "cyd", "tablet", "c3", "g-1", "ops", "Rotate keys")

	bctx := browsertest.Start(t, 1500, 1100)
	p := browsertest.NewPage(t, bctx, 20*time.Second)
	fail, step, poll := p.Fail, p.Step, p.Poll
	eval := func(what, expr string) string { t.Helper(); return browsertest.Eval[string](p, what, expr) }

	step("log in",
		chromedp.Navigate(s.admin.URL+"/"),
		chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.SendKeys(chromedp.CSS("#token"), testToken),
		chromedp.Click(chromedp.CSS("#login button[type=submit]")),
		chromedp.WaitVisible(chromedp.CSS("#chart-rate")),
		chromedp.WaitVisible(chromedp.CSS(`a.partition-link[href="#/p/acme"]`)),
	)

	// Sections are tables of their values, not JSON dumps.
	for _, c := range []struct{ css, want string }{
		{`[data-section="test-section"] tr[data-key="answer"] td`, "42"},
		{`[data-section="blobs"] tr[data-key="maxBlobBytes"] td`, "1.0 MiB"},
		{`[data-section="blobs"] tr[data-key="counters"] tr[data-key="uploads"] td`, "0"},
	} {
		if got := eval("section cell "+c.css, fmt.Sprintf(`document.querySelector(%q)?.textContent ?? 'missing'`, c.css)); got != c.want {
			t.Errorf("%s: %q, want %q", c.css, got, c.want)
		}
	}
	if n := eval("pre blocks", `String(document.querySelectorAll('#page pre').length)`); n != "0" {
		t.Errorf("%s JSON dumps (pre) on the overview", n)
	}

	// Counts are spelled right (no "0 passs", "2 entrys").
	text := eval("page text", `document.querySelector('#page').innerText`)
	for _, want := range []string{"0 sweep passes", "page 1 · 2 entries", "3 commits applied"} {
		if !strings.Contains(text, want) {
			t.Errorf("overview lacks %q", want)
		}
	}
	if bad := regexp.MustCompile(`\b\w*(sss|[^aeiou\W]ys)\b`).FindString(text); bad != "" {
		t.Errorf("overview misspells a plural: %q", bad)
	}

	// The chart has points for the traffic so far.
	count := func() int {
		n, err := strconv.Atoi(strings.ReplaceAll(eval("requests count", `document.querySelector('#requests-count').textContent`), ",", ""))
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := count()
	poll("the chart has latency points", `Number(document.querySelector('#chart-latency path.p50').dataset.points) >= 1 &&
		Number(document.querySelector('#chart .chart-box').dataset.requests) >= 3 &&
		document.querySelectorAll('#chart-rate path.requests').length === 1`)

	// Counters and the chart follow new traffic without a reload.
	eval("mark the document", `window.__sameDocument = 'yes'; 'ok'`)
	for i := range 12 {
		s.push("acme", "ada", "laptop", fmt.Sprint("more", i), fmt.Sprint("task-m", i), "roadmap", "More work")
	}
	poll("the requests card counts the new pushes", fmt.Sprintf(`Number(document.querySelector('#requests-count').textContent.replace(/,/g, '')) >= %d`, before+12))
	poll("the chart counts them", fmt.Sprintf(`Number(document.querySelector('#chart .chart-box').dataset.requests) >= %d`, before+12))
	if v := eval("same document", `window.__sameDocument || 'reloaded'`); v != "yes" {
		t.Fatalf("the page reloaded (%s)", v)
	}
	if !strings.Contains(eval("commits", `document.querySelector('#overview-cards').innerText`), "15 commits applied") {
		t.Errorf("requests card: %s", eval("cards", `document.querySelector('#overview-cards').innerText`))
	}

	if os.Getenv(updateScreenshots) == "1" {
		// Some seconds of paced traffic, with a few refused requests, so
		// the chart has a shape (only when rewriting the screenshots).
		tick := time.NewTicker(40 * time.Millisecond)
		for i := range 300 {
			<-tick.C
			s.push("acme", "ada", "laptop", fmt.Sprint("shot", i), fmt.Sprint("task-s", i%20), "roadmap", "Screenshot traffic")
			if i%25 == 0 {
				if res, err := http.Post(s.syncURL, "text/plain", nil); err == nil {
					res.Body.Close()
				}
			}
		}
		tick.Stop()
		poll("the overview refreshed after the traffic", `Number(document.querySelector('#requests-count').textContent.replace(/,/g, '')) >= 300`)
		shot := func(name string, a chromedp.Action[[]byte]) {
			ctx, cancel := context.WithTimeout(bctx, 20*time.Second)
			defer cancel()
			png, err := chromedp.Run(ctx, a)
			if err != nil {
				fail("screenshot "+name, err)
			}
			if err := os.WriteFile(filepath.Join("..", "..", "docs", name), png, 0o644); err != nil {
				t.Fatal(err)
			}
			t.Logf("wrote docs/%s (%d bytes)", name, len(png))
		}
		shot("admin-console.png", chromedp.FullScreenshot(100))
		// The chart of the last 5 minutes, one point a second.
		eval("chart window", `(() => { const sel = document.querySelector('#chart-window'); sel.value = '300'; sel.dispatchEvent(new Event('change')); return 'ok'; })()`)
		poll("the 5-minute chart", `document.querySelectorAll('#chart-rate path.requests').length === 1 && document.querySelector('#chart .chart-box p').textContent.includes('5.0 min')`)
		shot("admin-console-chart.png", chromedp.Screenshot(chromedp.CSS("#chart")))
		eval("chart window", `(() => { const sel = document.querySelector('#chart-window'); sel.value = '3600'; sel.dispatchEvent(new Event('change')); return 'ok'; })()`)
	}

	// A failing refresh keeps the figures but says they are stale, until a
	// refresh succeeds again.
	s.failAPI.Store(true)
	poll("the banner says the figures are stale", `!document.querySelector('#error').hidden &&
		document.querySelector('#error').textContent.includes('Refresh failed') &&
		document.querySelector('#error').textContent.includes('stale') &&
		document.querySelector('#error').textContent.includes('the store is down (test)') &&
		document.querySelector('#page').classList.contains('stale') &&
		document.querySelector('#requests-count') !== null`)
	s.failAPI.Store(false)
	poll("the banner goes once a refresh succeeds", `document.querySelector('#error').hidden && !document.querySelector('#page').classList.contains('stale')`)

	// A page that fails to load shows the error and nothing of the
	// previous page.
	s.failAPI.Store(true)
	eval("open a partition", `location.hash = '#/p/acme'; 'ok'`)
	poll("the failed page is cleared", `document.querySelector('#load-failed') !== null &&
		document.querySelector('#overview-cards') === null && document.querySelector('#chart') === null &&
		!document.querySelector('#error').hidden && document.querySelector('#error').textContent.includes('the store is down (test)')`)
	s.failAPI.Store(false)
	step("try again", chromedp.Click(chromedp.CSS("#load-failed button")),
		chromedp.WaitVisible(chromedp.CSS(`#clients a.client-link[href="#/p/acme/c/phone"]`)))
	poll("the banner is gone", `document.querySelector('#error').hidden`)
}
