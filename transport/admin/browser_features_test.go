package admin_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/synclane/synclane/internal/browsertest"

	"github.com/synclane/synclane/engine"
)

// The console's feature panels in headless Chromium: the overview's
// reactions card leads to the reactions table (a dead letter with its
// error), and a client's detail shows its auth lease and revokes it.
func TestConsoleFeaturePanelsInBrowser(t *testing.T) {
	res := &outageResolver{}
	s := newServerWith(t, backends[1].open(t), func(c *engine.Config) {
		failingReactions(c)
		res.base = c.Resolver
		c.Resolver = res
		c.Leases.TTL, c.Leases.Key = time.Hour, []byte("0123456789abcdef0123456789abcdef")
	})
	s.push("dead", "ada", "laptop", "d1", "t1", "P", "x")
	s.push("live", "bob", "phone", "r1", "t1", "P", "x")
	eventually(t, "one dead letter", func() bool {
		st, _ := s.eng.Reactions().Stats(context.Background())
		return st.Dead == 1
	})

	bctx := browsertest.Start(t, 1500, 1000)
	p := browsertest.NewPage(t, bctx, 30*time.Second)
	step, text := p.Step, p.Text
	eval := func(what, expr string) { t.Helper(); browsertest.Eval[bool](p, what, expr) }

	step("log in",
		chromedp.Navigate(s.admin.URL+"/"),
		chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.SendKeys(chromedp.CSS("#token"), testToken),
		chromedp.Click(chromedp.CSS("#login button[type=submit]")),
		chromedp.WaitVisible(chromedp.CSS("#reactions-link")),
	)
	step("open the reactions panel",
		chromedp.Click(chromedp.CSS("#reactions-link")),
		chromedp.WaitVisible(chromedp.CSS(`#reactions tr[data-state="dead"]`)),
	)
	if row := text("dead letter row", `#reactions tr[data-state="dead"]`); !strings.Contains(row, "smtp server unreachable") || !strings.Contains(row, "1 of 1") {
		t.Fatalf("dead letter row %q", row)
	}
	// The console asks before acting; the test answers yes.
	eval("answer dialogs", `window.confirm = () => true; window.alert = () => {}; true`)
	step("re-drive the dead letter", chromedp.Click(chromedp.CSS(`#reactions tr[data-state="dead"] button.redrive`)))
	eventually(t, "the re-driven reaction attempted and dead-lettered again", func() bool {
		st, _ := s.eng.Reactions().Stats(context.Background())
		return st.DeadLettered == 2 && st.Dead == 1
	})

	var before struct{ Lease struct{ LeaseID string } }
	s.ok("GET", "/api/partitions/live/clients/phone", &before)
	eval("open the client", `location.hash = '#/p/live/c/phone'; true`)
	step("the lease is shown", chromedp.WaitVisible(chromedp.CSS("#lease-id")))
	if id := text("lease id", "#lease-id"); id != before.Lease.LeaseID || id == "" {
		t.Fatalf("lease card shows %q, want %q", id, before.Lease.LeaseID)
	}
	eval("answer dialogs", `window.confirm = () => true; window.alert = () => {}; true`)
	step("revoke the lease", chromedp.Click(chromedp.CSS("#revoke-lease")))
	eventually(t, "the lease revoked in the store", func() bool {
		var after struct{ Lease struct{ RevokedAtMs int64 } }
		s.ok("GET", "/api/partitions/live/clients/phone", &after)
		return after.Lease.RevokedAtMs != 0
	})
	ctx, cancel := context.WithTimeout(bctx, 30*time.Second)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.querySelector('#page').textContent.includes('revoked')`,
		chromedp.WithPollingTimeout(25*time.Second))); err != nil {
		t.Fatalf("the client page does not say revoked: %v", err)
	}
}
