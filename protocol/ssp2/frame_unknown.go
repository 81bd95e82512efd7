package ssp2

// UnknownFrame is a frame whose type has no layout for either message kind.
// It is preserved byte-exact for re-encoding.
type UnknownFrame struct {
	Type    FrameType
	Payload []byte
}

// FrameType reports the preserved type byte.
func (f *UnknownFrame) FrameType() FrameType { return f.Type }

func (f *UnknownFrame) appendPayload(b []byte, _ uint16) ([]byte, error) {
	return append(b, f.Payload...), nil
}

func (f *UnknownFrame) renderFields(o *obj, _ uint16) error {
	o.num("frameType", int64(f.Type))
	o.b64("payload", f.Payload)
	return nil
}

func parseUnknown(f *fields) Frame {
	return &UnknownFrame{Type: FrameType(f.int("frameType", 0, 255)), Payload: f.b64("payload", true)}
}
