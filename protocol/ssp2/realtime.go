package ssp2

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/synclane/synclane/protocol/syncerr"
)

// Realtime control messages (§8, notes §15) are JSON text frames.
// Server→client messages carry "event"; the client→server ack carries
// "type"; presence uses "event":"presence" in both directions.
//
// ParseServerControl parses server→client messages, ParseClientControl
// client→server ones, and ParseControl infers the direction (a "type" key,
// or a presence event whose data has neither "kind" nor "error", is
// client→server). Unknown event (or type) names are tolerated and returned
// as *UnknownControl; a known event with missing or wrong-shaped data is a
// sync.invalid_request error. All numbers must be integers within
// ±(2^53-1).

// Wake reasons (closed set).
const (
	WakeDeltaTooLarge   = "delta-too-large"
	WakeCatchupRequired = "catchup-required"
	WakeResetRequired   = "reset-required"
)

// Presence fanout kinds (closed set) and error codes.
const (
	PresenceJoin      = "join"
	PresenceUpdate    = "update"
	PresenceLeave     = "leave"
	PresenceTooLarge  = "presence.too_large"
	PresenceForbidden = "presence.forbidden"
)

// Hello is the server's first message on a realtime connection.
type Hello struct {
	ProtocolVersion int64  `json:"protocolVersion"`
	SessionID       string `json:"sessionId"`
	ActorID         string `json:"actorId"`
	ClientID        string `json:"clientId"`
	Cursor          int64  `json:"cursor"`
	LatestCursor    int64  `json:"latestCursor"`
	RequiresSync    bool   `json:"requiresSync"`
	Timestamp       int64  `json:"timestamp"`
}

// Wake is the "sync" wake-up event; requiresPull is always the literal true.
type Wake struct {
	Cursor    int64
	Reason    string
	Timestamp int64
}

// Heartbeat is the periodic server heartbeat.
type Heartbeat struct {
	Timestamp int64 `json:"timestamp"`
}

// PresenceFanout is a server→client presence change. Doc is nil for leave.
type PresenceFanout struct {
	ScopeKey  string
	Kind      string
	ActorID   string
	ClientID  string
	Doc       json.RawMessage
	Timestamp int64
}

// PresenceError is the server's in-band rejection of a presence publish.
type PresenceError struct {
	ScopeKey  string
	Error     string
	Timestamp int64
}

// PresencePublish is a client→server presence publish; Doc nil means leave.
type PresencePublish struct {
	ScopeKey string
	Doc      json.RawMessage
}

// Ack is the client→server delta acknowledgement.
type Ack struct {
	Cursor int64
}

// UnknownControl is a tolerated message with an unknown event or type name.
type UnknownControl struct {
	Event string
	Type  string
}

func ctlErr(format string, args ...any) error {
	return &syncerr.Error{Code: syncerr.InvalidRequest, Message: "malformed realtime control message", Err: &DecodeError{Reason: fmt.Sprintf(format, args...)}}
}

type ctlObj map[string]json.RawMessage

func parseCtlObj(b []byte, what string) (ctlObj, error) {
	var m ctlObj
	if err := json.Unmarshal(b, &m); err != nil || m == nil {
		return nil, ctlErr("%s must be a JSON object", what)
	}
	return m, nil
}

func (o ctlObj) str(k string, nonEmpty bool) (string, error) {
	v, ok := o[k]
	var s string
	if !ok || json.Unmarshal(v, &s) != nil || v[0] != '"' {
		return "", ctlErr("%q must be a string", k)
	}
	if nonEmpty && s == "" {
		return "", ctlErr("%q must be non-empty", k)
	}
	return s, nil
}

func (o ctlObj) int(k string) (int64, error) {
	v, ok := o[k]
	if !ok {
		return 0, ctlErr("missing %q", k)
	}
	x, err := strconv.ParseInt(string(bytes.TrimSpace(v)), 10, 64)
	if err != nil || !safeInt(x) {
		return 0, ctlErr("%q must be an integer within ±(2^53-1)", k)
	}
	return x, nil
}

