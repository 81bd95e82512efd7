package httpsync

import (
	"compress/gzip"
	"errors"
	"io"
	"net/http"
	"strconv"
	"sync"

	"github.com/klauspost/compress/zstd"
)

// Compression policy of /sync answers:
//
//   - An answer shorter than Options.CompressMinBytes (default
//     DefaultCompressMinBytes, about one TCP segment) goes out uncompressed
//     with a Content-Length, whatever the client accepts: compressing a few
//     hundred bytes saves nothing on the wire and costs the server more CPU
//     than the whole sync round.
//   - A longer answer is compressed with zstd when the client accepts it,
//     else gzip, else not at all (an encoding with q=0 is refused), and
//     streamed as it is encoded.
//   - Encoders and decoders are pooled: a zstd encoder allocates about 1 MiB
//     of history and a gzip writer about 800 KiB when created, so creating
//     one per answer drove most of the server's garbage collection.
//
// Request bodies may be gzip or zstd (Content-Encoding); their decoders are
// pooled too, and the body limit applies after decompression.

// DefaultCompressMinBytes is the default answer size below which answers
// are sent uncompressed.
const DefaultCompressMinBytes = 1400

var (
	zstdEncoders = sync.Pool{New: func() any {
		zw, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1), zstd.WithLowerEncoderMem(true))
		if err != nil {
			panic(err) // only for invalid options
		}
		return zw
	}}
	gzipWriters = sync.Pool{New: func() any {
		zw, _ := gzip.NewWriterLevel(io.Discard, gzip.BestSpeed)
		return zw
	}}
	zstdDecoders = sync.Pool{New: func() any {
		zr, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(64<<20), zstd.WithDecoderLowmem(true),
			zstd.WithDecoderMaxWindow(maxZstdWindow))
		if err != nil {
			panic(err)
		}
		return zr
	}}
	gzipReaders sync.Pool // *gzip.Reader
	smallBufs   = sync.Pool{New: func() any { b := make([]byte, 0, 2*DefaultCompressMinBytes); return &b }}
)

// compresses reports whether an answer of size bytes to a client sending
// accept (Accept-Encoding) is compressed under the policy of
// answerWriter with minBytes.
func compresses(accept string, size int64, minBytes int) bool {
	return pickEncoding(accept) != "" && size >= int64(minBytes)
}

// answerWriter writes a 200 answer body through the compression policy: it
// holds back the first min bytes, and decides at the first byte past them
// (compress) or at Close (identity, with Content-Length). It sends the
// status line itself, so the caller sets every other header first.
type answerWriter struct {
	w       http.ResponseWriter
	dst     io.Writer // the body sink (w, or w behind a deadline renewer)
	enc     string    // "zstd", "gzip" or "" (identity)
	min     int
	buf     *[]byte
	zw      io.WriteCloser
	decided bool
}

func newAnswerWriter(w http.ResponseWriter, dst io.Writer, accept string, minBytes int) *answerWriter {
	a := &answerWriter{w: w, dst: dst, enc: pickEncoding(accept), min: minBytes}
	if a.enc == "" || a.min <= 0 {
		a.start(a.enc != "")
	} else {
		a.buf = smallBufs.Get().(*[]byte)
	}
	return a
}

// Write implements io.Writer.
func (a *answerWriter) Write(p []byte) (int, error) {
	if !a.decided {
		if len(*a.buf)+len(p) < a.min {
			*a.buf = append(*a.buf, p...)
			return len(p), nil
		}
		if err := a.start(true); err != nil {
			return 0, err
		}
	}
	if a.zw != nil {
		return a.zw.Write(p)
	}
	return a.dst.Write(p)
}

