// Package yjs merges Yjs documents stored as update v1 bytes: the yjs-doc
// merger of crdt columns (SPEC §5.10).
//
// It decodes the Yjs update v1 encoding (lib0 varints and strings; Item,
// GC and Skip structs with their info bits and the ten content types; the
// delete set), merges updates with the semantics of Yjs mergeUpdates, and
// encodes the result as update v1, which any Yjs client applies. It never
// interprets the document: contents are kept as written (strings are split
// by UTF-16 code unit, as Yjs splits them).
//
// Limits: an update is at most MaxUpdateBytes and holds at most MaxStructs
// structs and MaxDeleteRanges delete ranges; "any" values nest at most 64
// deep. Every length and count is checked against the remaining input
// before anything is allocated, so hostile bytes cost at most a bounded
// amount of memory and time and are refused with an error, never a panic.
package yjs

// CRDTType is the crdtType of the columns Merger merges.
const CRDTType = "yjs-doc"

// Merger is the yjs-doc merger: it satisfies partition.Merger. The zero
// value is ready to use and safe for concurrent use.
type Merger struct{}

// Merge returns the merge of a column's stored Yjs update and an incoming
// one (see MergeUpdates): commutative, associative and idempotent, byte for
// byte. A nil or empty stored value is an empty document, and so is an
// empty incoming value. Invalid or oversized input is an error; neither
// argument is modified or retained.
func (Merger) Merge(stored, incoming []byte) ([]byte, error) {
	var in [][]byte
	for _, b := range [][]byte{stored, incoming} {
		if len(b) > 0 {
			in = append(in, b)
		}
	}
	return MergeUpdates(in...)
}
