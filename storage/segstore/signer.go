package segstore

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"time"
)

// MaxSignedURLTTL is the longest lifetime of a signed segment URL (SPEC §5.4).
const MaxSignedURLTTL = 15 * time.Minute

// SignedURLSkew is the clock skew a signed URL's expiry is checked with.
const SignedURLSkew = 60 * time.Second

// ErrBadSignedURL: the token is malformed, its MAC does not verify, it has
// expired, or it names another segment, scope digest or audience.
var ErrBadSignedURL = errors.New("segstore: invalid signed segment URL")

// Signer issues and verifies native signed segment URL tokens (SPEC §5.4):
// st = b64url(payload) "." b64url(HMAC-SHA256(key, payload)), payload
// {"v":1,"seg":id,"sd":digest,"aud":aud,"exp":sec}, where aud is an HMAC of
// the partition (stable, not reversible to the partition id). Safe for
// concurrent use; the TTL can be changed at runtime.
type Signer struct {
	key []byte
	ttl atomic.Int64 // nanoseconds
	now func() time.Time
}

// NewSigner returns a Signer with key and ttl (clamped to
// MaxSignedURLTTL). now nil takes time.Now.
func NewSigner(key []byte, ttl time.Duration, now func() time.Time) *Signer {
	if now == nil {
		now = time.Now
	}
	s := &Signer{key: append([]byte(nil), key...), now: now}
	s.SetTTL(ttl)
	return s
}

// SetTTL changes the lifetime of URLs issued from now on; 0 issues URLs
// that are already expired (beyond the skew), for tests.
func (s *Signer) SetTTL(ttl time.Duration) { s.ttl.Store(int64(min(max(ttl, 0), MaxSignedURLTTL))) }

// Audience returns the opaque audience of partition.
func (s *Signer) Audience(partition string) string {
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte("synclane-aud\x00" + partition))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

type urlPayload struct {
	V   int    `json:"v"`
	Seg string `json:"seg"`
	SD  string `json:"sd"`
	Aud string `json:"aud"`
	Exp int64  `json:"exp"`
}

// Sign returns a token for segment id of partition with scope digest sd,
// and its expiry in Unix ms.
func (s *Signer) Sign(partition, id, sd string) (token string, expiresAtMs int64) {
	now := s.now()
	exp := now.Add(time.Duration(s.ttl.Load())).Unix()
	if s.ttl.Load() == 0 {
		exp = now.Add(-SignedURLSkew - time.Second).Unix()
	}
	payload, _ := json.Marshal(urlPayload{V: 1, Seg: id, SD: sd, Aud: s.Audience(partition), Exp: exp})
	return base64.RawURLEncoding.EncodeToString(payload) + "." + base64.RawURLEncoding.EncodeToString(s.mac(payload)), exp * 1000
}

func (s *Signer) mac(payload []byte) []byte {
	m := hmac.New(sha256.New, s.key)
	m.Write(payload)
	return m.Sum(nil)
}

// Claims are a verified token's contents.
type Claims struct {
	Segment, ScopeDigest, Audience string
}

// Verify checks token's MAC, version, expiry (with SignedURLSkew) and that
// it names segment id.
func (s *Signer) Verify(token, id string) (Claims, error) {
	p64, m64, ok := strings.Cut(token, ".")
	if !ok {
		return Claims{}, ErrBadSignedURL
	}
	payload, err1 := base64.RawURLEncoding.DecodeString(p64)
	mac, err2 := base64.RawURLEncoding.DecodeString(m64)
	if err1 != nil || err2 != nil || !hmac.Equal(mac, s.mac(payload)) {
		return Claims{}, ErrBadSignedURL
	}
	var p urlPayload
	if json.Unmarshal(payload, &p) != nil || p.V != 1 || p.Seg != id {
		return Claims{}, ErrBadSignedURL
	}
	if s.now().Add(-SignedURLSkew).Unix() > p.Exp {
		return Claims{}, ErrBadSignedURL
	}
	return Claims{Segment: p.Seg, ScopeDigest: p.SD, Audience: p.Aud}, nil
}
