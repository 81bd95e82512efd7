package blobs_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"testing"

	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/storage/blobstore"
)

// failingBody yields data, then fails with err.
type failingBody struct {
	data []byte
	err  error
}

func (b *failingBody) Read(p []byte) (int, error) {
	if len(b.data) == 0 {
		return 0, b.err
	}
	n := copy(p, b.data)
	b.data = b.data[n:]
	return n, nil
}

// A body that cannot be read to its end is the client's fault, never
// sync.internal_error: cut short, stalled past a deadline (the error still
// tells the deadline), or abandoned, it is sync.invalid_request, whether the
// blob is new or already stored; nothing is stored, no metadata is left.
func TestUploadBodyFailuresAreInvalidRequests(t *testing.T) {
	data := bytes.Repeat([]byte("z"), 100<<10)
	id := blobstore.IDOf(data)
	for _, stored := range []bool{false, true} {
		f := newFixture(t, 0)
		if stored {
			if err := f.upload(t, data); err != nil {
				t.Fatal(err)
			}
		}
		for _, cause := range []error{io.ErrUnexpectedEOF, fmt.Errorf("read tcp: %w", os.ErrDeadlineExceeded), context.Canceled} {
			err := f.svc.Upload(context.Background(), id, "", int64(len(data)), 0, &failingBody{data: data[:len(data)/2], err: cause})
			e := syncerr.As(err)
			if e.Code != syncerr.InvalidRequest || !errors.Is(err, cause) {
				t.Fatalf("stored %v, body failing with %v: %v (%s), want sync.invalid_request wrapping it", stored, cause, err, e.Code)
			}
			m, gerr := f.index.GetBlob(context.Background(), id)
			if gerr != nil || (m == nil) == stored {
				t.Fatalf("stored %v, after %v: metadata %+v (%v)", stored, cause, m, gerr)
			}
		}
	}
}
