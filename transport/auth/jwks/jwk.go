package jwks

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"strings"
)

// MinRSABits is the smallest RSA modulus a key set accepts; smaller RSA
// keys in a JWKS are skipped (and logged).
const MinRSABits = 2048

// Key is one verification key from a JWKS: its kid, its alg when the JWK
// names one (empty otherwise) and the public key (*rsa.PublicKey,
// *ecdsa.PublicKey on P-256, P-384 or P-521, or ed25519.PublicKey).
// Symmetric (oct) keys never become a Key.
type Key struct {
	ID     string
	Alg    string
	Public crypto.PublicKey
}

// Verifies reports whether k may verify a token signed with alg: the key's
// type must be the one alg needs (RS*/PS* an RSA key, ES256/ES384/ES512 an
// EC key on P-256/P-384/P-521, EdDSA an Ed25519 key), and the JWK's own
// alg, when it names one, must be alg. Every symmetric alg (HS*) and none
// are refused whatever the key.
func (k Key) Verifies(alg string) bool {
	if k.Alg != "" && k.Alg != alg {
		return false
	}
	switch pub := k.Public.(type) {
	case *rsa.PublicKey:
		switch alg {
		case "RS256", "RS384", "RS512", "PS256", "PS384", "PS512":
			return true
		}
	case *ecdsa.PublicKey:
		switch alg {
		case "ES256":
			return pub.Curve == elliptic.P256()
		case "ES384":
			return pub.Curve == elliptic.P384()
		case "ES512":
			return pub.Curve == elliptic.P521()
		}
	case ed25519.PublicKey:
		return alg == "EdDSA"
	}
	return false
}

// jwk is the subset of RFC 7517/7518/8037 members a verification key uses.
type jwk struct {
	Kty    string   `json:"kty"`
	Kid    string   `json:"kid"`
	Use    string   `json:"use"`
	KeyOps []string `json:"key_ops"`
	Alg    string   `json:"alg"`
	Crv    string   `json:"crv"`
	N      string   `json:"n"`
	E      string   `json:"e"`
	X      string   `json:"x"`
	Y      string   `json:"y"`
}

// errSkip marks a JWK that is well formed but not a signature
// verification key (use "enc", an oct key, an unsupported curve): skipped
// without complaint beyond a debug log.
var errSkip = errors.New("not a supported signature verification key")

var asymmetricAlgs = []string{"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}

// AsymmetricAlgs returns the token algorithms a JWKS key can verify, the
// only ones a JWKS authenticator should accept.
func AsymmetricAlgs() []string { return slices.Clone(asymmetricAlgs) }

// parseKey turns one JWK into a Key, or says why it cannot verify
// signatures (errSkip for keys that are simply not for us).
func parseKey(raw json.RawMessage) (Key, error) {
	var j jwk
	if err := json.Unmarshal(raw, &j); err != nil {
		return Key{}, fmt.Errorf("malformed JWK: %w", err)
	}
	if j.Use != "" && j.Use != "sig" {
		return Key{}, fmt.Errorf("%w: use %q", errSkip, j.Use)
	}
	if j.KeyOps != nil && !slices.Contains(j.KeyOps, "verify") {
		return Key{}, fmt.Errorf("%w: key_ops %v has no verify", errSkip, j.KeyOps)
	}
	alg := j.Alg
	if alg == "Ed25519" { // RFC 9864's fully specified name for EdDSA over Ed25519
		alg = "EdDSA"
	}
	if alg != "" && !slices.Contains(asymmetricAlgs, alg) {
		return Key{}, fmt.Errorf("%w: alg %q", errSkip, j.Alg)
	}
	k := Key{ID: j.Kid, Alg: alg}
	var err error
	switch j.Kty {
	case "RSA":
		k.Public, err = rsaKey(j)
	case "EC":
		k.Public, err = ecKey(j)
	case "OKP":
		k.Public, err = okpKey(j)
	default:
		return Key{}, fmt.Errorf("%w: kty %q", errSkip, j.Kty)
	}
	if err != nil {
		return Key{}, err
	}
	if alg != "" && !k.Verifies(alg) {
		return Key{}, fmt.Errorf("JWK alg %q does not fit its kty %q (crv %q)", j.Alg, j.Kty, j.Crv)
	}
	return k, nil
}

func b64(name, s string) ([]byte, error) {
	b, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(s, "="))
	if err != nil || len(b) == 0 {
		return nil, fmt.Errorf("JWK member %s is not non-empty base64url", name)
	}
	return b, nil
}

func rsaKey(j jwk) (*rsa.PublicKey, error) {
	n, err := b64("n", j.N)
	if err != nil {
		return nil, err
	}
	e, err := b64("e", j.E)
	if err != nil {
		return nil, err
	}
	if len(e) > 4 {
		return nil, errors.New("RSA JWK exponent e is too large")
	}
	exp := 0
	for _, b := range e {
		exp = exp<<8 | int(b)
	}
	if exp < 3 || exp%2 == 0 {
		return nil, fmt.Errorf("RSA JWK exponent e=%d is not an odd number of at least 3", exp)
	}
	pub := &rsa.PublicKey{N: new(big.Int).SetBytes(n), E: exp}
	if bits := pub.N.BitLen(); bits < MinRSABits {
		return nil, fmt.Errorf("RSA JWK modulus is %d bits, below the %d accepted", bits, MinRSABits)
	}
	return pub, nil
}

func ecKey(j jwk) (*ecdsa.PublicKey, error) {
	var curve elliptic.Curve
	switch j.Crv {
	case "P-256":
		curve = elliptic.P256()
	case "P-384":
		curve = elliptic.P384()
	case "P-521":
		curve = elliptic.P521()
	default:
		return nil, fmt.Errorf("%w: EC curve %q", errSkip, j.Crv)
	}
	size := (curve.Params().BitSize + 7) / 8
	x, err := b64("x", j.X)
	if err != nil {
		return nil, err
	}
	y, err := b64("y", j.Y)
	if err != nil {
		return nil, err
	}
	if len(x) != size || len(y) != size {
		return nil, fmt.Errorf("EC JWK coordinates must be %d bytes each on %s", size, j.Crv)
	}
	pub, err := ecdsa.ParseUncompressedPublicKey(curve, append(append([]byte{4}, x...), y...))
	if err != nil {
		return nil, fmt.Errorf("EC JWK: %w", err)
	}
	return pub, nil
}

func okpKey(j jwk) (ed25519.PublicKey, error) {
	if j.Crv != "Ed25519" {
		return nil, fmt.Errorf("%w: OKP curve %q", errSkip, j.Crv)
	}
	x, err := b64("x", j.X)
	if err != nil {
		return nil, err
	}
	if len(x) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("Ed25519 JWK x must be %d bytes", ed25519.PublicKeySize)
	}
	return ed25519.PublicKey(x), nil
}
