package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/protocol/syncerr"
)

// TestErrKindAndRetryLater: each kind of failure a load case meets is
// named for the count of errors by kind, and only the answers a client
// sends again later (HTTP 503/429, in-band sync.rate_limited) are
// retried, after their Retry-After.
func TestErrKindAndRetryLater(t *testing.T) {
	cases := []struct {
		name      string
		err       error
		kind      string
		retry     bool
		retryWait time.Duration
	}{
		{"503 with code and Retry-After", &statusError{Status: 503, Code: "sync.rate_limited", RetryAfter: 2 * time.Second}, "HTTP 503 sync.rate_limited", true, 2 * time.Second},
		{"429 without Retry-After", &statusError{Status: 429, RetryAfter: -1}, "HTTP 429", true, time.Second},
		{"500", &statusError{Status: 500, Code: "sync.internal_error", RetryAfter: -1}, "HTTP 500 sync.internal_error", false, 0},
		{"in-band rate limited", fmt.Errorf("push: %w", &syncerr.Error{Code: syncerr.RateLimited}), "sync.rate_limited", true, time.Second},
		{"in-band internal error (retryable in the catalog, still an error)", &syncerr.Error{Code: syncerr.InternalError}, "sync.internal_error", false, 0},
		{"deadline", fmt.Errorf("post: %w", context.DeadlineExceeded), "deadline exceeded", false, 0},
		{"other", errors.New("bench: decode response: short frame"), "bench: decode response: short frame", false, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := errKind(c.err); got != c.kind {
				t.Errorf("errKind = %q, want %q", got, c.kind)
			}
			wait, ok := retryLater(c.err)
			if ok != c.retry || wait != c.retryWait {
				t.Errorf("retryLater = %v, %v; want %v, %v", wait, ok, c.retryWait, c.retry)
			}
		})
	}
}

// TestRetryOpCountsRetriesApart: a request answered 503 (Retry-After: 0)
// twice and then 200 succeeds with two retries counted by kind and no
// error; one answered 500 fails at once, counted by the caller.
func TestRetryOpCountsRetriesApart(t *testing.T) {
	var calls int
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls++
		if calls <= 2 {
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"code":"sync.rate_limited"}`))
			return
		}
		if r.URL.Path == "/fail" {
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = w.Write([]byte(`{"code":"sync.internal_error"}`))
			return
		}
		_, _ = w.Write([]byte("ok"))
	}))
	defer srv.Close()
	ctx := context.Background()
	rt := httpRT{url: srv.URL + "/sync", hc: srv.Client()}
	var tl tally
	err := retryOp(ctx, &tl, func() error {
		_, err := rt.roundTrip(ctx, engine.Identity{ActorID: "a", Partition: "p"}, []byte("x"))
		return err
	})
	if err != nil || calls != 3 {
		t.Fatalf("retryOp = %v after %d calls, want success after 3", err, calls)
	}
	if got := tl.retries["HTTP 503 sync.rate_limited"]; got != 2 || len(tl.retries) != 1 {
		t.Fatalf("retries = %v, want 2 of HTTP 503 sync.rate_limited", tl.retries)
	}
	rt.url = srv.URL + "/fail"
	err = retryOp(ctx, &tl, func() error {
		_, err := rt.roundTrip(ctx, engine.Identity{ActorID: "a", Partition: "p"}, []byte("x"))
		return err
	})
	if errKind(err) != "HTTP 500 sync.internal_error" || calls != 4 {
		t.Fatalf("retryOp on a 500 = %v (%s) after %d calls, want one call and the 500", err, errKind(err), calls)
	}
	tl.fail(err)
	if note := kindsNote("errors by kind", tl.kinds); note != "errors by kind: HTTP 500 sync.internal_error ×1" {
		t.Fatalf("note = %q", note)
	}
}
