package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/synclane/synclane/protocol/ssp2"
)

// readmeBlock is one fenced code block of README's walkthrough.
type readmeBlock struct {
	lang   string
	text   string
	output bool // preceded by <!-- output -->: what the sh block before it prints
}

// walkthroughBlocks returns the code blocks of README's section "A pull and
// a push", in order.
func walkthroughBlocks(t *testing.T, readme string) []readmeBlock {
	t.Helper()
	_, sec, ok := strings.Cut(readme, "\n## A pull and a push\n")
	if !ok {
		t.Fatal(`README has no section "A pull and a push"`)
	}
	sec, _, _ = strings.Cut(sec, "\n## ")
	var blocks []readmeBlock
	var cur *readmeBlock
	marked := false
	for _, line := range strings.Split(sec, "\n") {
		switch {
		case cur == nil && strings.HasPrefix(line, "```"):
			cur = &readmeBlock{lang: strings.TrimPrefix(line, "```"), output: marked}
			marked = false
		case cur != nil && line == "```":
			blocks = append(blocks, *cur)
			cur = nil
		case cur != nil:
			cur.text += line + "\n"
		case strings.TrimSpace(line) == "<!-- output -->":
			marked = true
		case strings.TrimSpace(line) != "":
			marked = false
		}
	}
	if cur != nil {
		t.Fatal("README's walkthrough has an unclosed code block")
	}
	return blocks
}

// normalizeAnswer parses a JSON answer and zeroes what differs from run to
// run: every createdAtMs (the commit's clock time).
func normalizeAnswer(t *testing.T, what string, b []byte) any {
	t.Helper()
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("%s is not JSON: %v\n%s", what, err, b)
	}
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, e := range v {
				if k == "createdAtMs" {
					v[k] = 0.0
				}
				walk(e)
			}
		case []any:
			for _, e := range v {
				walk(e)
			}
		}
	}
	walk(v)
	return v
}

