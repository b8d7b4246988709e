package testkit

import (
	"encoding/base64"
	"net/url"
)

// SecretForms lists the encodings of s a scrubber must find (raw, the four
// base64 variants, query and path escaping), written independently of
// credentials' own list so that tests catch a form it drops.
func SecretForms(s string) []string {
	b := []byte(s)
	return []string{
		s,
		base64.StdEncoding.EncodeToString(b),
		base64.URLEncoding.EncodeToString(b),
		base64.RawStdEncoding.EncodeToString(b),
		base64.RawURLEncoding.EncodeToString(b),
		url.QueryEscape(s),
		url.PathEscape(s),
	}
}
