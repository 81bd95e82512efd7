// Package browsertest starts the machine's headless Chromium for the
// browser tests (the admin console, CORS). It is test support: nothing
// outside _test.go files imports it.
package browsertest

import (
	"context"
	"os"
	"os/exec"
	"testing"

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
	t.Skip("no chromium on PATH (apt-get install chromium chromium-driver; " + RequireEnv + "=1 makes this a failure)")
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
