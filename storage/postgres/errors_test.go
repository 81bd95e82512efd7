package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/synclane/synclane/storage"
)

func TestClassify(t *testing.T) {
	cases := []struct {
		err        error
		retryable  bool
		constraint bool
	}{
		{&pgconn.PgError{Code: "23505"}, false, true},
		{&pgconn.PgError{Code: "23502"}, false, true},
		{&pgconn.PgError{Code: "40001"}, true, false},
		{&pgconn.PgError{Code: "40P01"}, true, false},
		{&pgconn.PgError{Code: "08006"}, true, false},
		{&pgconn.PgError{Code: "57P01"}, true, false},
		{&pgconn.PgError{Code: "53300"}, true, false},
		{&pgconn.PgError{Code: "42P01"}, false, false},
		{&pgconn.PgError{Code: "22021"}, false, false},
		{fmt.Errorf("read: %w", io.ErrUnexpectedEOF), true, false},
		{context.Canceled, false, false},
		{errors.New("other"), false, false},
	}
	for _, c := range cases {
		err := classify("op", fmt.Errorf("wrapped: %w", c.err))
		if got := IsRetryable(err); got != c.retryable {
			t.Errorf("IsRetryable(%v) = %v, want %v", c.err, got, c.retryable)
		}
		if got := errors.Is(err, storage.ErrConstraint); got != c.constraint {
			t.Errorf("errors.Is(%v, ErrConstraint) = %v, want %v", c.err, got, c.constraint)
		}
		var r interface{ Retryable() bool }
		if !errors.As(err, &r) || r.Retryable() != c.retryable {
			t.Errorf("%v: Retryable() interface does not agree", c.err)
		}
	}
	if err := classifyRowWrite("PutRow", &pgconn.PgError{Code: "22021"}); !errors.Is(err, storage.ErrConstraint) || !errors.Is(err, storage.ErrUnstorable) {
		t.Errorf("row write untranslatable character: %v, want ErrConstraint and ErrUnstorable", err)
	}
	if err := classifyRowWrite("PutRow", &pgconn.PgError{Code: "54000"}); !errors.Is(err, storage.ErrConstraint) || !errors.Is(err, storage.ErrUnstorable) {
		t.Errorf("row write over-long index row: %v, want ErrConstraint and ErrUnstorable", err)
	}
	if err := classifyRowWrite("PutRow", &pgconn.PgError{Code: "22003"}); !errors.Is(err, storage.ErrConstraint) || errors.Is(err, storage.ErrUnstorable) {
		t.Errorf("row write numeric out of range: %v, want ErrConstraint only", err)
	}
	if IsRetryable(nil) || classify("op", nil) != nil {
		t.Error("nil error classified as an error")
	}
}

func TestRetryStopsOnPermanentErrors(t *testing.T) {
	calls := 0
	err := retry(t.Context(), "op", func() error { calls++; return &pgconn.PgError{Code: "40001"} })
	if calls != retryAttempts || !IsRetryable(err) {
		t.Fatalf("serialization failure: %d calls, err %v", calls, err)
	}
	calls = 0
	err = retry(t.Context(), "op", func() error {
		calls++
		if calls == 1 {
			return &pgconn.PgError{Code: "40P01"}
		}
		return nil
	})
	if calls != 2 || err != nil {
		t.Fatalf("deadlock then success: %d calls, err %v", calls, err)
	}
	calls = 0
	err = retry(t.Context(), "op", func() error { calls++; return &pgconn.PgError{Code: "23505"} })
	if calls != 1 || !errors.Is(err, storage.ErrConstraint) {
		t.Fatalf("constraint: %d calls, err %v", calls, err)
	}
}

// A stale ownership fence is permanent: retry runs the operation once,
// and the classified error still wraps storage.ErrOwnershipLost, also when
// classify wraps it twice (BeginPush classifies what begin returns).
func TestRetryDoesNotRetryOwnershipLost(t *testing.T) {
	calls := 0
	lost := checkFence(storage.WithFence(t.Context(), 1), "p", 2)
	err := retry(t.Context(), "op", func() error { calls++; return fmt.Errorf("lock partition: %w", lost) })
	if calls != 1 {
		t.Fatalf("retry ran a stale-fence operation %d times, want once", calls)
	}
	err = classify("outer", err)
	if !errors.Is(err, storage.ErrOwnershipLost) || IsRetryable(err) {
		t.Fatalf("classified stale fence = %v (retryable %v), want ErrOwnershipLost, not retryable", err, IsRetryable(err))
	}
	if lost == nil || checkFence(storage.WithFence(t.Context(), 2), "p", 2) != nil || checkFence(t.Context(), "p", 2) != nil {
		t.Fatalf("checkFence: stale %v; current and unfenced must be nil", lost)
	}
	if err := checkFence(storage.WithFence(t.Context(), 0), "p", 0); !errors.Is(err, storage.ErrOwnershipLost) {
		t.Fatalf("checkFence of fence 0 on an unclaimed partition = %v, want ErrOwnershipLost (0 is no generation)", err)
	}
}
