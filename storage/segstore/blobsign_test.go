package segstore_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/synclane/synclane/storage/segstore"
)

// TestBlobTokensAreNotSegmentTokens: one key signs both kinds, yet no
// token opens what it was not issued for.
func TestBlobTokensAreNotSegmentTokens(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	s := segstore.NewSigner(bytes.Repeat([]byte("k"), 32), 10*time.Minute, func() time.Time { return now })
	const id = "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	segTok, _ := s.Sign("p", id, "digest")
	getTok, _ := s.SignBlob("p", id, segstore.BlobOpGet, 0)
	putTok, _ := s.SignBlob("p", id, segstore.BlobOpPut, 42)
	for _, c := range []struct {
		name  string
		token string
		op    string
		ok    bool
	}{
		{"download token", getTok, segstore.BlobOpGet, true},
		{"upload token", putTok, segstore.BlobOpPut, true},
		{"segment token as download", segTok, segstore.BlobOpGet, false},
		{"segment token as upload", segTok, segstore.BlobOpPut, false},
		{"download token as upload", getTok, segstore.BlobOpPut, false},
		{"upload token as download", putTok, segstore.BlobOpGet, false},
		{"tampered", getTok[:len(getTok)-2] + "AA", segstore.BlobOpGet, false},
	} {
		cl, err := s.VerifyBlob(c.token, id, c.op)
		if (err == nil) != c.ok {
			t.Errorf("%s: VerifyBlob = %v, want ok=%v", c.name, err, c.ok)
		}
		if c.ok && c.op == segstore.BlobOpPut && cl.ByteLength != 42 {
			t.Errorf("%s: granted length %d", c.name, cl.ByteLength)
		}
	}
	for _, tok := range []string{getTok, putTok} {
		if _, err := s.Verify(tok, id); err == nil {
			t.Error("a blob token verified as a segment token")
		}
	}
	if _, err := s.VerifyBlob(getTok, id[:len(id)-1]+"b", segstore.BlobOpGet); err == nil {
		t.Error("a token for one blob opened another")
	}
	now = now.Add(10*time.Minute + segstore.SignedURLSkew + time.Second)
	if _, err := s.VerifyBlob(getTok, id, segstore.BlobOpGet); err == nil {
		t.Error("an expired token verified")
	}
}

// FuzzVerifyBlob: no input verifies for a blob this signer never signed a
// token for (only id here), and nothing panics.
func FuzzVerifyBlob(f *testing.F) {
	now := time.Unix(1_700_000_000, 0)
	s := segstore.NewSigner(bytes.Repeat([]byte("k"), 32), 10*time.Minute, func() time.Time { return now })
	const id = "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	good, _ := s.SignBlob("p", id, segstore.BlobOpGet, 0)
	f.Add(good, id)
	f.Add("e30.AAAA", id)
	f.Add("", "")
	f.Fuzz(func(t *testing.T, token, blob string) {
		_, err := s.VerifyBlob(token, blob, segstore.BlobOpGet)
		if err == nil && blob != id {
			t.Fatalf("VerifyBlob accepted %q for %q", token, blob)
		}
	})
}
