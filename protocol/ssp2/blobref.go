package ssp2

import (
	"bytes"
	"strconv"
)

// validBlobRef reports whether b is a canonical BlobRef (notes §11):
// {"blobId":"sha256:<64 lowercase hex>","byteLength":<int >= 0>[,"mediaType":s][,"name":s]}
// with exactly that key order, no whitespace and JSON.stringify string
// escaping.
func validBlobRef(b []byte) bool {
	const pre = `{"blobId":"sha256:`
	if !bytes.HasPrefix(b, []byte(pre)) {
		return false
	}
	b = b[len(pre):]
	if len(b) < 64 {
		return false
	}
	for _, c := range b[:64] {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	b = b[64:]
	const bl = `","byteLength":`
	if !bytes.HasPrefix(b, []byte(bl)) {
		return false
	}
	b = b[len(bl):]
	n := 0
	for n < len(b) && b[n] >= '0' && b[n] <= '9' {
		n++
	}
	if n == 0 || (n > 1 && b[0] == '0') {
		return false
	}
	v, err := strconv.ParseInt(string(b[:n]), 10, 64)
	if err != nil || v > MaxSafeInt {
		return false
	}
	b = b[n:]
	for _, key := range []string{`,"mediaType":`, `,"name":`} {
		if bytes.HasPrefix(b, []byte(key)) {
			b = b[len(key):]
			l := scanJSONString(b)
			if l < 0 || !canonicalJSONString(b[:l]) {
				return false
			}
			b = b[l:]
		}
	}
	return len(b) == 1 && b[0] == '}'
}
