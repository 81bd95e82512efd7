package partition

import (
	"errors"
	"io"
	"sync"

	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
)

// Reply is a built SSP2 response: the frames a request earned, in grammar
// order, without END. Build it with Engine.Sync; stream it with WriteTo.
// Frames holds a bootstrap section's first page only: WriteTo builds and
// writes its further pages (each verified against the gate) before the
// section's SUB_END, so they are not in Frames. Write a Reply once:
// WriteTo drops each SEGMENT_INLINE from Frames once it is written.
type Reply struct {
	WireVersion uint16
	Frames      []ssp2.Frame
	// Applied, Cached and Rejected count the push results in the reply.
	Applied, Cached, Rejected int
	// Reset reports an epoch-reset or schema-floor reply.
	Reset bool

	// built estimates the bytes of commits and segments added so far.
	built int
	// streams are the bootstrap sections whose later pages are built while
	// the reply is written (stream.go), in frame order.
	streams []*pageStream
	// incremental lists the sections served from the log, for expireBelow.
	incremental []incrementalSection
	// forwarded is the body of a reply another cluster member built
	// (NewForwardedReply); WriteTo copies it.
	forwarded     io.ReadCloser
	forwardedSize int64
}

// incrementalSection is the frames [start, end) of a subscription served
// incrementally from its cursor.
type incrementalSection struct {
	start, end int
	sub        *ssp2.Subscription
}

// expireBelow replaces every incremental section whose cursor is below
// horizon with a reset (sync.cursor_expired): its commits were read while
// the log below the horizon was being pruned, so the window may miss some.
// A cursor equal to the horizon is still complete. Streamed sections after
// a replaced one keep pointing at their SUB_END.
func (r *Reply) expireBelow(horizon int64) {
	for i := len(r.incremental) - 1; i >= 0; i-- {
		s := r.incremental[i]
		if s.sub.Cursor >= horizon {
			continue
		}
		reset := resetFrames(s.sub)
		r.Frames = append(r.Frames[:s.start], append(reset, r.Frames[s.end:]...)...)
		for _, st := range r.streams {
			if st.at >= s.end {
				st.at += len(reset) - (s.end - s.start)
			}
		}
	}
	r.incremental = nil
}

// full reports whether the reply has reached its byte budget.
func (r *Reply) full(budget int) bool { return r.built >= budget }

// Header returns the reply's RESP_HEADER.
func (r *Reply) Header() *ssp2.RespHeader {
	if len(r.Frames) == 0 {
		return nil
	}
	h, _ := r.Frames[0].(*ssp2.RespHeader)
	return h
}

// WriteTo streams the reply as an SSP2 response, frame by frame, ending with
// END. Streamed bootstrap pages are built as it goes; when one is refused
// (gate closed or token changed) or fails, the response ends with an ERROR
// frame and END. A frame that cannot be encoded (a server bug) is replaced by an
// in-band ERROR frame so the client rolls back the open section. After each
// streamed page the bytes so far are written to w, and w is flushed if it
// has a Flush() error method (a transport's buffered or compressing
// writer), so the client can take that page while the next is built. It
// returns the bytes written and the first write error.
func (r *Reply) WriteTo(w io.Writer) (int64, error) {
	if r.forwarded != nil {
		return r.writeForwarded(w)
	}
	cw := &countingWriter{w: w}
	// The encoder buffers up to 32 KiB itself; encoders are pooled so a
	// reply costs no buffer allocation.
	enc := encoderPool.Get().(*ssp2.Encoder)
	enc.Reset(cw, r.WireVersion, ssp2.KindResponse)
	defer func() {
		enc.Reset(io.Discard, r.WireVersion, ssp2.KindResponse)
		encoderPool.Put(enc)
	}()
	next := 0 // the next stream
	for i, f := range r.Frames {
		for next < len(r.streams) && r.streams[next].at == i {
			s := r.streams[next]
			next++
			for {
				page, err := s.next()
				if err != nil {
					// The gate closed or the page failed: end the response
					// with ERROR and END; the client drops the section.
					if err2 := enc.WriteFrame(errorFrame(syncerr.As(err))); err2 != nil {
						return cw.n, errors.Join(err, err2)
					}
					if err := enc.Close(); err != nil {
						return cw.n, err
					}
					return cw.n, cw.err
				}
				if page == nil {
					break
				}
				if err := enc.WriteFrame(page); err != nil {
					return cw.n, err
				}
				s.written(page)
				// The page goes out now, not when the encoder's buffer
				// fills: a client downloads (or applies) it while the next
				// one is built. A reference is a few hundred bytes, so
				// without this a by-ref section left only at its end.
				if err := enc.Flush(); err != nil {
					return cw.n, err
				}
				if f, ok := w.(interface{ Flush() error }); ok {
					if err := f.Flush(); err != nil {
						return cw.n, err
					}
				}
			}
			s.finish()
		}
		if err := enc.WriteFrame(f); err != nil {
			if cw.err != nil {
				return cw.n, cw.err
			}
			ef := errorFrame(syncerr.Wrap(syncerr.InternalError, err, "the server could not encode the response"))
			if err2 := enc.WriteFrame(ef); err2 != nil {
				return cw.n, errors.Join(err, err2)
			}
			break
		}
		if si, ok := f.(*ssp2.SegmentInline); ok {
			r.Frames[i] = nil // written: the response holds one page at a time
			if next < len(r.streams) && r.streams[next].recycle == si {
				r.streams[next].written(si)
			}
		}
	}
	if err := enc.Close(); err != nil {
		return cw.n, err
	}
	return cw.n, cw.err
}

var encoderPool = sync.Pool{New: func() any { return ssp2.NewEncoder(io.Discard, ssp2.WireV2, ssp2.KindResponse) }}

// errorFrame renders an error as an in-band ERROR frame.
func errorFrame(e *syncerr.Error) *ssp2.ErrorFrame {
	spec := e.Spec()
	return &ssp2.ErrorFrame{
		Code: string(e.Code), Message: e.Message, Category: spec.Category,
		Retryable: spec.Retryable, RecommendedAction: spec.RecommendedAction, Details: e.Details,
	}
}

type countingWriter struct {
	w   io.Writer
	n   int64
	err error
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	if err != nil && c.err == nil {
		c.err = err
	}
	return n, err
}

// addResult appends a PUSH_RESULT and counts it.
func (r *Reply) addResult(pr *ssp2.PushResult) {
	r.Frames = append(r.Frames, pr)
	switch pr.Status {
	case ssp2.CommitApplied:
		r.Applied++
	case ssp2.CommitCached:
		r.Cached++
	default:
		r.Rejected++
	}
}
