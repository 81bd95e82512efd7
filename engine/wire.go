package engine

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
)

// DefaultWireVersions is the wire-version window an engine reads unless
// Config.WireVersions says otherwise: exactly the reference server's,
// version 3 alone (SPEC §9: "the current window has N = 1 version, [3]").
var DefaultWireVersions = []uint16{ssp2.WireV3}

// checkWireVersions validates a configured window: a non-empty set of the
// versions the codec knows (1, 2, 3), returned sorted without duplicates.
func checkWireVersions(vs []uint16) ([]uint16, error) {
	if len(vs) == 0 {
		return slices.Clone(DefaultWireVersions), nil
	}
	out := slices.Clone(vs)
	slices.Sort(out)
	out = slices.Compact(out)
	for _, v := range out {
		if v < ssp2.WireV1 || v > ssp2.WireV3 {
			return nil, fmt.Errorf("engine: WireVersions: %d is not a wire version this server knows (1, 2, 3)", v)
		}
	}
	return out, nil
}

// ParseWireVersions parses a window as the serve flag --wire-versions and
// SYNCLANE_WIRE_VERSIONS give it: comma-separated versions ("3", "2,3",
// "1,2,3"), each one the codec knows.
func ParseWireVersions(s string) ([]uint16, error) {
	var out []uint16
	for f := range strings.SplitSeq(s, ",") {
		f = strings.TrimSpace(f)
		v, err := strconv.ParseUint(f, 10, 16)
		if err != nil {
			return nil, fmt.Errorf("wire versions %q: %q is not a version number", s, f)
		}
		out = append(out, uint16(v))
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("wire versions %q: empty", s)
	}
	return checkWireVersions(out)
}

// WireVersions returns the wire versions the engine reads (Config.WireVersions
// after defaults), ascending.
func (e *Engine) WireVersions() []uint16 { return slices.Clone(e.cfg.WireVersions) }

// CheckWireVersion refuses, before any frame is read, an SSP2 body whose
// envelope names a wire version outside the engine's window (SPEC §1.2:
// an unknown version is rejected before reading frames), with
// sync.invalid_request naming the version and the window (details
// {"wireVersion": n, "supported": [...]}). A body too short to carry a
// version, without the SSP2 magic, or in a version the codec does not know
// (not 1-3) passes: the decoder refuses it with its own message, offset
// and reason. Transports that decode requests themselves (the
// realtime socket's rounds) call it first; SyncEncoded does.
func (e *Engine) CheckWireVersion(body []byte) error {
	v, err := ssp2.PeekWireVersion(body)
	if err != nil || !ssp2.IsKnownWireVersion(v) {
		return nil // not an envelope, or a version no codec reads: the decoder says why, where
	}
	return e.checkWire(v)
}

func (e *Engine) checkWire(v uint16) error {
	if slices.Contains(e.cfg.WireVersions, v) {
		return nil
	}
	return syncerr.New(syncerr.InvalidRequest, "unsupported wireVersion %d: this server reads wire version %s (SPEC §9)", v, versionList(e.cfg.WireVersions)).
		WithDetails(map[string]any{"wireVersion": v, "supported": e.cfg.WireVersions})
}

func versionList(vs []uint16) string {
	parts := make([]string, len(vs))
	for i, v := range vs {
		parts[i] = strconv.Itoa(int(v))
	}
	return strings.Join(parts, ", ")
}
