// Package ssp2 is the Syncular sync protocol (SSP2) wire codec: envelopes,
// request and response frames, the positional row codec, SSG2 rows segments,
// realtime control messages and the canonical JSON rendering used by the
// golden vectors.
//
// Every decode failure is a *DecodeError carrying a protocol error code
// (sync.invalid_request unless the protocol names another); decoders never
// panic on any input.
package ssp2

import "encoding/json"

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

// ReqHeader is REQ_HEADER (0x01).
type ReqHeader struct {
	ClientID      string
	SchemaVersion int32
	// LogEpoch is only on the wire in v2; nil means absent (epoch acquisition).
	LogEpoch *string
}

// Operation is one push operation inside a PUSH_COMMIT.
type Operation struct {
	Table       string
	RowID       string
	Op          OpKind
	BaseVersion *int64 // nil: last-write-wins
	Payload     []byte // row codec bytes; non-nil iff Op == OpUpsert
}

// PushCommit is PUSH_COMMIT (0x02).
type PushCommit struct {
	ClientCommitID string
	Operations     []Operation
}

// Accept bits of PULL_HEADER.
const (
	AcceptInlineRows uint8 = 1 << 0
	AcceptRefRows    uint8 = 1 << 1
	AcceptSQLite     uint8 = 1 << 2
	AcceptSignedURLs uint8 = 1 << 3
)

// PullHeader is PULL_HEADER (0x03). Values are as sent; clamping is the
// server's job (see Clamped).
type PullHeader struct {
	LimitCommits      int32
	LimitSnapshotRows int32
	MaxSnapshotPages  int32
	Accept            uint8
}

// Subscription is SUBSCRIPTION (0x04).
type Subscription struct {
	ID     string
	Table  string
	Scopes map[string][]string
	// Params is raw JSON kept byte-for-byte; nil means absent.
	Params json.RawMessage
	Cursor int64
	// BootstrapState is raw JSON kept byte-for-byte; nil means absent.
	BootstrapState json.RawMessage
}

// RespHeader is RESP_HEADER (0x10).
type RespHeader struct {
	RequiredSchemaVersion *int32
	LatestSchemaVersion   *int32
	LogEpoch              string // v2 only
	ResetRequired         bool   // v2 only
}

// CommitStatus is the status of a PUSH_RESULT.
type CommitStatus uint8

// Push result statuses.
const (
	CommitApplied  CommitStatus = 1
	CommitCached   CommitStatus = 2
	CommitRejected CommitStatus = 3
)

// OpStatus is the status of one operation result record.
type OpStatus uint8

// Operation result statuses.
const (
	OpApplied  OpStatus = 1
	OpConflict OpStatus = 2
	OpError    OpStatus = 3
)

// OpResult is one result record of a PUSH_RESULT.
type OpResult struct {
	OpIndex int32
	Status  OpStatus
	// Code and Message are set for conflict and error records.
	Code    string
	Message string
	// ServerVersion and ServerRow are set for conflict records.
	ServerVersion int64
	ServerRow     []byte
	// Retryable is set for error records.
	Retryable bool
}

// PushResult is PUSH_RESULT (0x11).
type PushResult struct {
	ClientCommitID string
	Status         CommitStatus
	CommitSeq      *int64 // present iff applied or cached
	Results        []OpResult
}

// PushResultDetail is one entry of PUSH_RESULT_DETAILS.
type PushResultDetail struct {
	OpIndex     int32
	DetailsJSON string
}

// PushResultDetails is PUSH_RESULT_DETAILS (0x1B).
type PushResultDetails struct {
	ClientCommitID string
	Entries        []PushResultDetail
}

// SubStatus is the status of a SUB_START.
type SubStatus uint8

// Subscription statuses.
const (
	SubActive  SubStatus = 1
	SubRevoked SubStatus = 2
	SubReset   SubStatus = 3
)

// SubStart is SUB_START (0x12).
type SubStart struct {
	ID              string
	Status          SubStatus
	ReasonCode      string
	EffectiveScopes map[string][]string
	Bootstrap       bool
}

// Change is one change inside a COMMIT frame.
type Change struct {
	TableIndex uint16
	RowID      string
	Op         OpKind
	RowVersion *int64 // present iff upsert
	Scopes     map[string]string
	Row        []byte // present (non-nil) iff upsert
}

// Commit is COMMIT (0x13).
type Commit struct {
	CommitSeq   int64
	CreatedAtMs int64
	ActorID     string
	Tables      []string
	Changes     []Change
}

// MediaType is the media type of a segment.
type MediaType uint8

// Segment media types.
const (
	MediaRows   MediaType = 1
	MediaSQLite MediaType = 2
)

// SegmentRef is SEGMENT_REF (0x14).
type SegmentRef struct {
	SegmentID      string
	MediaType      MediaType
	Table          string
	ByteLength     int64
	RowCount       int64
	AsOfCommitSeq  int64
	ScopeDigest    string
	RowCursor      *string
	NextRowCursor  *string
	URL            *string
	URLExpiresAtMs *int64 // present iff URL is
}

// SegmentInline is SEGMENT_INLINE (0x15): one whole SSG2 segment.
type SegmentInline struct {
	Payload []byte
	// Verified marks a Payload already known to be a valid SSG2 segment:
	// built by a SegmentBuilder in this process, or read back from a
	// content-addressed store of such segments. The Encoder then writes it
	// without decoding it again (a 10,000-row page costs about a millisecond
	// to validate, paid per client per page). Decoders never set it; set it
	// only for bytes this process produced or stored itself.
	Verified bool
	// Segment is Payload decoded, set only by a Decoder asked to
	// (Decoder.DecodeSegments): a client that applies the rows then decodes
	// the page once instead of validating it and decoding it again.
	// Encoders ignore it.
	Segment *Segment
}

// SubEnd is SUB_END (0x16).
type SubEnd struct {
	NextCursor int64
	// BootstrapState is raw JSON; nil means absent (bootstrap complete).
	BootstrapState json.RawMessage
}

// Lease is LEASE (0x19).
type Lease struct {
	LeaseID     string
	ExpiresAtMs int64
}

// ErrorFrame is ERROR (0x1F).
type ErrorFrame struct {
	Code              string
	Message           string
	Category          string
	Retryable         bool
	RecommendedAction string
	// Details is raw JSON; nil means absent.
	Details json.RawMessage
}

// FrameType implements Frame for every frame type: the registered type
// byte, or the preserved byte of an unknown frame.
func (f *UnknownFrame) FrameType() FrameType    { return f.Type }
func (*ReqHeader) FrameType() FrameType         { return FrameReqHeader }
func (*PushCommit) FrameType() FrameType        { return FramePushCommit }
func (*PullHeader) FrameType() FrameType        { return FramePullHeader }
func (*Subscription) FrameType() FrameType      { return FrameSubscription }
func (*RespHeader) FrameType() FrameType        { return FrameRespHeader }
func (*PushResult) FrameType() FrameType        { return FramePushResult }
func (*PushResultDetails) FrameType() FrameType { return FramePushResultDetails }
func (*SubStart) FrameType() FrameType          { return FrameSubStart }
func (*Commit) FrameType() FrameType            { return FrameCommit }
func (*SegmentRef) FrameType() FrameType        { return FrameSegmentRef }
func (*SegmentInline) FrameType() FrameType     { return FrameSegmentInline }
func (*SubEnd) FrameType() FrameType            { return FrameSubEnd }
func (*Lease) FrameType() FrameType             { return FrameLease }
func (*ErrorFrame) FrameType() FrameType        { return FrameError }

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
