package ssp2

import "fmt"

// frameName returns the rendering name of a registered frame type.
func frameName(t FrameType) string {
	switch t {
	case FrameEnd:
		return "END"
	case FrameReqHeader:
		return "REQ_HEADER"
	case FramePushCommit:
		return "PUSH_COMMIT"
	case FramePullHeader:
		return "PULL_HEADER"
	case FrameSubscription:
		return "SUBSCRIPTION"
	case FrameRespHeader:
		return "RESP_HEADER"
	case FramePushResult:
		return "PUSH_RESULT"
	case FrameSubStart:
		return "SUB_START"
	case FrameCommit:
		return "COMMIT"
	case FrameSegmentRef:
		return "SEGMENT_REF"
	case FrameSegmentInline:
		return "SEGMENT_INLINE"
	case FrameSubEnd:
		return "SUB_END"
	case FrameLease:
		return "LEASE"
	case FramePushResultDetails:
		return "PUSH_RESULT_DETAILS"
	case FrameError:
		return "ERROR"
	}
	return ""
}

// IsRegistered reports whether t has a layout for either message kind
// (END included). Frames of any other type are unknown and skippable.
func IsRegistered(t FrameType) bool { return frameName(t) != "" }

// frameKind returns the message kind a registered non-END frame belongs to.
func frameKind(t FrameType) MsgKind {
	if t >= FrameReqHeader && t <= FrameSubscription {
		return KindRequest
	}
	return KindResponse
}

func kindName(k MsgKind) string {
	switch k {
	case KindRequest:
		return "request"
	case KindResponse:
		return "response"
	}
	return fmt.Sprintf("kind 0x%02x", uint8(k))
}

// grammar is the frame-order state machine shared by the decoder and the
// encoders. Unknown frames are transparent (they must not be first and
// must not follow ERROR).
type grammar struct {
	kind MsgKind
	// phase: 0 before header; request: 1 header, 2 pushes, 3 pull;
	// response: 1 header, 2 lease/push results, 3 sections, 4 after ERROR.
	phase       int
	detailsOK   bool
	inSection   bool
	sectionKind FrameType // 0, FrameCommit or FrameSegmentRef (segments)
	sawPush     bool
	sawPull     bool
}

// step validates the next frame type; rejected tells whether a PUSH_RESULT
// is a rejected one.
func (g *grammar) step(t FrameType, rejected bool) string {
	if !IsRegistered(t) {
		if g.phase == 0 {
			return fmt.Sprintf("unknown frame type 0x%02x as first frame", uint8(t))
		}
		if g.kind == KindResponse && g.phase == 4 {
			return fmt.Sprintf("frame type 0x%02x after ERROR (only END may follow)", uint8(t))
		}
		return ""
	}
	if t == FrameEnd {
		return "END is not a frame value"
	}
	if frameKind(t) != g.kind {
		return fmt.Sprintf("%s frame in a %s", frameName(t), kindName(g.kind))
	}
	if g.kind == KindRequest {
		return g.stepRequest(t)
	}
	return g.stepResponse(t, rejected)
}

func (g *grammar) stepRequest(t FrameType) string {
	switch t {
	case FrameReqHeader:
		if g.phase == 0 {
			g.phase = 1
			return ""
		}
	case FramePushCommit:
		if g.phase == 1 || g.phase == 2 {
			g.phase = 2
			g.sawPush = true
			return ""
		}
	case FramePullHeader:
		if g.phase == 1 || g.phase == 2 {
			g.phase = 3
			g.sawPull = true
			return ""
		}
	case FrameSubscription:
		if g.phase == 3 {
			return ""
		}
	}
	if g.phase == 0 {
		return fmt.Sprintf("%s before REQ_HEADER", frameName(t))
	}
	return fmt.Sprintf("%s out of grammar order", frameName(t))
}

func (g *grammar) stepResponse(t FrameType, rejected bool) string {
	details := g.detailsOK
	g.detailsOK = false
	if g.phase == 4 {
		return fmt.Sprintf("%s after ERROR (only END may follow)", frameName(t))
	}
	if g.phase == 0 && t != FrameRespHeader {
		return fmt.Sprintf("%s before RESP_HEADER", frameName(t))
	}
	switch t {
	case FrameRespHeader:
		if g.phase == 0 {
			g.phase = 1
			return ""
		}
		return "second RESP_HEADER"
	case FrameLease:
		if g.phase == 1 {
			g.phase = 2
			return ""
		}
		return "LEASE must come directly after RESP_HEADER, at most once"
	case FramePushResult:
		if g.phase == 1 || g.phase == 2 {
			g.phase = 2
			g.detailsOK = rejected
			return ""
		}
		return "PUSH_RESULT after a subscription section"
	case FramePushResultDetails:
		if details {
			return ""
		}
		return "PUSH_RESULT_DETAILS not directly after a rejected PUSH_RESULT"
	case FrameSubStart:
		if g.inSection {
			return "SUB_START inside an open section"
		}
		g.phase = 3
		g.inSection = true
		g.sectionKind = 0
		return ""
	case FrameCommit, FrameSegmentRef, FrameSegmentInline:
		if !g.inSection {
			return fmt.Sprintf("%s outside a subscription section", frameName(t))
		}
		k := t
		if k == FrameSegmentInline {
			k = FrameSegmentRef
		}
		if g.sectionKind != 0 && g.sectionKind != k {
			return "COMMIT and segment frames mixed in one section"
		}
		g.sectionKind = k
		return ""
	case FrameSubEnd:
		if !g.inSection {
			return "SUB_END without SUB_START"
		}
		g.inSection = false
		return ""
	case FrameError:
		g.phase = 4
		return ""
	}
	return fmt.Sprintf("%s out of grammar order", frameName(t))
}

// end validates that END may come now.
func (g *grammar) end() string {
	if g.phase == 0 {
		return "message has no header frame"
	}
	if g.kind == KindRequest {
		if !g.sawPush && !g.sawPull {
			return "request carries neither a push nor a pull"
		}
		return ""
	}
	if g.inSection && g.phase != 4 {
		return "section not closed by SUB_END"
	}
	return ""
}
