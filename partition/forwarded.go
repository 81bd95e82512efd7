package partition

import (
	"errors"
	"io"
)

// ForwardChunkBytes is the most a streamed forwarded reply holds between
// reading the owner's bytes and writing them to the client: WriteTo
// copies in chunks of at most this size and flushes after each.
const ForwardChunkBytes = 32 << 10

// ForwardWholeMaxBytes is the largest forwarded reply of known size that
// WriteTo reads whole and writes in one piece without a flush, as a local
// reply of that size goes out (the transport then sets its length and
// decides its compression from the whole answer).
const ForwardWholeMaxBytes = 1 << 20

// NewForwardedReply returns a Reply built by another cluster member: body
// is the owner's whole SSP2 response (END included) and size its length
// when the owner sent it complete (-1: it streams). WriteTo writes a
// complete answer of at most ForwardWholeMaxBytes in one piece; any other
// it copies as it arrives, in chunks of at most ForwardChunkBytes,
// flushing after each. It closes body; the reply's frames and counts stay
// empty (the owner counted them). Close releases body when the reply is
// never written.
func NewForwardedReply(body io.ReadCloser, size int64) *Reply {
	return &Reply{forwarded: body, forwardedSize: size}
}

// Forwarded reports whether the reply was built by another member
// (NewForwardedReply).
func (r *Reply) Forwarded() bool { return r.forwarded != nil }

// Close releases a forwarded reply's body without writing it; it does
// nothing for other replies or after WriteTo.
func (r *Reply) Close() error {
	if r.forwarded == nil {
		return nil
	}
	return r.forwarded.Close()
}

// writeForwarded is WriteTo for a forwarded reply.
func (r *Reply) writeForwarded(w io.Writer) (int64, error) {
	defer r.forwarded.Close()
	if size := r.forwardedSize; size >= 0 && size <= ForwardWholeMaxBytes {
		whole := make([]byte, size)
		if _, err := io.ReadFull(r.forwarded, whole); err != nil {
			return 0, err // nothing written: the transport fails the request
		}
		k, err := w.Write(whole)
		return int64(k), err
	}
	buf := make([]byte, ForwardChunkBytes)
	flusher, _ := w.(interface{ Flush() error })
	var n int64
	for {
		k, rerr := r.forwarded.Read(buf)
		if k > 0 {
			wk, werr := w.Write(buf[:k])
			n += int64(wk)
			if werr != nil {
				return n, werr
			}
			if flusher != nil {
				if err := flusher.Flush(); err != nil {
					return n, err
				}
			}
		}
		if errors.Is(rerr, io.EOF) {
			return n, nil
		}
		if rerr != nil {
			// The owner (or the link to it) failed mid-response: the
			// client sees a truncated response and retries the round.
			return n, rerr
		}
	}
}
