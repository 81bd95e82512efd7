// Package jwkstest is a test identity provider: signing keys (RSA, EC,
// Ed25519) with their public JWKs, tokens signed by them, and an
// httptest server publishing a JWKS whose content, status and hits a test
// controls. For tests and examples only.
package jwkstest

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"math/big"
	"net/http"
	"net/http/httptest"
	"sync"

	"github.com/golang-jwt/jwt/v5"
)

// Signer is a private signing key, its kid and the alg it signs with.
type Signer struct {
	Kid string
	Alg string
	Key crypto.Signer
	// PinAlg, when set, puts "alg" in the published JWK.
	PinAlg bool
}

// NewRSA returns a 2048-bit RSA signer for alg (RS256, PS256, ...).
func NewRSA(kid, alg string) *Signer {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		panic(err)
	}
	return &Signer{Kid: kid, Alg: alg, Key: k}
}

// NewEC returns an ECDSA signer on P-256 (ES256), P-384 (ES384) or P-521
// (ES512), chosen by alg.
func NewEC(kid, alg string) *Signer {
	c := map[string]elliptic.Curve{"ES256": elliptic.P256(), "ES384": elliptic.P384(), "ES512": elliptic.P521()}[alg]
	k, err := ecdsa.GenerateKey(c, rand.Reader)
	if err != nil {
		panic(err)
	}
	return &Signer{Kid: kid, Alg: alg, Key: k}
}

// NewEd25519 returns an EdDSA signer.
func NewEd25519(kid string) *Signer {
	_, k, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		panic(err)
	}
	return &Signer{Kid: kid, Alg: "EdDSA", Key: k}
}

func b64(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

func pad(n *big.Int, size int) []byte { return n.FillBytes(make([]byte, size)) }

// JWK returns the public key as a JWK object (kid, use "sig", and alg
// when PinAlg).
func (s *Signer) JWK() map[string]any {
	j := map[string]any{"kid": s.Kid, "use": "sig"}
	if s.PinAlg {
		j["alg"] = s.Alg
	}
	switch k := s.Key.(type) {
	case *rsa.PrivateKey:
		j["kty"], j["n"], j["e"] = "RSA", b64(k.N.Bytes()), b64(big.NewInt(int64(k.E)).Bytes())
	case *ecdsa.PrivateKey:
		size := (k.Curve.Params().BitSize + 7) / 8
		j["kty"], j["crv"], j["x"], j["y"] = "EC", k.Curve.Params().Name, b64(pad(k.X, size)), b64(pad(k.Y, size))
	case ed25519.PrivateKey:
		j["kty"], j["crv"], j["x"] = "OKP", "Ed25519", b64(k.Public().(ed25519.PublicKey))
	}
	return j
}

// Sign returns a token for claims signed with s (kid in the header unless
// s.Kid is empty).
func (s *Signer) Sign(claims map[string]any) string {
	t := jwt.NewWithClaims(jwt.GetSigningMethod(s.Alg), jwt.MapClaims(claims))
	if s.Kid != "" {
		t.Header["kid"] = s.Kid
	}
	tok, err := t.SignedString(s.Key)
	if err != nil {
		panic(err)
	}
	return tok
}

// Set returns the JWKS document of signers' public keys.
func Set(signers ...*Signer) []byte {
	keys := make([]map[string]any, len(signers))
	for i, s := range signers {
		keys[i] = s.JWK()
	}
	b, _ := json.Marshal(map[string]any{"keys": keys})
	return b
}

// Server publishes a JWKS over HTTP and counts the requests it gets.
type Server struct {
	*httptest.Server
	mu     sync.Mutex
	body   []byte
	status int
	hits   int
}

// NewServer starts a server publishing signers' keys; Close it.
func NewServer(signers ...*Signer) *Server {
	s := &Server{body: Set(signers...), status: http.StatusOK}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.hits++
		body, status := s.body, s.status
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = w.Write(body)
	}))
	return s
}

// SetKeys publishes signers' keys from now on.
func (s *Server) SetKeys(signers ...*Signer) { s.SetBody(Set(signers...)) }

// SetBody publishes b verbatim from now on.
func (s *Server) SetBody(b []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.body = b
}

// SetStatus answers with status from now on (200 serves the body).
func (s *Server) SetStatus(status int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.status = status
}

// Hits returns how many requests the server has answered.
func (s *Server) Hits() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hits
}
