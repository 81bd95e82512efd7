package peer

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

func TestSignVerify(t *testing.T) {
	sec, err := NewSecret([]byte("s3cret\n"))
	if err != nil {
		t.Fatal(err)
	}
	other, _ := NewSecret([]byte("other"))
	now := time.UnixMilli(1_700_000_000_000)
	signed := func() *httptestReq {
		r := httptest.NewRequest("POST", "/_cluster/v1/sync", nil)
		sec.Sign(r, "http://a:1", now)
		return &httptestReq{r}
	}
	cases := []struct {
		name   string
		mutate func(h *httptestReq)
		secret Secret
		at     time.Time
		ok     bool
	}{
		{"valid", func(*httptestReq) {}, sec, now, true},
		{"valid within skew", func(*httptestReq) {}, sec, now.Add(MaxClockSkew - time.Second), true},
		{"too old", func(*httptestReq) {}, sec, now.Add(MaxClockSkew + time.Second), false},
		{"from the future", func(*httptestReq) {}, sec, now.Add(-MaxClockSkew - time.Second), false},
		{"other secret", func(*httptestReq) {}, other, now, false},
		{"member renamed", func(h *httptestReq) { h.r.Header.Set(MemberHeader, "http://evil:1") }, sec, now, false},
		{"path changed", func(h *httptestReq) { h.r.URL.Path = "/_cluster/v1/ack" }, sec, now, false},
		{"method changed", func(h *httptestReq) { h.r.Method = "GET" }, sec, now, false},
		{"no signature", func(h *httptestReq) { h.r.Header.Del(AuthHeader) }, sec, now, false},
		{"malformed", func(h *httptestReq) { h.r.Header.Set(AuthHeader, "v1:x:y") }, sec, now, false},
		{"wrong version", func(h *httptestReq) { h.r.Header.Set(AuthHeader, "v0:1:2") }, sec, now, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := signed()
			c.mutate(h)
			m, err := c.secret.Verify(h.r, c.at)
			if c.ok {
				if err != nil || m != "http://a:1" {
					t.Fatalf("Verify = %q, %v; want the member", m, err)
				}
				return
			}
			if !errors.Is(err, ErrUnauthenticated) {
				t.Fatalf("Verify = %q, %v; want ErrUnauthenticated", m, err)
			}
		})
	}
}

func TestEmptySecretRefused(t *testing.T) {
	if _, err := NewSecret(nil); err == nil {
		t.Fatal("an empty secret must be refused")
	}
}

type httptestReq struct{ r *http.Request }
