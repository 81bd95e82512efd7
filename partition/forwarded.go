package partition

import (
	"errors"
	"io"
)

// ForwardChunkBytes is the most a forwarded reply holds between reading
// the owner's bytes and writing them to the client: WriteTo copies in
// chunks of at most this size and flushes after each.
const ForwardChunkBytes = 32 << 10

// NewForwardedReply returns a Reply built by another cluster member: body
// is the owner's whole SSP2 response (END included), streamed as it
// arrives. WriteTo copies it to the client in chunks of at most
// ForwardChunkBytes, flushing after each, and closes body; the reply's
// frames and counts stay empty (the owner counted them). Close releases
// body when the reply is never written.
func NewForwardedReply(body io.ReadCloser) *Reply { return &Reply{forwarded: body} }

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
