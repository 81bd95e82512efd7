package partition

import (
	"context"
	"errors"
	"testing"

	"github.com/synclane/synclane/storage"
)

type stubGate struct {
	g   storage.ServeGate
	err error
}

func (s stubGate) ReadServeGate(context.Context, string, int32) (storage.ServeGate, error) {
	return s.g, s.err
}

// A fenced gate read passes only the generation the actor claimed; any
// other (a newer claim, or a registry row without one) is an ownership
// loss, and a read failure is passed on as it is.
func TestFencedGateRead(t *testing.T) {
	readErr := errors.New("read failed")
	for _, tc := range []struct {
		name    string
		fence   int64
		read    stubGate
		wantErr error
	}{
		{"same generation", 3, stubGate{g: storage.ServeGate{OwnerGeneration: 3}}, nil},
		{"claimed since", 3, stubGate{g: storage.ServeGate{OwnerGeneration: 4}}, storage.ErrOwnershipLost},
		{"no generation recorded", 3, stubGate{g: storage.ServeGate{}}, storage.ErrOwnershipLost},
		{"read failure", 3, stubGate{err: readErr}, readErr},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := fencedGate{r: tc.read, fence: tc.fence}.ReadServeGate(context.Background(), "p", 1)
			if tc.wantErr == nil && err != nil || tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
		})
	}
}
