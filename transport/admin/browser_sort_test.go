package admin_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/synclane/synclane/internal/browsertest"
)

// The console lists ids in natural order in headless Chromium: clients
// c1, c2, c10 (the API pages them in code point order: c1, c10, c2) and
// partitions p2 before p10.
func TestConsoleNaturalOrderInBrowser(t *testing.T) {
	s := newServer(t, backends[0].open(t)) // memory
	for i, c := range []string{"c10", "c2", "c1"} {
		s.push("p10", "ada", c, fmt.Sprint("x", i), fmt.Sprint("t", i), "P", "x")
	}
	s.push("p2", "ada", "c1", "y", "t", "P", "x")

	bctx := browsertest.Start(t, 1200, 900)
	p := browsertest.NewPage(t, bctx, 30*time.Second)
	order := func(what, css, want string) {
		t.Helper()
		if got := browsertest.Eval[string](p, what, `[...document.querySelectorAll('`+css+`')].map(a => a.textContent).join(',')`); got != want {
			t.Fatalf("%s: %q, want %q", what, got, want)
		}
	}
	p.Step("log in",
		chromedp.Navigate(s.admin.URL+"/"),
		chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.SendKeys(chromedp.CSS("#token"), testToken),
		chromedp.Click(chromedp.CSS("#login button[type=submit]")),
		chromedp.WaitVisible(chromedp.CSS(`a.partition-link[href="#/p/p10"]`)),
	)
	order("partitions", "#partitions a.partition-link", "p2,p10")
	p.Step("open the partition",
		chromedp.Click(chromedp.CSS(`a.partition-link[href="#/p/p10"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#clients a.client-link[href="#/p/p10/c/c10"]`)),
	)
	order("clients", "#clients a.client-link", "c1,c2,c10")
}
