package tracing

import "go.opentelemetry.io/otel/attribute"

// Span names (docs/running.md, "Observability: tracing", lists them with
// their attributes).
const (
	// SpanSync is one sync request, a server span: POST /sync, or a
	// request another cluster member forwarded.
	SpanSync = "synclane.sync"
	// SpanForward is the call forwarding a request to its partition's
	// owner (a client span).
	SpanForward = "synclane.forward"
	// SpanQueueWait is the time a request's job waited for the
	// partition's actor.
	SpanQueueWait = "synclane.queue_wait"
	// SpanGateOpen is opening the serve gate (for a push group: beginning
	// the storage transaction and opening the gate inside it).
	SpanGateOpen = "synclane.gate_open"
	// SpanApply is checking one request and applying its commits.
	SpanApply = "synclane.apply"
	// SpanCommit is the storage commit of a push group.
	SpanCommit = "synclane.commit"
	// SpanReplyBuild is building a request's pull part.
	SpanReplyBuild = "synclane.reply_build"
	// SpanGateVerify is re-reading the serve gate before replies leave.
	SpanGateVerify = "synclane.gate_verify"
	// SpanSegmentBuild is encoding one bootstrap page or SQLite image.
	SpanSegmentBuild = "synclane.segment_build"
	// SpanReaction is one delivery attempt of a durable reaction.
	SpanReaction = "synclane.reaction"
)

// Attribute keys.
const (
	Partition     = attribute.Key("synclane.partition")
	RequestKind   = attribute.Key("synclane.request.kind")
	Commits       = attribute.Key("synclane.push.commits")
	Operations    = attribute.Key("synclane.push.operations")
	Subscriptions = attribute.Key("synclane.pull.subscriptions")
	ErrorCode     = attribute.Key("synclane.error.code")
	HTTPStatus    = attribute.Key("http.response.status_code")
	GroupSize     = attribute.Key("synclane.group.requests")
	Member        = attribute.Key("synclane.member")
	Table         = attribute.Key("synclane.table")
	Lane          = attribute.Key("synclane.lane")
	Bytes         = attribute.Key("synclane.bytes")
	Rows          = attribute.Key("synclane.rows")
	CommitSeq     = attribute.Key("synclane.commit_seq")
	ReactionID    = attribute.Key("synclane.reaction.id")
	ReactionName  = attribute.Key("synclane.reaction.name")
	Attempt       = attribute.Key("synclane.reaction.attempt")
	Applied       = attribute.Key("synclane.push.applied")
	Rejected      = attribute.Key("synclane.push.rejected")
	// GateReused marks a pull's gate-open span whose token is the last
	// verify read's (no read of its own; see partition's pull).
	GateReused = attribute.Key("synclane.gate.reused")
)
