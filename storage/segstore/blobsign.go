package segstore

import (
	"crypto/hmac"
	"encoding/base64"
	"encoding/json"
	"strings"
	"time"
)

// Signed blob URLs (SPEC §5.9) use the segment token scheme with their own
// payload {"v":1,"blob":id,"aud":aud,"exp":sec} (plus "op":"put" and
// "len" for upload grants). A segment token never verifies as a blob
// token nor the reverse (each requires its own id field to equal the
// requested id, and the other's is absent), and a download token never
// verifies as an upload grant (op must match).
type blobPayload struct {
	V    int    `json:"v"`
	Blob string `json:"blob"`
	Op   string `json:"op,omitempty"`
	Len  int64  `json:"len,omitempty"`
	Aud  string `json:"aud"`
	Exp  int64  `json:"exp"`
}

// BlobOpGet and BlobOpPut are the two purposes of a blob token.
const (
	BlobOpGet = ""
	BlobOpPut = "put"
)

// SignBlob returns a token for op on blob id on behalf of partition
// (byteLength: the granted upload length, 0 for downloads) and its expiry
// in Unix ms.
func (s *Signer) SignBlob(partition, id, op string, byteLength int64) (token string, expiresAtMs int64) {
	return s.SignBlobTTL(partition, id, op, byteLength, s.ttlDur())
}

// SignBlobTTL is SignBlob with its own lifetime (clamped to
// MaxSignedURLTTL; 0 issues a token already expired beyond the skew).
func (s *Signer) SignBlobTTL(partition, id, op string, byteLength int64, ttl time.Duration) (token string, expiresAtMs int64) {
	ttl = min(max(ttl, 0), MaxSignedURLTTL)
	now := s.now()
	exp := now.Add(ttl).Unix()
	if ttl == 0 {
		exp = now.Add(-SignedURLSkew - time.Second).Unix()
	}
	payload, _ := json.Marshal(blobPayload{V: 1, Blob: id, Op: op, Len: byteLength, Aud: s.Audience(partition), Exp: exp})
	return base64.RawURLEncoding.EncodeToString(payload) + "." + base64.RawURLEncoding.EncodeToString(s.mac(payload)), exp * 1000
}

// BlobClaims are a verified blob token's contents.
type BlobClaims struct {
	Audience   string
	ByteLength int64
}

// VerifyBlob checks token's MAC, version, expiry (with SignedURLSkew),
// purpose op and that it names blob id.
func (s *Signer) VerifyBlob(token, id, op string) (BlobClaims, error) {
	p64, m64, ok := strings.Cut(token, ".")
	if !ok {
		return BlobClaims{}, ErrBadSignedURL
	}
	payload, err1 := base64.RawURLEncoding.DecodeString(p64)
	mac, err2 := base64.RawURLEncoding.DecodeString(m64)
	if err1 != nil || err2 != nil || !hmac.Equal(mac, s.mac(payload)) {
		return BlobClaims{}, ErrBadSignedURL
	}
	var p blobPayload
	if json.Unmarshal(payload, &p) != nil || p.V != 1 || p.Blob != id || p.Op != op || p.Aud == "" {
		return BlobClaims{}, ErrBadSignedURL
	}
	if s.now().Add(-SignedURLSkew).Unix() > p.Exp {
		return BlobClaims{}, ErrBadSignedURL
	}
	return BlobClaims{Audience: p.Aud, ByteLength: p.Len}, nil
}

func (s *Signer) ttlDur() time.Duration { return time.Duration(s.ttl.Load()) }
