package httpsync

import (
	"context"
	"errors"
	"io"
	"math"
	"net/http"

	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/transport/bodybudget"
)

// readRequestBody reads a POST /sync body whole, decompressed, charging
// what it holds to c (see readCharged): the declared Content-Length of an
// identity body up front, a compressed body as it arrives (a byte per
// byte), the decoded bytes as they are decoded (bodybudget.DecodedFactor
// per byte). A compressed copy is returned to c once it is decoded. Errors carry their code; bodyStatus gives their HTTP status.
func readRequestBody(ctx context.Context, r *http.Request, maxBody int64, c *bodybudget.Charge) ([]byte, error) {
	body, err := decodedBody(ctx, r, maxBody, c)
	if err != nil {
		return nil, err
	}
	defer body.Close()
	declared := int64(-1)
	if body == r.Body {
		declared = r.ContentLength
	}
	return readCharged(ctx, body, declared, maxBody, bodybudget.DecodedFactor, c, "request body")
}

// readCharged reads r whole, at most max bytes (more fails with
// sync.invalid_request wrapping ssp2.ErrTooLarge; a declared length above
// max fails before anything is read). It grows c by perByte bytes for
// each byte before it holds them: declared ones up front when declared >=
// 0 (the buffer is allocated at once), else each growth of its buffer. A Grow refused by the budget is returned
// as it is (sync.rate_limited wrapping bodybudget.ErrBusy); one cut short
// because ctx ended is sync.rate_limited too (the client left while
// waiting). what names the body in errors.
func readCharged(ctx context.Context, r io.Reader, declared, max, perByte int64, c *bodybudget.Charge, what string) ([]byte, error) {
	if declared > max {
		return nil, syncerr.Wrap(syncerr.InvalidRequest, ssp2.ErrTooLarge, "%s of %d bytes exceeds the %d byte limit", what, declared, max)
	}
	if declared >= 0 {
		if err := c.Grow(ctx, perByte*declared); err != nil {
			return nil, budgetError(err, what)
		}
		b := make([]byte, declared)
		if _, err := io.ReadFull(r, b); err != nil {
			return nil, bodyError(err, what+" could not be read")
		}
		return b, nil
	}
	limit := int(min(max, math.MaxInt-1)) + 1 // one byte past max tells a body that is too long
	var b []byte
	for {
		if len(b) == cap(b) {
			nb, err := c.GrowBuffer(ctx, b, limit, perByte)
			switch {
			case err != nil:
				return nil, budgetError(err, what)
			case len(nb) == cap(nb):
				return nil, syncerr.Wrap(syncerr.InvalidRequest, ssp2.ErrTooLarge, "%s exceeds the %d byte limit", what, max)
			}
			b = nb
		}
		k, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+k]
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, bodyError(err, what+" could not be read")
		}
	}
	if int64(len(b)) > max {
		return nil, syncerr.Wrap(syncerr.InvalidRequest, ssp2.ErrTooLarge, "%s exceeds the %d byte limit", what, max)
	}
	return b, nil
}

// budgetError is a refused Grow: the budget's own error, or (ctx ended:
// the client left while waiting) sync.rate_limited wrapping ctx's error.
func budgetError(err error, what string) error {
	if errors.Is(err, bodybudget.ErrBusy) {
		return err
	}
	return syncerr.Wrap(syncerr.RateLimited, err, "%s abandoned while it waited for the server's request-body budget", what)
}

// returnOnClose returns n bytes to c when the reader is closed (a
// compressed copy the reader decoded from).
type returnOnClose struct {
	io.ReadCloser
	c *bodybudget.Charge
	n int64
}

func (r *returnOnClose) Close() error {
	err := r.ReadCloser.Close()
	r.c.Return(r.n)
	r.n = 0
	return err
}
