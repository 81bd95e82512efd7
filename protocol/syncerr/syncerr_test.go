package syncerr

import (
	"errors"
	"fmt"
	"testing"
)

func TestCatalogAndWrapping(t *testing.T) {
	cases := []struct {
		code      Code
		status    int
		retryable bool
		category  string
	}{
		{InvalidRequest, 400, false, "invalid-request"},
		{AuthRequired, 401, true, "auth-required"},
		{AuthLeaseRequired, 401, true, "auth-required"},
		{AuthLeaseRevoked, 401, true, "auth-required"},
		{Forbidden, 403, false, "forbidden"},
		{SchemaNotReady, 503, true, "internal"},
		{IdempotencyCacheMiss, 500, true, "internal"},
		{TooManyOperations, 400, false, "invalid-request"},
		{BlobTooLarge, 413, false, "invalid-request"},
		{TransactionQueryUnsupported, 501, false, "internal"},
	}
	for _, c := range cases {
		s := Lookup(c.code)
		if s.HTTPStatus != c.status || s.Retryable != c.retryable || s.Category != c.category || s.RecommendedAction == "" {
			t.Errorf("%s: %+v", c.code, s)
		}
	}
	if s := Lookup("host.custom"); s.HTTPStatus != 400 || s.Retryable {
		t.Errorf("unknown code: %+v", s)
	}
	cause := errors.New("disk on fire")
	err := fmt.Errorf("push: %w", Wrap(Forbidden, cause, "no %s", "way"))
	if CodeOf(err) != Forbidden || !errors.Is(err, cause) || As(err).Message != "no way" {
		t.Fatalf("wrapping lost the code or cause: %v", err)
	}
	if CodeOf(cause) != InternalError || As(cause).Code != InternalError || As(cause).Message == cause.Error() {
		t.Fatal("uncoded errors must become internal errors with a generic message")
	}
	d := New(SchemaNotReady, "x").WithDetails(map[string]any{"a": 1})
	if string(d.Details) != `{"a":1}` {
		t.Fatalf("details %s", d.Details)
	}
}
