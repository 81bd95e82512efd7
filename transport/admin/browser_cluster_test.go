package admin_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/synclane/synclane/internal/browsertest"
)

// The console in cluster mode, in headless Chromium: the header links the
// cluster page; the partition list says "owned by member B" for B's
// partitions (never "passivated"), and so does B's partition page; the
// cluster page lists the three members (B answering with its counters, C
// not), this member's health and owned partitions, and refreshes itself
// (a lost lease shows as unhealthy without a reload). A single-process
// console has no cluster link.
func TestConsoleClusterInBrowser(t *testing.T) {
	cs := newClusterServer(t)
	pb := cs.ownedBy(t, memberB)
	pa := cs.ownedBy(t, memberA)

	bctx := browsertest.Start(t, 1500, 1000)
	p := browsertest.NewPage(t, bctx, 30*time.Second)
	step, text, poll := p.Step, p.Text, p.Poll
	contains := func(what, got string, want ...string) {
		t.Helper()
		for _, w := range want {
			if !strings.Contains(got, w) {
				t.Fatalf("%s lacks %q:\n%s", what, w, got)
			}
		}
	}

	step("log in",
		chromedp.Navigate(cs.admin.URL+"/"),
		chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.SendKeys(chromedp.CSS("#token"), testToken),
		chromedp.Click(chromedp.CSS("#login button[type=submit]")),
		chromedp.WaitVisible(chromedp.CSS(`a.partition-link[href="#/p/`+pb+`"]`)),
		chromedp.WaitVisible(chromedp.CSS("#cluster-link")),
	)
	rowOf := func(part string) string {
		return text("partition row "+part, `#partitions tr:has(a.partition-link[href="#/p/`+part+`"])`)
	}
	contains("B's partition row", rowOf(pb), "owned by member "+memberB)
	if r := rowOf(pb); strings.Contains(r, "passivated") {
		t.Fatalf("B's partition row says passivated: %s", r)
	}
	if r := rowOf(pa); strings.Contains(r, "owned by") || !(strings.Contains(r, "live") || strings.Contains(r, "passivated")) {
		t.Fatalf("A's partition row %q, want live or passivated", r)
	}

	step("open B's partition",
		chromedp.Click(chromedp.CSS(`a.partition-link[href="#/p/`+pb+`"]`)),
		chromedp.WaitVisible(chromedp.CSS("#partition-owner")),
	)
	contains("B's partition owner card", text("owner card", "#partition-owner"), "member "+memberB)

	step("the owner leads to the cluster page",
		chromedp.Click(chromedp.CSS(`#partition-owner a.member-link`)),
		chromedp.WaitVisible(chromedp.CSS(`#cluster-members tr[data-member="`+memberC+`"]`)),
	)
	contains("cluster cards", text("cards", "#cluster-cards"), memberA, "healthy", "Partitions owned")
	owned := 0
	for _, o := range cs.owners {
		if o == memberA {
			owned++
		}
	}
	if got := text("owned count", "#owned-count"); got != strconv.Itoa(owned) {
		t.Fatalf("owned count %q, want %d", got, owned)
	}
	contains("owned list", text("owned list", "#owned-list"), pa)
	contains("A's row", text("A", `#cluster-members tr[data-member="`+memberA+`"]`), "this member", "inc-a", "yes", "healthy", "same")
	contains("B's row", text("B", `#cluster-members tr[data-member="`+memberB+`"]`), "yes", "healthy", "7", "3")
	contains("C's row", text("C", `#cluster-members tr[data-member="`+memberC+`"]`), "no", "connection refused")
	contains("calls", text("calls", `#cluster-calls tr[data-member="`+memberB+`"]`), "7 / 3")

	cs.view.set(false, memberA, memberB, memberC)
	poll("the page refreshes to unhealthy", `document.querySelector('#cluster-health').textContent === 'unhealthy'`)

	single := newServer(t, backends[0].open(t))
	step("a single-process console",
		chromedp.Navigate(single.admin.URL+"/"),
		chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.SendKeys(chromedp.CSS("#token"), testToken),
		chromedp.Click(chromedp.CSS("#login button[type=submit]")),
		chromedp.WaitVisible(chromedp.CSS("#overview-cards")),
	)
	poll("no cluster link", `document.querySelector('#cluster-link').hidden === true`)
}