// TestReadmeWalkthrough runs the shell commands of README's "A pull and a
// push" (wire version 3: a handshake, an insert with a bootstrap, a sparse
// patch of one column, a pull of it, a per-column conflict, a refusal)
// with bash and curl against `synclane serve` on a fresh data directory,
// and compares what each prints with the answer README shows after it. Substituted: the built ssp2 binary for `go run ./cmd/ssp2`,
// the server's address for 127.0.0.1:8787, and the server's log epoch for
// the one README shows; createdAtMs values are not compared.
func TestReadmeWalkthrough(t *testing.T) {
	curl, err := exec.LookPath("curl")
	if err != nil {
		if os.Getenv("SYNCLANE_REQUIRE_CURL") == "1" {
			t.Fatal("curl not found and SYNCLANE_REQUIRE_CURL=1")
		}
		t.Skip("curl not found on PATH: install it (apt-get install curl); SYNCLANE_REQUIRE_CURL=1 makes this a failure")
	}
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Fatal(err)
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks := walkthroughBlocks(t, string(readme))

	// The commands and the answers shown after each.
	type step struct{ cmd, want, lang string }
	var steps []step
	for _, b := range blocks {
		switch {
		case b.lang == "sh":
			steps = append(steps, step{cmd: b.text})
		case b.output:
			if len(steps) == 0 || steps[len(steps)-1].want != "" {
				t.Fatalf("README output block without its own sh block before it:\n%s", b.text)
			}
			steps[len(steps)-1].want, steps[len(steps)-1].lang = b.text, b.lang
		case b.lang == "json":
			// A file's contents: it must be one of examples/curl's.
			if !readmeShowsExampleFile(t, root, b.text) {
				t.Errorf("README shows a rendering that is no file of examples/curl:\n%s", b.text)
			}
		}
	}
	if len(steps) < 6 {
		t.Fatalf("README's walkthrough has %d command blocks, want at least 6 (handshake, push, patch, pull, conflict, refusal)", len(steps))
	}
	for i, s := range steps {
		if s.want == "" {
			t.Fatalf("command block %d has no <!-- output --> block after it:\n%s", i+1, s.cmd)
		}
	}

	ssp2Bin := filepath.Join(t.TempDir(), "ssp2")
	if out, err := exec.Command("go", "build", "-o", ssp2Bin, "../ssp2").CombinedOutput(); err != nil {
		t.Fatalf("go build ../ssp2: %v\n%s", err, out)
	}
	p := startProc(t, "--data", t.TempDir())
	epoch := serverEpoch(t, root, p.base)
	const readmeEpoch = "233744c53b4780aa7cfca43aa0b81564"

	// The commands run in a scratch directory that sees the repository's
	// examples/; they write their request bytes to a mktemp directory, not
	// to the directory they run in.
	work := t.TempDir()
	if err := os.Symlink(filepath.Join(root, "examples"), filepath.Join(work, "examples")); err != nil {
		t.Fatal(err)
	}
	var script strings.Builder
	script.WriteString("set -euo pipefail\n")
	for i, s := range steps {
		cmd := s.cmd
		for _, sub := range [][2]string{{"go run ./cmd/ssp2", strconv.Quote(ssp2Bin)}, {"http://127.0.0.1:8787", p.base}, {readmeEpoch, epoch}} {
			cmd = strings.ReplaceAll(cmd, sub[0], sub[1])
		}
		if !strings.Contains(cmd, p.base) {
			t.Fatalf("command block %d does not call the server at 127.0.0.1:8787:\n%s", i+1, s.cmd)
		}
		// Braces, not a subshell: a variable one block sets ($epoch) is
		// there for the next.
		script.WriteString("{\n" + cmd + "} >" + strconv.Quote(filepath.Join(work, "out."+strconv.Itoa(i))) + "\n")
	}
	cmd := exec.Command(bash, "-c", script.String())
	cmd.Dir = work
	cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(curl)+string(os.PathListSeparator)+os.Getenv("PATH"))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("README's commands failed: %v\n%s\nscript:\n%s", err, out, script.String())
	} else if len(out) != 0 {
		t.Fatalf("README's commands wrote to stderr:\n%s", out)
	}

	if bins, _ := filepath.Glob(filepath.Join(work, "*.bin")); len(bins) != 0 {
		t.Errorf("README's commands wrote %v into the directory they ran in; they belong in mktemp's", bins)
	}
	for i, s := range steps {
		got, err := os.ReadFile(filepath.Join(work, "out."+strconv.Itoa(i)))
		if err != nil {
			t.Fatal(err)
		}
		want := strings.ReplaceAll(s.want, readmeEpoch, epoch)
		if s.lang == "json" {
			if g, w := normalizeAnswer(t, "the answer", got), normalizeAnswer(t, "README's answer", []byte(want)); !reflect.DeepEqual(g, w) {
				t.Errorf("command block %d printed an answer other than README's:\n%s\nREADME shows:\n%s", i+1, got, s.want)
			}
			continue
		}
		if strings.TrimRight(string(got), "\n") != strings.TrimRight(want, "\n") {
			t.Errorf("command block %d printed:\n%s\nREADME shows:\n%s", i+1, got, s.want)
		}
	}
}

// readmeShowsExampleFile reports whether text is, as JSON, one of the
// renderings under examples/curl.
func readmeShowsExampleFile(t *testing.T, root, text string) bool {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(root, "examples", "curl", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples/curl/*.json: %v", err)
	}
	shown := normalizeAnswer(t, "README's rendering", []byte(text))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if reflect.DeepEqual(normalizeAnswer(t, f, b), shown) {
			return true
		}
	}
	return false
}

// serverEpoch asks the server for its log epoch with README's first pull.
func serverEpoch(t *testing.T, root, base string) string {
	t.Helper()
	rendering, err := os.ReadFile(filepath.Join(root, "examples", "curl", "pull.json"))
	if err != nil {
		t.Fatal(err)
	}
	m, err := ssp2.ParseJSON(rendering)
	if err != nil {
		t.Fatal(err)
	}
	body, err := ssp2.Encode(m)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPost, base+"/sync", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/vnd.syncular.sync.v2")
	req.Header.Set("X-Actor", "ada")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	r, err := ssp2.DecodeResponse(b)
	if err != nil {
		t.Fatalf("handshake: HTTP %d: %v", res.StatusCode, err)
	}
	h, ok := r.Frames[0].(*ssp2.RespHeader)
	if !ok || len(h.LogEpoch) != 32 {
		t.Fatalf("handshake: %+v", r.Frames)
	}
	return h.LogEpoch
}
