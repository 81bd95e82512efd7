package ssp2

import "errors"

// Request is a typed view of a decoded request message.
type Request struct {
	WireVersion   uint16
	Header        *ReqHeader
	Commits       []*PushCommit
	Pull          *PullHeader // nil for a push-only request
	Subscriptions []*Subscription
}

// Request returns the typed view of a request message (unknown frames are
// skipped). It fails if m is not a request or lacks a REQ_HEADER; for
// messages from DecodeRequest the grammar is already validated.
func (m *Message) Request() (*Request, error) {
	if m == nil || m.Kind != KindRequest {
		return nil, errors.New("ssp2: not a request message")
	}
	req := &Request{WireVersion: m.WireVersion}
	for _, f := range m.Frames {
		switch f := f.(type) {
		case *ReqHeader:
			req.Header = f
		case *PushCommit:
			req.Commits = append(req.Commits, f)
		case *PullHeader:
			req.Pull = f
		case *Subscription:
			req.Subscriptions = append(req.Subscriptions, f)
		}
	}
	if req.Header == nil {
		return nil, errors.New("ssp2: request has no REQ_HEADER")
	}
	return req, nil
}
