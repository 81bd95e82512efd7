package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/synclane/synclane/storage"
)

// Error is the error type of failed database operations. It wraps the
// driver error (and storage.ErrConstraint for constraint violations), so
// errors.Is and errors.As see both.
type Error struct {
	// Op names the failed operation, e.g. "PutRow".
	Op string
	// Code is the SQLSTATE of a server error, "" otherwise.
	Code string
	// retryable is true for serialization failures, deadlocks and lost or
	// refused connections: retrying the whole operation may succeed.
	retryable bool
	err       error
}

// Error implements error.
func (e *Error) Error() string {
	if e.Code != "" {
		return fmt.Sprintf("postgres: %s: SQLSTATE %s: %v", e.Op, e.Code, e.err)
	}
	return fmt.Sprintf("postgres: %s: %v", e.Op, e.err)
}

// Unwrap returns the wrapped errors.
func (e *Error) Unwrap() error { return e.err }

// Retryable reports whether the failed operation may succeed when the
// caller retries it from the start (for a PushTx: a new BeginPush). Callers
// that do not import this package test for interface{ Retryable() bool }.
func (e *Error) Retryable() bool { return e.retryable }

// IsRetryable reports whether err (or an error it wraps) is a transient
// database failure: a serialization failure (40001), a deadlock (40P01),
// an exhausted server (53xxx), an operator intervention (57P01-57P03,
// 57014 statement timeout), a connection exception (class 08) or a lost or
// refused connection. Cancellation of the caller's context is not
// retryable.
func IsRetryable(err error) bool {
	if err == nil {
		return false
	}
	var e *Error
	if errors.As(err, &e) {
		return e.retryable
	}
	return transient(err)
}

// transient classifies a raw driver error.
func transient(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		switch {
		case pg.Code == "40001", pg.Code == "40P01":
			return true
		case len(pg.Code) == 5 && (pg.Code[:2] == "08" || pg.Code[:2] == "53"):
			return true
		case pg.Code == "57P01", pg.Code == "57P02", pg.Code == "57P03", pg.Code == "57014":
			return true
		}
		return false
	}
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) {
		return true
	}
	if pgconn.SafeToRetry(err) {
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return true
	}
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed)
}

// classify wraps err from operation op into an *Error. Class 23 SQLSTATEs
// additionally wrap storage.ErrConstraint, and the writer fence trigger's
// writerFenceSQLState wraps storage.ErrWriterFenced, and the move guard's
// movedSQLState storage.ErrPartitionMoved (move.go).
func classify(op string, err error) error {
	if err == nil {
		return nil
	}
	var already *Error
	if errors.As(err, &already) {
		return err
	}
	e := &Error{Op: op, err: err, retryable: transient(err)}
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		e.Code = pg.Code
		switch {
		case pg.Code == writerFenceSQLState:
			e.err = fmt.Errorf("%w: %w", storage.ErrWriterFenced, err)
		case pg.Code == movedSQLState:
			e.err = fmt.Errorf("%w: %w", storage.ErrPartitionMoved, err)
		case len(pg.Code) == 5 && pg.Code[:2] == "23":
			e.err = fmt.Errorf("%w: %w", storage.ErrConstraint, err)
		}
	}
	return e
}

// classifyRowWrite is classify for row writes: data exceptions (class 22,
// e.g. a NUL character PostgreSQL text cannot hold) make the row
// unstorable, so they are reported as constraint violations too; an
// untranslatable character (22021) or an over-long index row (54000) also
// wraps storage.ErrUnstorable. (storage.CheckRow refuses such rows before
// they are sent; this is the backstop.)
func classifyRowWrite(op string, err error) error {
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		switch {
		case pg.Code == "22021" || pg.Code == "54000":
			return &Error{Op: op, Code: pg.Code, err: fmt.Errorf("%w: %w: %w", storage.ErrUnstorable, storage.ErrConstraint, err)}
		case len(pg.Code) == 5 && pg.Code[:2] == "22":
			return &Error{Op: op, Code: pg.Code, err: fmt.Errorf("%w: %w", storage.ErrConstraint, err)}
		}
	}
	return classify(op, err)
}

// retryAttempts bounds the retries of safely retryable operations.
const retryAttempts = 4

// retryCodes are the SQLSTATEs safely retryable operations retry on.
func retryableConflict(err error) bool {
	var pg *pgconn.PgError
	return errors.As(err, &pg) && (pg.Code == "40001" || pg.Code == "40P01")
}

// retry runs fn until it succeeds, fails with something other than a
// serialization failure or deadlock, or retryAttempts ran out. fn must be
// safe to run again after such a failure (its transaction rolled back).
func retry(ctx context.Context, op string, fn func() error) error {
	backoff := 5 * time.Millisecond
	for attempt := 1; ; attempt++ {
		err := fn()
		if err == nil || attempt == retryAttempts || !retryableConflict(err) {
			return classify(op, err)
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return classify(op, err)
		case <-t.C:
		}
		backoff *= 4
	}
}
