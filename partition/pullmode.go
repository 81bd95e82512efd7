package partition

import (
	"encoding/json"
	"slices"
)

// PullMode is how one active subscription is served (SPEC §4.5-§4.7).
type PullMode int

// Pull modes.
const (
	// Incremental: send commits in (cursor, max].
	Incremental PullMode = iota
	// Bootstrap: send rows segments at a pinned asOfCommitSeq.
	Bootstrap
	// Reset: status reset with sync.cursor_expired (cursor below the horizon).
	Reset
)

// ChoosePullMode applies the bootstrap triggers and the horizon rule: a
// resume token, a negative cursor or a cursor past max bootstraps; a cursor
// in [0, horizon) without a token resets; anything else is incremental.
func ChoosePullMode(cursor int64, hasToken bool, horizon, max int64) PullMode {
	switch {
	case hasToken, cursor < 0, cursor > max:
		return Bootstrap
	case cursor < horizon:
		return Reset
	default:
		return Incremental
	}
}

// BootstrapToken is synclane's bootstrapState JSON. Only the server
// interprets it; clients echo it byte-exact.
type BootstrapToken struct {
	AsOfCommitSeq int64    `json:"asOfCommitSeq"`
	Tables        []string `json:"tables"`
	TableIndex    int      `json:"tableIndex"`
	RowCursor     *string  `json:"rowCursor"`
	// Lane is the table's bootstrap lane (LaneInline or LaneRef), fixed at
	// its first page; empty before it.
	Lane string `json:"lane,omitempty"`
}

// ResumeToken decides whether a received token can be resumed for a
// subscription of table: it must parse, name exactly [table] at index 0,
// pin at or above the horizon and at or below max, and carry a rows lane
// (none yet, inline or ref). Otherwise the bootstrap restarts silently
// with a fresh pin (SPEC §4.7).
func ResumeToken(raw json.RawMessage, table string, horizon, max int64) (BootstrapToken, bool) {
	var tok BootstrapToken
	if len(raw) == 0 || json.Unmarshal(raw, &tok) != nil {
		return BootstrapToken{}, false
	}
	if !slices.Equal(tok.Tables, []string{table}) || tok.TableIndex != 0 ||
		tok.AsOfCommitSeq < horizon || tok.AsOfCommitSeq > max || tok.AsOfCommitSeq < 0 {
		return BootstrapToken{}, false
	}
	switch tok.Lane { // a table resumes only in a rows lane (an image is one page)
	case "", LaneInline, LaneRef:
		return tok, true
	}
	return BootstrapToken{}, false
}

// Encode renders the token as compact JSON.
func (t BootstrapToken) Encode() json.RawMessage {
	b, _ := json.Marshal(t) // cannot fail: plain fields
	return b
}
