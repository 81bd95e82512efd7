package admin_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// The console's natural order (console/natsort.js: "c2" before "c10")
// under Node.js (testdata/natsort_test.mjs). Skipped without node, or
// failed with SYNCLANE_REQUIRE_INTEROP=1 (the browser test checks the
// order on the page too).
func TestConsoleNaturalSort(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		if os.Getenv("SYNCLANE_REQUIRE_INTEROP") == "1" {
			t.Fatalf("SYNCLANE_REQUIRE_INTEROP=1: node not found: %v", err)
		}
		t.Skipf("node not found (SYNCLANE_REQUIRE_INTEROP=1 makes this a failure): %v", err)
	}
	out, err := exec.Command(node, filepath.Join("testdata", "natsort_test.mjs")).CombinedOutput()
	t.Logf("node testdata/natsort_test.mjs:\n%s", out)
	if err != nil {
		t.Fatalf("natural order is wrong: %v", err)
	}
}
