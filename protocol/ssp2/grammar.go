package ssp2

import "fmt"

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
// encoders (SPEC §1.3). In registered frames:
//
//	request:  REQ_HEADER PUSH_COMMIT* [PULL_HEADER SUBSCRIPTION*]
//	          (at least one PUSH_COMMIT, or the PULL_HEADER)
//	response: RESP_HEADER [LEASE] (PUSH_RESULT [PUSH_RESULT_DETAILS])*
//	          (SUB_START (COMMIT* | (SEGMENT_REF | SEGMENT_INLINE)*) SUB_END)*
//	          [ERROR]
//
// where PUSH_RESULT_DETAILS follows only a rejected PUSH_RESULT, and ERROR
// may cut an open section; only END follows it. Unknown frames are
// transparent (they must not be first and must not follow ERROR).
//
// step checks what every frame shares: its message kind, the header first,
// nothing after ERROR. The rest is each frame's order function, registered
// in its frame file, which reads and moves the state below.
type grammar struct {
	kind  MsgKind
	phase grammarPhase
	// rejected: the frame just stepped over is a rejected PUSH_RESULT;
	// afterRejected: the one before the current frame was.
	rejected      bool
	afterRejected bool
	inSection     bool
	section       sectionContent
	sawPush       bool
	sawPull       bool
}

// grammarPhase is how far a message has come.
type grammarPhase uint8

const (
	phaseStart    grammarPhase = iota // nothing yet: the header frame comes first
	phaseHeader                       // the header frame seen
	phasePushes                       // request: PUSH_COMMITs; response: LEASE, PUSH_RESULTs
	phaseSections                     // response: subscription sections
	phaseError                        // response: ERROR seen, only END may follow

	phasePull = phaseSections // request: PULL_HEADER seen, SUBSCRIPTIONs may follow
)

// sectionContent is what an open subscription section carries so far.
type sectionContent uint8

const (
	sectionEmpty sectionContent = iota
	sectionCommits
	sectionSegments
)

// step validates the next frame, of type t; f is the frame itself (nil
// when the decoder has not decoded it).
func (g *grammar) step(t FrameType, f Frame) string {
	spec := frameSpecs[t]
	if spec == nil {
		if t == FrameEnd {
			return "END is not a frame value"
		}
		if g.phase == phaseStart {
			return fmt.Sprintf("unknown frame type 0x%02x as first frame", uint8(t))
		}
		if g.kind == KindResponse && g.phase == phaseError {
			return fmt.Sprintf("frame type 0x%02x after ERROR (only END may follow)", uint8(t))
		}
		return ""
	}
	if spec.kind != g.kind {
		return fmt.Sprintf("%s frame in a %s", spec.name, kindName(g.kind))
	}
	if g.kind == KindResponse {
		g.afterRejected, g.rejected = g.rejected, false
		if g.phase == phaseError {
			return fmt.Sprintf("%s after ERROR (only END may follow)", spec.name)
		}
	}
	if g.phase == phaseStart && !spec.header {
		return fmt.Sprintf("%s before %s", spec.name, headerSpec[g.kind].name)
	}
	return spec.order(g, f)
}

// outOfOrder is the reason for a frame that its order function refuses
// without a more precise one.
func outOfOrder(t FrameType) string {
	return fmt.Sprintf("%s out of grammar order", frameName(t))
}

// sectionFrame steps over a frame of subscription data: inside a section,
// and of the same content as the section's earlier frames.
func (g *grammar) sectionFrame(t FrameType, c sectionContent) string {
	if !g.inSection {
		return fmt.Sprintf("%s outside a subscription section", frameName(t))
	}
	if g.section != sectionEmpty && g.section != c {
		return "COMMIT and segment frames mixed in one section"
	}
	g.section = c
	return ""
}

// end validates that END may come now.
func (g *grammar) end() string {
	if g.phase == phaseStart {
		return "message has no header frame"
	}
	if g.kind == KindRequest {
		if !g.sawPush && !g.sawPull {
			return "request carries neither a push nor a pull"
		}
		return ""
	}
	if g.inSection && g.phase != phaseError {
		return "section not closed by SUB_END"
	}
	return ""
}
