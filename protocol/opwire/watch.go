package opwire

// Live query watches (REMOTE.md §6): messages on <mount>/operations/realtime.

// Watch message kinds.
const (
	KindWatch    = "watch"
	KindUnwatch  = "unwatch"
	KindSnapshot = "snapshot"
)

// WatchMessage is a decoded client message: a watch (ClientID,
// OperationID and Params set) or an unwatch.
type WatchMessage struct {
	Kind        string
	WatchID     string
	ClientID    string
	OperationID string
	Params      any
}

// DecodeWatchMessage decodes one client message of a watch socket: an
// object with revision 1, kind "watch" (watchId, clientId, operationId,
// params) or "unwatch" (watchId). watchId must not be empty. Unknown keys
// are refused; errors are operation.invalid_request.
func DecodeWatchMessage(data []byte) (*WatchMessage, error) {
	v, err := Decode(data)
	if err != nil {
		return nil, err
	}
	o, ok := v.(Object)
	if !ok {
		return nil, invalid("the message is not an object value")
	}
	if err := checkRevision(o); err != nil {
		return nil, err
	}
	m := &WatchMessage{}
	if m.Kind, err = stringField(o, "kind"); err != nil {
		return nil, err
	}
	allowed := map[string]bool{"revision": true, "kind": true, "watchId": true}
	switch m.Kind {
	case KindWatch:
		allowed["clientId"], allowed["operationId"], allowed["params"] = true, true, true
		if m.ClientID, err = stringField(o, "clientId"); err != nil {
			return nil, err
		}
		if m.OperationID, err = stringField(o, "operationId"); err != nil {
			return nil, err
		}
		m.Params, _ = o.Get("params")
	case KindUnwatch:
	default:
		return nil, invalid("kind %q is neither %q nor %q", m.Kind, KindWatch, KindUnwatch)
	}
	for _, f := range o {
		if !allowed[f.Key] {
			return nil, invalid("a %s message has no field %q", m.Kind, f.Key)
		}
	}
	if m.WatchID, err = stringField(o, "watchId"); err != nil {
		return nil, err
	}
	if m.WatchID == "" {
		return nil, invalid("watchId must not be empty")
	}
	return m, nil
}

// EncodeSnapshot encodes a watch's full replacement snapshot.
func EncodeSnapshot(watchID string, r *QueryResult) ([]byte, error) {
	if r.MaxCommitSeq < 0 || r.MaxCommitSeq > MaxSafeInteger {
		return nil, invalid("maxCommitSeq %d is not a safe non-negative integer", r.MaxCommitSeq)
	}
	rows := make([]any, len(r.Rows))
	for i, row := range r.Rows {
		rows[i] = row
	}
	return Encode(Object{{"revision", float64(Revision)}, {"kind", KindSnapshot}, {"watchId", watchID},
		{"operationId", r.OperationID}, {"rows", rows}, {"maxCommitSeq", float64(r.MaxCommitSeq)}})
}
