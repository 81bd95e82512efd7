// Package ssp2 is the Syncular sync protocol (SSP2) wire codec: envelopes,
// request and response frames, the positional row codec, SSG2 rows segments,
// realtime control messages and the canonical JSON rendering used by the
// golden vectors.
//
// Every decode failure is a *DecodeError carrying a protocol error code
// (sync.invalid_request unless the protocol names another); decoders never
// panic on any input.
//
// # Wire versions
//
// The codec decodes and encodes wire versions 1, 2 and 3
// (KnownWireVersions); any other version is a decode error before any
// frame is read, and PeekWireVersion reads the version from the header
// alone for a server's version window. A Message carries its version, and
// every frame's layout, rendering and parser follow it. Version 3 (SPEC
// §9) keeps the version 2 header layouts and frame registry and changes
// two layouts:
//   - the push operation payload is a sparse row (§2.4 "Sparse rows"):
//     presence bitmap, null bitmap over the present columns, their values.
//     The envelope carries it as opaque bytes, as in every version;
//     RowCodec.DecodeSparse, ValidateSparse and AppendSparse read and write
//     it with a table's columns, and RenderSparseJSON/ParseSparseJSON are
//     its §11.1 rule 11 rendering ({"columns":[…],"values":{present only}}).
//   - the conflict record of PUSH_RESULT ends with conflictColumns (bytes,
//     a ColumnSet, §6.3), after serverRow. Encoding a message at version 1
//     or 2 leaves it out, so one OpResult answers a client of any version.
//
// COMMIT rows, segment rows and serverRow stay full rows (RowCodec.Decode,
// Append) in every version.
//
// # One file per frame
//
// Each registered frame lives whole in frame_<name>.go (frame_commit.go,
// frame_sub_start.go, …): its type byte constant, its Go type and the
// helper types and enums only it uses, its decoder, its payload encoder,
// its §11.1 JSON rendering and parser, and its rule in the frame grammar.
// The envelope code (message.go, encoder.go, decoder.go, render.go,
// parsejson.go) names no frame: it dispatches through the registry in
// frame.go, an array indexed by type byte for decoding and the frame
// value's own methods for encoding and rendering.
//
// # Adding a frame
//
// Create frame_<name>.go holding:
//   - a FrameType constant for the type byte (SPEC §1.2), and the frame's
//     struct;
//   - FrameType, appendPayload and renderFields methods on the pointer type,
//     with var _ frameCodec = (*T)(nil);
//   - decode<T>(d *dec, r *rd) Frame, reading fields with r's methods, which
//     keep the first problem and its offset, and leaving r at the payload's
//     end;
//   - parse<T>(f *fields) Frame, reading members with f's methods in layout
//     order;
//   - order<T>(g *grammar, f Frame) string, where the frame may stand: it
//     reads and advances g (see the grammar comment in grammar.go);
//   - an init function calling registerFrame with the type byte, the
//     rendering name, the message kind and these three functions.
//
// Then create frame_<name>_test.go: a TestFrame<T> running checkFrame
// (frame_test.go) over examples of the frame, with their payload bytes and
// rendering spelled out, and checkRefusals over what the encoders refuse.
//
// Nothing else changes. TestFrameFilesSelfContained fails if another file
// names anything a frame file declares (but request.go, the typed view of a
// request, which a new request frame joins only if it should), or if a frame
// file uses another frame file's declarations.
//
// Code outside the package that acts on a particular frame (the transports,
// the replica in httpsynctest) type-switches on the frames it knows and
// skips the others, so a new frame reaches it only where it is wanted.
package ssp2
