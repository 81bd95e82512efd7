package main

import (
	"fmt"
	"io"
	"runtime/debug"
)

// buildVersion is what `synclane version` prints: the module version, the
// VCS revision and commit time, whether the work tree had uncommitted
// changes, and the Go version, as recorded in the binary by the Go
// toolchain (runtime/debug.ReadBuildInfo). Fields the build did not record
// (go run and go test stamp no VCS data; -buildvcs=false neither) are
// "unknown".
type buildVersion struct {
	Module   string // e.g. v0.3.1, or (devel) for a build from a work tree
	Revision string
	Time     string
	Modified string // "true", "false" or "unknown"
	Go       string
}

// readBuildVersion reads the binary's build information; override, when
// not "dev", is the version set with -ldflags "-X main.version=...", which
// wins over the module version.
func readBuildVersion(bi *debug.BuildInfo, ok bool, override string) buildVersion {
	v := buildVersion{Module: "unknown", Revision: "unknown", Time: "unknown", Modified: "unknown", Go: "unknown"}
	if ok && bi != nil {
		if bi.Main.Version != "" {
			v.Module = bi.Main.Version
		}
		if bi.GoVersion != "" {
			v.Go = bi.GoVersion
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				v.Revision = s.Value
			case "vcs.time":
				v.Time = s.Value
			case "vcs.modified":
				v.Modified = s.Value
			}
		}
	}
	if override != "" && override != "dev" {
		v.Module = override
	}
	return v
}

// printVersion writes the version block of `synclane version` and
// `synclane --version`: a first line "synclane VERSION", then one
// "key: value" line each for revision, time, modified and go.
func printVersion(w io.Writer) {
	bi, ok := debug.ReadBuildInfo()
	v := readBuildVersion(bi, ok, version)
	fmt.Fprintf(w, "synclane %s\nrevision: %s\ntime: %s\nmodified: %s\ngo: %s\n", v.Module, v.Revision, v.Time, v.Modified, v.Go)
}