func (o ctlObj) boolean(k string) (bool, error) {
	v, ok := o[k]
	switch {
	case ok && string(v) == "true":
		return true, nil
	case ok && string(v) == "false":
		return false, nil
	}
	return false, ctlErr("%q must be a boolean", k)
}

// doc returns an object document, or nil for JSON null.
func (o ctlObj) doc(k string) (json.RawMessage, error) {
	v, ok := o[k]
	if !ok {
		return nil, ctlErr("missing %q", k)
	}
	v = bytes.TrimSpace(v)
	if string(v) == "null" {
		return nil, nil
	}
	if len(v) == 0 || v[0] != '{' {
		return nil, ctlErr("%q must be a JSON object or null", k)
	}
	return append(json.RawMessage(nil), v...), nil
}

func firstErr(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

// ParseServerControl parses a server→client control message into *Hello,
// *Wake, *Heartbeat, *PresenceFanout, *PresenceError or *UnknownControl.
func ParseServerControl(b []byte) (any, error) {
	top, err := parseCtlObj(b, "control message")
	if err != nil {
		return nil, err
	}
	ev, err := top.str("event", false)
	if err != nil {
		return nil, err
	}
	switch ev {
	case "hello", "sync", "heartbeat", "presence":
	default:
		return &UnknownControl{Event: ev}, nil
	}
	d, err := parseCtlObj(top["data"], ev+" data")
	if err != nil {
		return nil, err
	}
	switch ev {
	case "hello":
		var h Hello
		var e [8]error
		h.ProtocolVersion, e[0] = d.int("protocolVersion")
		h.SessionID, e[1] = d.str("sessionId", false)
		h.ActorID, e[2] = d.str("actorId", false)
		h.ClientID, e[3] = d.str("clientId", false)
		h.Cursor, e[4] = d.int("cursor")
		h.LatestCursor, e[5] = d.int("latestCursor")
		h.RequiresSync, e[6] = d.boolean("requiresSync")
		h.Timestamp, e[7] = d.int("timestamp")
		if err := firstErr(e[:]...); err != nil {
			return nil, err
		}
		return &h, nil
	case "sync":
		var w Wake
		var e [4]error
		w.Cursor, e[0] = d.int("cursor")
		if string(bytes.TrimSpace(d["requiresPull"])) != "true" {
			e[1] = ctlErr("sync requiresPull must be the literal true")
		}
		w.Reason, e[2] = d.str("reason", false)
		w.Timestamp, e[3] = d.int("timestamp")
		if err := firstErr(e[:]...); err != nil {
			return nil, err
		}
		switch w.Reason {
		case WakeDeltaTooLarge, WakeCatchupRequired, WakeResetRequired:
		default:
			return nil, ctlErr("unknown sync reason %q", w.Reason)
		}
		return &w, nil
	case "heartbeat":
		ts, err := d.int("timestamp")
		if err != nil {
			return nil, err
		}
		return &Heartbeat{Timestamp: ts}, nil
	default: // presence
		if _, ok := d["error"]; ok {
			var p PresenceError
			var e [3]error
			p.ScopeKey, e[0] = d.str("scopeKey", true)
			p.Error, e[1] = d.str("error", false)
			p.Timestamp, e[2] = d.int("timestamp")
			if err := firstErr(e[:]...); err != nil {
				return nil, err
			}
			if p.Error != PresenceTooLarge && p.Error != PresenceForbidden {
				return nil, ctlErr("unknown presence error %q", p.Error)
			}
			return &p, nil
		}
		var p PresenceFanout
		var e [6]error
		p.ScopeKey, e[0] = d.str("scopeKey", true)
		p.Kind, e[1] = d.str("kind", false)
		p.ActorID, e[2] = d.str("actorId", false)
		p.ClientID, e[3] = d.str("clientId", false)
		p.Doc, e[4] = d.doc("doc")
		p.Timestamp, e[5] = d.int("timestamp")
		if err := firstErr(e[:]...); err != nil {
			return nil, err
		}
		switch p.Kind {
		case PresenceJoin, PresenceUpdate:
			if p.Doc == nil {
				return nil, ctlErr("presence %s must carry a doc object", p.Kind)
			}
		case PresenceLeave:
			if p.Doc != nil {
				return nil, ctlErr("presence leave must carry doc null")
			}
		default:
			return nil, ctlErr("unknown presence kind %q", p.Kind)
		}
		return &p, nil
	}
}

// ParseClientControl parses a client→server control message into *Ack,
// *PresencePublish or *UnknownControl.
func ParseClientControl(b []byte) (any, error) {
	top, err := parseCtlObj(b, "control message")
	if err != nil {
		return nil, err
	}
	if _, ok := top["type"]; ok {
		typ, err := top.str("type", false)
		if err != nil {
			return nil, err
		}
		if typ != "ack" {
			return &UnknownControl{Type: typ}, nil
		}
		c, err := top.int("cursor")
		if err != nil {
			return nil, err
		}
		return &Ack{Cursor: c}, nil
	}
	ev, err := top.str("event", false)
	if err != nil {
		return nil, ctlErr("control message needs a type or event")
	}
	if ev != "presence" {
		return &UnknownControl{Event: ev}, nil
	}
	d, err := parseCtlObj(top["data"], "presence data")
	if err != nil {
		return nil, err
	}
	var p PresencePublish
	if p.ScopeKey, err = d.str("scopeKey", true); err != nil {
		return nil, err
	}
	if p.Doc, err = d.doc("doc"); err != nil {
		return nil, err
	}
	return &p, nil
}

// ParseControl parses a control message of either direction. A message with
// a "type" key, or a "presence" event whose data has neither "kind" nor
// "error", is parsed as client→server (ParseClientControl); everything else
// as server→client (ParseServerControl). Unknown event/type names are
// tolerated (*UnknownControl); a known event with missing or wrong-shaped
// data, or a number that is not an integer within ±(2^53-1), is a
// sync.invalid_request error.
func ParseControl(b []byte) (any, error) {
	top, err := parseCtlObj(b, "control message")
	if err != nil {
		return nil, err
	}
	if _, ok := top["type"]; ok {
		return ParseClientControl(b)
	}
	var ev string
	if json.Unmarshal(top["event"], &ev) == nil && ev == "presence" {
		if d, err := parseCtlObj(top["data"], "presence data"); err == nil {
			_, hasKind := d["kind"]
			_, hasErr := d["error"]
			if !hasKind && !hasErr {
				return ParseClientControl(b)
			}
		}
	}
	return ParseServerControl(b)
}

type envelope struct {
	Event string `json:"event"`
	Data  any    `json:"data"`
}

// MarshalControl renders a server→client message (*Hello, *Wake,
// *Heartbeat, *PresenceFanout, *PresenceError) or a client→server one
// (*Ack, *PresencePublish) as compact JSON after validating it the way the
// parsers do.
func MarshalControl(v any) ([]byte, error) {
	if b, ok := appendControl(v); ok {
		return b, nil
	}
	return marshalControlJSON(v)
}

// appendControl renders the messages sent per socket or per delta (hello,
// sync wake-up, heartbeat, ack) without reflection or the re-parse: the
// same bytes marshalControlJSON renders for them. ok is false for any
// other message, and for a value whose rendering or refusal is left to
// marshalControlJSON (a number outside ±(2^53-1), an unknown wake-up
// reason, a string needing JSON escapes).
func appendControl(v any) ([]byte, bool) {
	switch v := v.(type) {
	case *Hello:
		if !safeInt(v.ProtocolVersion) || !safeInt(v.Cursor) || !safeInt(v.LatestCursor) || !safeInt(v.Timestamp) ||
			!plainJSON(v.SessionID) || !plainJSON(v.ActorID) || !plainJSON(v.ClientID) {
			return nil, false
		}
		b := make([]byte, 0, 192+len(v.SessionID)+len(v.ActorID)+len(v.ClientID))
		b = append(b, `{"event":"hello","data":{"protocolVersion":`...)
		b = strconv.AppendInt(b, v.ProtocolVersion, 10)
		b = append(append(append(b, `,"sessionId":"`...), v.SessionID...), `","actorId":"`...)
		b = append(append(append(b, v.ActorID...), `","clientId":"`...), v.ClientID...)
		b = strconv.AppendInt(append(b, `","cursor":`...), v.Cursor, 10)
		b = strconv.AppendInt(append(b, `,"latestCursor":`...), v.LatestCursor, 10)
		b = strconv.AppendBool(append(b, `,"requiresSync":`...), v.RequiresSync)
		b = strconv.AppendInt(append(b, `,"timestamp":`...), v.Timestamp, 10)
		return append(b, "}}"...), true
	case *Wake:
		switch v.Reason {
		case WakeDeltaTooLarge, WakeCatchupRequired, WakeResetRequired:
		default:
			return nil, false
		}
		if !safeInt(v.Cursor) || !safeInt(v.Timestamp) || !plainJSON(v.Reason) {
			return nil, false
		}
		b := make([]byte, 0, 128)
		b = strconv.AppendInt(append(b, `{"event":"sync","data":{"cursor":`...), v.Cursor, 10)
		b = append(append(append(b, `,"requiresPull":true,"reason":"`...), v.Reason...), `","timestamp":`...)
		b = strconv.AppendInt(b, v.Timestamp, 10)
		return append(b, "}}"...), true
	case *Heartbeat:
		if !safeInt(v.Timestamp) {
			return nil, false
		}
		b := strconv.AppendInt(append(make([]byte, 0, 64), `{"event":"heartbeat","data":{"timestamp":`...), v.Timestamp, 10)
		return append(b, "}}"...), true
	case *Ack:
		if !safeInt(v.Cursor) {
			return nil, false
		}
		b := strconv.AppendInt(append(make([]byte, 0, 48), `{"type":"ack","cursor":`...), v.Cursor, 10)
		return append(b, '}'), true
	}
	return nil, false
}

// plainJSON reports whether s renders as a JSON string by quoting alone
// (printable ASCII, none of the characters encoding/json escapes).
func plainJSON(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20 || c > 0x7e, c == '"', c == '\\', c == '<', c == '>', c == '&':
			return false
		}
	}
	return true
}

