package main

import (
	"strconv"
	"strings"

	"github.com/synclane/synclane/engine"
)

// wireVersionsFlag is --wire-versions: the window of SSP2 wire versions
// the server reads (engine.Config.WireVersions), parsed by
// engine.ParseWireVersions. Unset it is nil: the engine's default, version
// 3 alone.
type wireVersionsFlag struct {
	versions []uint16
}

func (f *wireVersionsFlag) String() string {
	if f == nil || f.versions == nil {
		return ""
	}
	parts := make([]string, len(f.versions))
	for i, v := range f.versions {
		parts[i] = strconv.Itoa(int(v))
	}
	return strings.Join(parts, ",")
}

func (f *wireVersionsFlag) Set(v string) error {
	vs, err := engine.ParseWireVersions(v)
	if err != nil {
		return err
	}
	f.versions = vs
	return nil
}
