package lease

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/synclane/synclane/storage"
)

// MinKeyBytes is the shortest signing key accepted.
const MinKeyBytes = 32

// signingDomain prefixes every signed encoding, so a lease MAC can never
// be replayed as any other HMAC the same key makes.
const signingDomain = "synclane/lease/v1"

// signer computes and checks lease MACs: HMAC-SHA256 under the server key
// over the canonical encoding of a record and its partition.
type signer struct{ key []byte }

// canonical is the signed encoding of rec in partition: the domain, then
// partition, clientId, leaseId, actorId and allowedScopes each as a
// big-endian u32 length and its bytes, then issuedAtMs, expiresAtMs and
// revokedAtMs as big-endian i64. The partition and clientId are signed so
// a row copied to another key is refused.
func canonical(partition string, rec storage.LeaseRecord) []byte {
	b := make([]byte, 0, 64+len(partition)+len(rec.ClientID)+len(rec.LeaseID)+len(rec.ActorID)+len(rec.AllowedScopes))
	b = append(b, signingDomain...)
	for _, f := range [][]byte{[]byte(partition), []byte(rec.ClientID), []byte(rec.LeaseID), []byte(rec.ActorID), rec.AllowedScopes} {
		b = binary.BigEndian.AppendUint32(b, uint32(len(f)))
		b = append(b, f...)
	}
	for _, v := range []int64{rec.IssuedAtMs, rec.ExpiresAtMs, rec.RevokedAtMs} {
		b = binary.BigEndian.AppendUint64(b, uint64(v))
	}
	return b
}

func (s signer) mac(partition string, rec storage.LeaseRecord) []byte {
	h := hmac.New(sha256.New, s.key)
	h.Write(canonical(partition, rec))
	return h.Sum(nil)
}

// sign returns rec with its MAC set.
func (s signer) sign(partition string, rec storage.LeaseRecord) storage.LeaseRecord {
	rec.MAC = s.mac(partition, rec)
	return rec
}

// errTampered reports a stored lease whose MAC does not verify.
var errTampered = errors.New("lease: stored record fails its MAC check (tampered, or signed with another key)")

// verify checks rec's MAC and decodes its allowed scopes. Any failure
// means the record is not a lease this server issued.
func (s signer) verify(partition string, rec *storage.LeaseRecord) (map[string][]string, error) {
	if !hmac.Equal(rec.MAC, s.mac(partition, *rec)) {
		return nil, errTampered
	}
	return decodeScopes(rec.AllowedScopes)
}

// encodeScopes returns the canonical JSON of grants: keys sorted (JSON
// object order of encoding/json), each value list sorted and deduplicated,
// a nil list as [].
func encodeScopes(grants map[string][]string) ([]byte, error) {
	c := make(map[string][]string, len(grants))
	for k, vals := range grants {
		v := slices.Clone(vals)
		slices.Sort(v)
		c[k] = slices.Compact(v)
		if c[k] == nil {
			c[k] = []string{}
		}
	}
	b, err := json.Marshal(c)
	if err != nil {
		return nil, fmt.Errorf("lease: encode allowed scopes: %w", err)
	}
	return b, nil
}

// decodeScopes parses stored allowed scopes: a JSON object of string
// lists, at most storage.MaxLeaseScopesBytes.
func decodeScopes(b []byte) (map[string][]string, error) {
	if len(b) > storage.MaxLeaseScopesBytes {
		return nil, fmt.Errorf("lease: allowed scopes of %d bytes exceed %d", len(b), storage.MaxLeaseScopesBytes)
	}
	var m map[string][]string
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("lease: decode allowed scopes: %w", err)
	}
	if m == nil {
		return nil, errors.New("lease: allowed scopes are not a JSON object")
	}
	return m, nil
}
