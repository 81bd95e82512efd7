package demo

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/synclane/synclane/protocol/ssp2/ssp2test"
)

// The page's codec (static/ssp2.js) against the wire-version-3 golden
// vectors, under Node.js (static/ssp2_test.mjs): requests and sparse push
// rows encode to the vectors' bytes, responses decode to their frames.
// Skipped without node, or failed with SYNCLANE_REQUIRE_INTEROP=1; without
// the vectors, as every vector test (SSP2_VECTORS_V3).
func TestClientCodecVectors(t *testing.T) {
	dir := ssp2test.VectorsV3Dir(t)
	node, err := exec.LookPath("node")
	if err != nil {
		if os.Getenv("SYNCLANE_REQUIRE_INTEROP") == "1" {
			t.Fatalf("SYNCLANE_REQUIRE_INTEROP=1: node not found: %v", err)
		}
		t.Skipf("node not found (SYNCLANE_REQUIRE_INTEROP=1 makes this a failure): %v", err)
	}
	out, err := exec.Command(node, filepath.Join("static", "ssp2_test.mjs"), dir).CombinedOutput()
	t.Logf("node static/ssp2_test.mjs:\n%s", out)
	if err != nil {
		t.Fatalf("the JS codec disagrees with the vectors: %v", err)
	}
}
