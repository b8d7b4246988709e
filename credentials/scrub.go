package credentials

import (
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/url"

	"github.com/aileron-dev/aileron-proxy/internal/multimatch"
)

// Scrubber masks every form of a set of secrets in response headers and
// bodies. Each secret is matched raw, in base64 (standard and URL alphabets,
// padded and raw) and URL-encoded (query and path escaping); every byte of
// every occurrence (overlapping occurrences included) becomes '*', so lengths
// are preserved and all other bytes pass through unchanged.
//
// A Scrubber is immutable and safe for concurrent use. The nil *Scrubber
// scrubs nothing.
//
// The search itself is internal/multimatch; this type owns the secret
// semantics: which encodings of a secret are searched for, the length
// rules, and never printing them.
type Scrubber struct {
	m *multimatch.Matcher
}

// NewScrubber builds a Scrubber for secrets. Each secret must pass
// CheckSecret's length rules (at least MinSecretLen bytes); zero Values are
// skipped. With no secrets it returns nil, which scrubs nothing.
func NewScrubber(secrets ...Value) (*Scrubber, error) {
	var pats []string
	for _, v := range secrets {
		s := v.Reveal()
		if s == "" {
			continue
		}
		if len(s) < MinSecretLen || len(s) > MaxSecretLen {
			return nil, fmt.Errorf("building scrubber: a secret is not between %d and %d bytes long", MinSecretLen, MaxSecretLen)
		}
		pats = append(pats, secretForms(s)...)
	}
	if len(pats) == 0 {
		return nil, nil
	}
	return &Scrubber{m: multimatch.New(pats)}, nil
}

// String describes the Scrubber without its secrets.
func (s *Scrubber) String() string {
	if s == nil {
		return "credentials.Scrubber(nil)"
	}
	return fmt.Sprintf("credentials.Scrubber(%d patterns %s)", s.m.Len(), redacted)
}

// GoString is String.
func (s *Scrubber) GoString() string { return s.String() }

// Format prints String for every verb.
func (s *Scrubber) Format(f fmt.State, _ rune) { _, _ = io.WriteString(f, s.String()) }

// secretForms returns the encodings of s the scrubber looks for.
func secretForms(s string) []string {
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

// Header masks secrets in every value of h, in place. Header names are left
// alone.
func (s *Scrubber) Header(h http.Header) {
	if s == nil {
		return
	}
	for _, vs := range h {
		for i, v := range vs {
			if len(v) < s.m.MinLen() {
				continue
			}
			b := []byte(v)
			if s.m.MaskAll(b) {
				vs[i] = string(b)
			}
		}
	}
}

// Bytes returns a copy of b with secrets masked.
func (s *Scrubber) Bytes(b []byte) []byte {
	out := append([]byte(nil), b...)
	s.Mask(out)
	return out
}

// Mask masks secrets in b in place, for a caller that owns b.
func (s *Scrubber) Mask(b []byte) {
	if s != nil {
		s.m.MaskAll(b)
	}
}

// Reader wraps rc so that reads return its bytes with secrets masked. It
// streams: memory is bounded (a buffer of 32 KiB that grows to 256 KiB only
// while reads keep filling it), bytes are delivered as soon
// as no secret can start at them (a partial match at the end of what has
// arrived so far is held back until it is resolved), and matches split
// across reads are found. The reader also implements io.WriterTo, which
// io.Copy uses to write from its buffer without a copy. Close closes rc. A
// nil Scrubber returns rc.
func (s *Scrubber) Reader(rc io.ReadCloser) io.ReadCloser {
	if s == nil || rc == nil {
		return rc
	}
	return s.m.Reader(rc)
}
