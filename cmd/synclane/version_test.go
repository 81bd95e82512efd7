package main

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

func TestReadBuildVersion(t *testing.T) {
	stamped := &debug.BuildInfo{GoVersion: "go1.26.1", Main: debug.Module{Path: "github.com/synclane/synclane", Version: "v0.4.0"},
		Settings: []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: "0123abcd"},
			{Key: "vcs.time", Value: "2026-11-30T10:00:00Z"}, {Key: "vcs.modified", Value: "true"}, {Key: "-trimpath", Value: "true"}}}
	for _, tc := range []struct {
		name     string
		bi       *debug.BuildInfo
		ok       bool
		override string
		want     buildVersion
	}{
		{"stamped", stamped, true, "dev", buildVersion{"v0.4.0", "0123abcd", "2026-11-30T10:00:00Z", "true", "go1.26.1"}},
		{"ldflags wins over the module version", stamped, true, "1.2.3-rc1", buildVersion{"1.2.3-rc1", "0123abcd", "2026-11-30T10:00:00Z", "true", "go1.26.1"}},
		{"no vcs stamp", &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "(devel)"}}, true, "dev",
			buildVersion{"(devel)", "unknown", "unknown", "unknown", "go1.26.0"}},
		{"no build info", nil, false, "dev", buildVersion{"unknown", "unknown", "unknown", "unknown", "unknown"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := readBuildVersion(tc.bi, tc.ok, tc.override); got != tc.want {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

// versionField returns the value of the "key: value" line of out.
func versionField(out, key string) string {
	for _, l := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(l, key+": "); ok {
			return v
		}
	}
	return ""
}

func TestVersionCommand(t *testing.T) {
	var outs []string
	for _, arg := range []string{"version", "--version"} {
		var out, errb bytes.Buffer
		if code := run(context.Background(), []string{arg}, noEnv, &out, &errb); code != 0 {
			t.Fatalf("synclane %s: exit %d, stderr %q", arg, code, errb.String())
		}
		s := out.String()
		if !strings.HasPrefix(s, "synclane ") || versionField(s, "go") != runtime.Version() {
			t.Fatalf("synclane %s printed %q, want a first line \"synclane VERSION\" and go: %s", arg, s, runtime.Version())
		}
		for _, k := range []string{"revision", "time", "modified"} {
			if versionField(s, k) == "" {
				t.Fatalf("synclane %s: no %s line in %q", arg, k, s)
			}
		}
		outs = append(outs, s)
	}
	if outs[0] != outs[1] {
		t.Fatalf("version and --version differ:\n%s\n%s", outs[0], outs[1])
	}
}

// A binary built by go build prints what the toolchain stamped into it:
// the same module version, VCS revision, time and modified flag, and Go
// version that `go version -m` reads from the file. It is built with
// -buildvcs=auto (the machine's GOFLAGS may turn stamping off), so in a
// git clone the VCS fields are stamped and compared too.
func TestVersionOfBuiltBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary: skipped in -short mode (run without -short)")
	}
	bin := filepath.Join(t.TempDir(), "synclane")
	if out, err := exec.Command("go", "build", "-buildvcs=auto", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "version").CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	meta, err := exec.Command("go", "version", "-m", bin).Output()
	if err != nil {
		t.Fatal(err)
	}
	want := buildVersion{Module: "unknown", Revision: "unknown", Time: "unknown", Modified: "unknown"}
	for _, l := range strings.Split(string(meta), "\n") {
		f := strings.Fields(l)
		switch {
		case len(f) == 2 && strings.HasSuffix(f[0], ":"):
			want.Go = f[1] // "BIN: go1.26.x"
		case len(f) >= 3 && f[0] == "mod":
			want.Module = f[2]
		case len(f) == 2 && f[0] == "build":
			if k, v, ok := strings.Cut(f[1], "="); ok {
				switch k {
				case "vcs.revision":
					want.Revision = v
				case "vcs.time":
					want.Time = v
				case "vcs.modified":
					want.Modified = v
				}
			}
		}
	}
	s := string(out)
	got := buildVersion{Module: strings.TrimPrefix(strings.SplitN(s, "\n", 2)[0], "synclane "), Revision: versionField(s, "revision"),
		Time: versionField(s, "time"), Modified: versionField(s, "modified"), Go: versionField(s, "go")}
	if got != want || want.Go != runtime.Version() {
		t.Fatalf("synclane version printed %+v; go version -m reads %+v (runtime %s)\n%s", got, want, runtime.Version(), meta)
	}
	t.Logf("%s", s)
}
