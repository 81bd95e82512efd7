package ssp2

// Magic is the 4-byte envelope magic "SSP2".
const Magic = "SSP2"

// Wire versions understood by this codec. Version 3 (SPEC §9) changed the
// push payload to the sparse row codec (§2.4) and appended conflictColumns
// to the conflict result record (§6.3); its other layouts are version 2's.
const (
	WireV1 uint16 = 1
	WireV2 uint16 = 2
	WireV3 uint16 = 3
)

// KnownWireVersions lists, in ascending order, every wire version this
// codec decodes and encodes: WireV1, WireV2 and WireV3. Any other version
// is a decode error (sync.invalid_request) and an encode error. It is a
// list for display and for checking a configured version window; do not
// modify it (the codec itself decides with IsKnownWireVersion).
var KnownWireVersions = []uint16{WireV1, WireV2, WireV3}

// IsKnownWireVersion reports whether v is one of KnownWireVersions.
func IsKnownWireVersion(v uint16) bool { return v >= WireV1 && v <= WireV3 }

// MsgKind is the envelope message kind byte.
type MsgKind uint8

// Message kinds.
const (
	KindRequest  MsgKind = 0x01
	KindResponse MsgKind = 0x02
)

// FrameType is the one-byte frame type of an SSP2 frame.
type FrameType uint8

// FrameEnd is END (0x00), which closes every message. The other registered
// types are declared with their frames, one file each (frame_*.go).
const FrameEnd FrameType = 0x00

// Message is a whole decoded envelope: header fields plus frames in wire
// order (END omitted). Unknown frames are kept in place as *UnknownFrame.
type Message struct {
	WireVersion uint16
	Kind        MsgKind
	Frames      []Frame
}

// OpKind is a push operation kind.
type OpKind uint8

// Operation kinds.
const (
	OpUpsert OpKind = 1
	OpDelete OpKind = 2
)

// opNames are the rendering names of OpKind values, indexed by value.
var opNames = []string{"", "upsert", "delete"}

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