// start sends the status line (with Content-Encoding when compressing) and
// whatever was held back.
func (a *answerWriter) start(compress bool) error {
	a.decided = true
	var held []byte
	if a.buf != nil {
		held = *a.buf
	}
	h := a.w.Header()
	switch {
	case compress && a.enc == "zstd":
		zw := zstdEncoders.Get().(*zstd.Encoder)
		zw.Reset(a.dst)
		a.zw = zw
		h.Set("Content-Encoding", "zstd")
	case compress && a.enc == "gzip":
		zw := gzipWriters.Get().(*gzip.Writer)
		zw.Reset(a.dst)
		a.zw = zw
		h.Set("Content-Encoding", "gzip")
	case a.buf != nil:
		// The whole answer is held: say its length (no chunked encoding).
		h.Set("Content-Length", strconv.Itoa(len(held)))
	}
	a.w.WriteHeader(http.StatusOK)
	var err error
	if len(held) > 0 {
		if a.zw != nil {
			_, err = a.zw.Write(held)
		} else {
			_, err = a.dst.Write(held)
		}
	}
	if a.buf != nil {
		*a.buf = (*a.buf)[:0]
		if cap(*a.buf) <= 4*DefaultCompressMinBytes {
			smallBufs.Put(a.buf)
		}
		a.buf = nil
	}
	return err
}

// Flush sends what was written so far (a streamed answer's page): an
// undecided answer is decided now, compressed if the client accepts an
// encoding (its length is not known yet), and the compressor and the
// response are flushed.
func (a *answerWriter) Flush() error {
	if !a.decided {
		// Only an answer the client may get compressed is undecided (one
		// it may not starts at once, chunked): compress it, as its length
		// is not known yet.
		if err := a.start(true); err != nil {
			return err
		}
	}
	if f, ok := a.zw.(interface{ Flush() error }); ok {
		if err := f.Flush(); err != nil {
			return err
		}
	}
	if err := http.NewResponseController(a.w).Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return err
	}
	return nil
}

// Close finishes the answer: an undecided answer goes out uncompressed; a
// compressed one is flushed and its encoder returned to the pool.
func (a *answerWriter) Close() error {
	if !a.decided {
		return a.start(false)
	}
	if a.zw == nil {
		return nil
	}
	err := a.zw.Close()
	switch zw := a.zw.(type) {
	case *zstd.Encoder:
		zw.Reset(nil)
		zstdEncoders.Put(zw)
	case *gzip.Writer:
		zw.Reset(io.Discard)
		gzipWriters.Put(zw)
	}
	a.zw = nil
	return err
}

// pooledZstdReader returns a pooled zstd decoder reading r; Close returns
// it to the pool.
func pooledZstdReader(r io.Reader) (io.ReadCloser, error) {
	zr := zstdDecoders.Get().(*zstd.Decoder)
	if err := zr.Reset(r); err != nil {
		zstdDecoders.Put(zr)
		return nil, err
	}
	return &zstdBody{zr: zr}, nil
}

type zstdBody struct{ zr *zstd.Decoder }

func (b *zstdBody) Read(p []byte) (int, error) {
	if b.zr == nil {
		return 0, io.ErrClosedPipe
	}
	return b.zr.Read(p)
}

func (b *zstdBody) Close() error {
	if b.zr != nil {
		_ = b.zr.Reset(nil)
		zstdDecoders.Put(b.zr)
		b.zr = nil
	}
	return nil
}

// pooledGzipReader returns a pooled gzip reader of r; Close returns it to
// the pool.
func pooledGzipReader(r io.Reader) (io.ReadCloser, error) {
	zr, _ := gzipReaders.Get().(*gzip.Reader)
	var err error
	if zr == nil {
		zr, err = gzip.NewReader(r)
	} else {
		err = zr.Reset(r)
	}
	if err != nil {
		if zr != nil {
			gzipReaders.Put(zr)
		}
		return nil, err
	}
	return &gzipBody{zr: zr}, nil
}

type gzipBody struct{ zr *gzip.Reader }

func (b *gzipBody) Read(p []byte) (int, error) {
	if b.zr == nil {
		return 0, io.ErrClosedPipe
	}
	return b.zr.Read(p)
}

func (b *gzipBody) Close() error {
	if b.zr != nil {
		gzipReaders.Put(b.zr)
		b.zr = nil
	}
	return nil
}
