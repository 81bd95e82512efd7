// Package ssp2 is the Syncular sync protocol (SSP2) wire codec: envelopes,
// request and response frames, the positional row codec, SSG2 rows segments,
// realtime control messages and the canonical JSON rendering used by the
// golden vectors.
//
// Every decode failure is a *DecodeError carrying a protocol error code
// (sync.invalid_request unless the protocol names another); decoders never
// panic on any input.
package ssp2

// Magic is the 4-byte envelope magic "SSP2".
const Magic = "SSP2"

// Wire versions understood by this codec.
const (
	WireV1 uint16 = 1
	WireV2 uint16 = 2
)

// MsgKind is the envelope message kind byte.
type MsgKind uint8

// Message kinds.
const (
	KindRequest  MsgKind = 0x01
	KindResponse MsgKind = 0x02
)

// FrameType is the one-byte frame type of an SSP2 frame.
type FrameType uint8

// Registered frame types (SPEC §1.2).
const (
	FrameEnd               FrameType = 0x00
	FrameReqHeader         FrameType = 0x01
	FramePushCommit        FrameType = 0x02
	FramePullHeader        FrameType = 0x03
	FrameSubscription      FrameType = 0x04
	FrameRespHeader        FrameType = 0x10
	FramePushResult        FrameType = 0x11
	FrameSubStart          FrameType = 0x12
	FrameCommit            FrameType = 0x13
	FrameSegmentRef        FrameType = 0x14
	FrameSegmentInline     FrameType = 0x15
	FrameSubEnd            FrameType = 0x16
	FrameLease             FrameType = 0x19
	FramePushResultDetails FrameType = 0x1B
	FrameError             FrameType = 0x1F
)

// Frame is one decoded frame. END is never represented: it is implied by the
// end of a Message.
type Frame interface {
	// FrameType reports the wire type byte of the frame.
	FrameType() FrameType
}

// Message is a whole decoded envelope: header fields plus frames in wire
// order (END omitted). Unknown frames are kept in place as *UnknownFrame.
type Message struct {
	WireVersion uint16
	Kind        MsgKind
	Frames      []Frame
}

// UnknownFrame is a frame whose type has no layout for either message kind.
// It is preserved byte-exact for re-encoding.
type UnknownFrame struct {
	Type    FrameType
	Payload []byte
}

// OpKind is a push operation kind.
type OpKind uint8

// Operation kinds.
const (
	OpUpsert OpKind = 1
	OpDelete OpKind = 2
)

// FrameType implements Frame for every frame type: the registered type
// byte, or the preserved byte of an unknown frame.
func (f *UnknownFrame) FrameType() FrameType { return f.Type }

// ColumnType is a row-codec type tag (SPEC §2.4).
type ColumnType uint8

// Row codec type tags.
const (
	TypeString  ColumnType = 1
	TypeInteger ColumnType = 2
	TypeFloat   ColumnType = 3
	TypeBoolean ColumnType = 4
	TypeJSON    ColumnType = 5
	TypeBytes   ColumnType = 6
	TypeBlobRef ColumnType = 7
	TypeCRDT    ColumnType = 8
)

// Column describes one column of a table for the row codec and for SSG2
// column descriptor tables.
type Column struct {
	Name     string
	Type     ColumnType
	Nullable bool
}

// Row is one decoded row in column declaration order. Each value is one of:
// nil (NULL), string (string and blob_ref columns), int64, float64, bool,
// json.RawMessage (json columns, raw text kept verbatim), []byte (bytes and
// crdt columns).
type Row []any
