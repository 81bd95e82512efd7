package jwks

import (
	"encoding/json"
	"testing"
)

// FuzzParseKey: hostile JWKs never panic, and a parsed key always has a
// public key whose type some asymmetric alg accepts.
func FuzzParseKey(f *testing.F) {
	f.Add(`{"kty":"RSA","n":"AQAB","e":"AQAB"}`)
	f.Add(`{"kty":"EC","crv":"P-256","x":"AA","y":"AA"}`)
	f.Add(`{"kty":"OKP","crv":"Ed25519","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}`)
	f.Add(`{"kty":"oct","k":"c2VjcmV0"}`)
	f.Fuzz(func(t *testing.T, s string) {
		k, err := parseKey(json.RawMessage(s))
		if err != nil {
			return
		}
		ok := false
		for _, alg := range asymmetricAlgs {
			ok = ok || k.Verifies(alg)
		}
		if !ok {
			t.Fatalf("parsed key %+v verifies no alg", k)
		}
		for _, alg := range []string{"HS256", "HS384", "HS512", "none", ""} {
			if k.Verifies(alg) {
				t.Fatalf("parsed key verifies %q", alg)
			}
		}
	})
}
