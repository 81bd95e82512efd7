package admin_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/synclane/synclane/internal/browsertest"

	"github.com/synclane/synclane/protocol/ssp2"
)

// The console against a real engine with real traffic, in headless
// Chromium: log in with the token, drill partition → client → row, see the
// row's history, and see a live event appear after a rejected push. The
// screenshot goes to the test's temp dir (and to
// $SYNCLANE_CONSOLE_SCREENSHOT when set, e.g. docs/admin-console.png).
func TestConsoleInBrowser(t *testing.T) {
	s := newServer(t, backends[1].open(t)) // SQLite
	s.push("acme", "ada", "laptop", "c1", "task-1", "roadmap", "Write the release notes")
	s.push("acme", "ada", "laptop", "c2", "task-2", "roadmap", "Ship 1.0")
	s.push("acme", "bob", "phone", "c3", "task-1", "roadmap", "Write the release notes (final)")
	s.push("globex", "cyd", "tablet", "c4", "g-1", "ops", "Rotate keys")
	for i := range 30 {
		s.push("acme", "importer", "batch-job", fmt.Sprint("bulk", i), fmt.Sprint("bulk-", i), "backlog", fmt.Sprint("Backlog item ", i))
	}

	bctx := browsertest.Start(t, 1500, 1000)
	p := browsertest.NewPage(t, bctx, 30*time.Second)
	fail, step, text, poll := p.Fail, p.Step, p.Text, p.Poll
	eval := func(what, expr string) bool { t.Helper(); return browsertest.Eval[bool](p, what, expr) }

	step("open the console and give the token",
		chromedp.Navigate(s.admin.URL+"/"),
		chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.SendKeys(chromedp.CSS("#token"), testToken),
		chromedp.Click(chromedp.CSS("#login button[type=submit]")),
		chromedp.WaitVisible(chromedp.CSS(`a.partition-link[href="#/p/acme"]`)),
	)
	poll("the event stream connects", `document.querySelector('#events-state').textContent === 'connected'`)
	step("drill into the partition",
		chromedp.Click(chromedp.CSS(`a.partition-link[href="#/p/acme"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#clients a.client-link[href="#/p/acme/c/phone"]`)),
	)
	page := text("partition page", "#page")
	for _, want := range []string{"Partition acme", "33", "laptop", "phone"} {
		if !strings.Contains(page, want) {
			t.Fatalf("partition page lacks %q:\n%s", want, page)
		}
	}
	step("the commits table pages",
		chromedp.WaitVisible(chromedp.CSS(`#commits button.next:not([disabled])`)),
		chromedp.Click(chromedp.CSS(`#commits button.next`)),
	)
	poll("page 2 of the commits", `document.querySelector('#commits .pager span').textContent.startsWith('page 2')`)
	step("drill into the client",
		chromedp.Click(chromedp.CSS(`#clients a.client-link[href="#/p/acme/c/phone"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#client-commits a.row-link[href="#/p/acme/row/tasks/task-1"]`)),
	)
	step("drill into the row",
		chromedp.Click(chromedp.CSS(`#client-commits a.row-link[href="#/p/acme/row/tasks/task-1"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#row-history`)),
	)
	page = text("row page", "#page")
	for _, want := range []string{"Row tasks/task-1", "Write the release notes (final)", "project_id=roadmap", "whole retained log"} {
		if !strings.Contains(page, want) {
			t.Fatalf("row page lacks %q:\n%s", want, page)
		}
	}
	poll("the row history lists both commits", `document.querySelectorAll('#row-history tbody tr').length === 2`)

	// A push the server rejects shows up in the live event tail.
	res, err := s.client("acme", "eve", "intruder").Push(context.Background(), &ssp2.PushCommit{ClientCommitID: "bad",
		Operations: []ssp2.Operation{{Table: "no_such_table", RowID: "x", Op: ssp2.OpDelete}}})
	if err != nil || res[0].Status != ssp2.CommitRejected {
		t.Fatalf("rejected push: %v %+v", err, res)
	}
	step("the rejection appears live", chromedp.WaitVisible(chromedp.CSS(`#events-body tr[data-kind="push.rejected"]`)))
	if ev := text("event row", `#events-body tr[data-kind="push.rejected"]`); !strings.Contains(ev, "sync.unknown_table") || !strings.Contains(ev, "eve") {
		t.Fatalf("event row %q", ev)
	}

	// A wrong token is refused in words and the login form comes back.
	eval("use a wrong token", `sessionStorage.setItem('synclane-admin-token', 'wrong-token-0123456789'); location.hash = '#/p/globex'; true`)
	step("the login form comes back", chromedp.WaitVisible(chromedp.CSS("#login")))
	if msg := text("error banner", "#error"); !strings.Contains(msg, "wrong admin token") {
		t.Fatalf("error banner %q", msg)
	}
	step("log in again",
		chromedp.SendKeys(chromedp.CSS("#token"), testToken),
		chromedp.Click(chromedp.CSS("#login button[type=submit]")),
	)
	eval("back to the row", `location.hash = '#/p/acme/row/tasks/task-1'; true`)
	step("the row and the event are shown",
		chromedp.WaitVisible(chromedp.CSS(`#row-history`)),
		chromedp.WaitVisible(chromedp.CSS(`#events-body tr[data-kind="push.rejected"]`)),
	)
	if !eval("no error banner", `document.querySelector('#error').hidden`) {
		t.Fatalf("the console shows an error: %s", text("error banner", "#error"))
	}
	sctx, scancel := context.WithTimeout(bctx, 30*time.Second)
	defer scancel()
	png, err := chromedp.Run(sctx, chromedp.FullScreenshot(100))
	if err != nil {
		fail("screenshot", err)
	}
	shot := filepath.Join(t.TempDir(), "console.png")
	if err := os.WriteFile(shot, png, 0o644); err != nil {
		t.Fatal(err)
	}
	if len(png) < 10_000 {
		t.Fatalf("screenshot of %d bytes", len(png))
	}
	t.Logf("screenshot: %s (%d bytes)", shot, len(png))
	if dst := os.Getenv("SYNCLANE_CONSOLE_SCREENSHOT"); dst != "" {
		if err := os.WriteFile(dst, png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