// marshalControlJSON is MarshalControl through encoding/json, checked by
// the parsers.
func marshalControlJSON(v any) ([]byte, error) {
	var out any
	switch v := v.(type) {
	case *Hello:
		out = envelope{"hello", v}
	case *Wake:
		out = envelope{"sync", struct {
			Cursor       int64  `json:"cursor"`
			RequiresPull bool   `json:"requiresPull"`
			Reason       string `json:"reason"`
			Timestamp    int64  `json:"timestamp"`
		}{v.Cursor, true, v.Reason, v.Timestamp}}
	case *Heartbeat:
		out = envelope{"heartbeat", v}
	case *PresenceFanout:
		doc := v.Doc
		if doc == nil {
			doc = json.RawMessage("null")
		}
		out = envelope{"presence", struct {
			ScopeKey  string          `json:"scopeKey"`
			Kind      string          `json:"kind"`
			ActorID   string          `json:"actorId"`
			ClientID  string          `json:"clientId"`
			Doc       json.RawMessage `json:"doc"`
			Timestamp int64           `json:"timestamp"`
		}{v.ScopeKey, v.Kind, v.ActorID, v.ClientID, doc, v.Timestamp}}
	case *PresenceError:
		out = envelope{"presence", struct {
			ScopeKey  string `json:"scopeKey"`
			Error     string `json:"error"`
			Timestamp int64  `json:"timestamp"`
		}{v.ScopeKey, v.Error, v.Timestamp}}
	case *PresencePublish:
		doc := v.Doc
		if doc == nil {
			doc = json.RawMessage("null")
		}
		out = envelope{"presence", struct {
			ScopeKey string          `json:"scopeKey"`
			Doc      json.RawMessage `json:"doc"`
		}{v.ScopeKey, doc}}
	case *Ack:
		out = struct {
			Type   string `json:"type"`
			Cursor int64  `json:"cursor"`
		}{"ack", v.Cursor}
	default:
		return nil, encFail("unsupported control message %T", v)
	}
	b, err := json.Marshal(out)
	if err != nil {
		return nil, err
	}
	switch v.(type) {
	case *Ack, *PresencePublish:
		_, err = ParseClientControl(b)
	default:
		_, err = ParseServerControl(b)
	}
	if err != nil {
		return nil, err
	}
	return b, nil
}
