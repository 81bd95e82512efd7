// Package browsertest starts the machine's headless Chromium for the
// browser tests (the admin console, CORS). It is test support: nothing
// outside _test.go files imports it.
package browsertest

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// RequireEnv, set to 1, makes a missing Chromium fail the test instead of
// skipping it (.ci/run sets it).
const RequireEnv = "SYNCLANE_REQUIRE_BROWSER"

// Path returns the system Chromium (Debian's chromium package, or
// chromium-browser, google-chrome). Without one the test is skipped, or
// fails when RequireEnv is 1.
func Path(t testing.TB) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv(RequireEnv) == "1" {
		t.Fatal(RequireEnv + "=1 but no chromium on PATH (apt-get install chromium chromium-driver)")
	}
	t.Skip("no chromium on PATH: install it (apt-get install chromium chromium-driver; chromium-browser or google-chrome on PATH also do); " + RequireEnv + "=1 makes this a failure")
	return ""
}

// Start starts headless Chromium with a fresh profile in a temp dir and a
// window of width × height, and returns its browser context, already
// running. Derive a context with a timeout from it for each step (a
// timeout on the browser context itself would stop the browser). The
// browser stops when the test ends.
func Start(t testing.TB, width, height int) context.Context {
	t.Helper()
	exe := Path(t)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(exe), chromedp.Flag("headless", true), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true), chromedp.NoFirstRun, chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.Flag("no-default-browser-check", true), chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(width, height))
	bctx, cancelBrowser := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	t.Cleanup(func() { cancelBrowser(); cancelAlloc() })
	if err := chromedp.Do(bctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return bctx
}

// Page runs the steps of one browser test on a browser context from Start:
// each step gets Timeout, and a failed step fails the test with the page's
// text.
type Page struct {
	t       testing.TB
	ctx     context.Context
	Timeout time.Duration
}

// NewPage returns a Page on bctx (from Start) whose steps each get timeout.
func NewPage(t testing.TB, bctx context.Context, timeout time.Duration) *Page {
	return &Page{t: t, ctx: bctx, Timeout: timeout}
}

// Fail fails the test with what, err and the page's text.
func (p *Page) Fail(what string, err error) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 5*time.Second)
	defer cancel()
	body, _ := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("body")))
	p.t.Fatalf("%s: %v\npage text:\n%s", what, err, body)
}

// Step runs actions, failing the test (Fail) when they do not complete
// within the timeout.
func (p *Page) Step(what string, actions ...chromedp.Action[chromedp.Void]) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, p.Timeout)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		p.Fail(what, err)
	}
}

// Text returns the text of the first element matching css.
func (p *Page) Text(what, css string) string {
	p.t.Helper()
	return run(p, what, chromedp.Text(chromedp.CSS(css)))
}

// Poll waits until the JavaScript expression expr is true (for at most the
// timeout less 5 s).
func (p *Page) Poll(what, expr string) {
	p.t.Helper()
	run(p, what, chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(p.Timeout-5*time.Second)))
}

// Eval returns the value of the JavaScript expression expr on p's page.
func Eval[T any](p *Page, what, expr string) T {
	p.t.Helper()
	return run(p, what, chromedp.Evaluate[T](expr))
}

func run[T any](p *Page, what string, a chromedp.Action[T]) T {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, p.Timeout)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		p.Fail(what, err)
	}
	return v
}
