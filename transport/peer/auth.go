package peer

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Member-to-member calls are authenticated with the cluster secret (any
// bytes, the same file on every member: --cluster-secret): the caller
// names itself in MemberHeader and signs the call in AuthHeader as
//
//	v1:<unix ms>:<hex HMAC-SHA256(secret, "v1\n" method "\n" path "\n" member "\n" unix ms)>
//
// and the callee accepts a signature made at most MaxClockSkew from its
// own clock. A client of the public API never has the secret, so it can
// neither call a member route nor pose as a member: an unsigned or
// mis-signed call is answered 401 before anything else is read. The
// signature covers no body: the calls travel on the members' own network
// (TLS in front when it is not trusted), and the secret is what keeps
// clients out.
const (
	// MemberHeader names the calling member (its advertise URL).
	MemberHeader = "Synclane-Member"
	// AuthHeader carries the call's signature.
	AuthHeader = "Synclane-Member-Auth"
	// MaxClockSkew is how far a signature's time may be from the callee's
	// clock.
	MaxClockSkew = 30 * time.Second
)

// ErrUnauthenticated is what Verify returns (wrapped) for a call that is
// not signed with the cluster secret.
var ErrUnauthenticated = errors.New("peer: member call not signed with the cluster secret")

// ErrClockSkew is wrapped (with ErrUnauthenticated) by Verify's error for
// a call signed more than MaxClockSkew from the callee's clock: the
// secret may be right, the clocks are not.
var ErrClockSkew = errors.New("peer: member call signed too far from the callee's clock")

// Secret is the cluster secret; it refuses an empty one.
type Secret struct{ key []byte }

// NewSecret returns the secret of key (the --cluster-secret file's
// bytes, trailing newlines kept as they are: every member reads the same
// file). An empty key is refused.
func NewSecret(key []byte) (Secret, error) {
	if len(key) == 0 {
		return Secret{}, errors.New("peer: the cluster secret is empty")
	}
	return Secret{key: append([]byte(nil), key...)}, nil
}

func (s Secret) mac(method, path, member, ms string) string {
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte("v1\n" + method + "\n" + path + "\n" + member + "\n" + ms))
	return hex.EncodeToString(m.Sum(nil))
}

// Sign sets r's member and signature headers for a call from member at
// now.
func (s Secret) Sign(r *http.Request, member string, now time.Time) {
	ms := strconv.FormatInt(now.UnixMilli(), 10)
	r.Header.Set(MemberHeader, member)
	r.Header.Set(AuthHeader, "v1:"+ms+":"+s.mac(r.Method, r.URL.Path, member, ms))
}

// Verify checks r's signature against the secret at now and returns the
// calling member; the error wraps ErrUnauthenticated.
func (s Secret) Verify(r *http.Request, now time.Time) (member string, err error) {
	member = r.Header.Get(MemberHeader)
	parts := strings.SplitN(r.Header.Get(AuthHeader), ":", 3)
	if member == "" || len(parts) != 3 || parts[0] != "v1" {
		return "", fmt.Errorf("%w: missing or malformed %s", ErrUnauthenticated, AuthHeader)
	}
	ms, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil {
		return "", fmt.Errorf("%w: malformed time", ErrUnauthenticated)
	}
	if d := now.Sub(time.UnixMilli(ms)); d > MaxClockSkew || d < -MaxClockSkew {
		return "", fmt.Errorf("%w: %w: signed %v from this member's clock (at most %v)", ErrUnauthenticated, ErrClockSkew, d.Round(time.Millisecond), MaxClockSkew)
	}
	want := s.mac(r.Method, r.URL.Path, member, parts[1])
	if !hmac.Equal([]byte(want), []byte(parts[2])) {
		return "", fmt.Errorf("%w: bad signature", ErrUnauthenticated)
	}
	return member, nil
}
