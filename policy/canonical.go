package policy

import (
	"fmt"
	"strings"
)

// Request canonicalization: what a request's path must look like before
// Decide compares it with a scope's operations, and the one path-segment
// grammar spec validation and compilation share (hosts follow
// internal/hostport). The hot path does not allocate for canonical input.

// Problems inspectPath reports, phrased to follow "was refused before
// matching: ".
const (
	pathNoSlash       = `it does not start with "/"`
	pathEmptySegment  = `it has an empty segment ("//")`
	pathDotSegment    = `it has a "." or ".." segment (also refused percent-encoded, e.g. %2e%2e)`
	pathEncodedSlash  = "it has an encoded slash (%2F)"
	pathEncodedBSlash = "it has an encoded backslash (%5C)"
	pathBackslash     = "it has a backslash"
	pathControl       = "it has a control byte (raw or percent-encoded)"
	pathBadEscape     = "it has invalid percent-encoding (% must be followed by two hex digits)"
	pathDoubleEscape  = "it has double percent-encoding (%25 followed by two hex digits)"
	pathUnencoded     = "it has a byte that must be percent-encoded"
	pathTemplate      = `a {name} template must be a whole segment with a non-empty name, or be followed by a custom method like "{name}:method"`
)

// inspectPath checks that p, a raw escaped request path, is canonical, and
// returns its number of segments ("/" has one, "/a/" two) or the problem.
func inspectPath(p string) (nseg int, problem string) {
	if p == "" || p[0] != '/' {
		return 0, pathNoSlash
	}
	rest := p[1:]
	for {
		j := strings.IndexByte(rest, '/')
		seg := rest
		if j >= 0 {
			seg = rest[:j]
		}
		nseg++
		if seg == "" && j >= 0 {
			return 0, pathEmptySegment
		}
		if problem := checkSegment(seg); problem != "" {
			return 0, problem
		}
		if j < 0 {
			return nseg, ""
		}
		rest = rest[j+1:]
	}
}

// checkSegment reports what makes one raw path segment non-canonical, or "".
// It is the one segment grammar: spec validation (checkPath), compilation
// (compilePath) and request matching (inspectPath) all apply it, so a
// literal a spec may declare is exactly a segment a request may send.
// Bytes URL.EscapedPath always escapes are refused; '[' and ']', which it
// and browsers leave alone, are accepted.
func checkSegment(seg string) string {
	dots, onlyDots, params := 0, true, true
	for i := 0; i < len(seg); i++ {
		c := seg[i]
		switch {
		case c == '%':
			if i+2 >= len(seg) || unhexVal(seg[i+1]) < 0 || unhexVal(seg[i+2]) < 0 {
				return pathBadEscape
			}
			c = byte(unhexVal(seg[i+1])<<4 | unhexVal(seg[i+2]))
			i += 2
			switch {
			case c == '/':
				return pathEncodedSlash
			case c == '\\':
				return pathEncodedBSlash
			case c < 0x20 || c == 0x7f:
				return pathControl
			case c == '%' && i+2 < len(seg) && unhexVal(seg[i+1]) >= 0 && unhexVal(seg[i+2]) >= 0:
				return pathDoubleEscape
			}
		case c == '\\':
			return pathBackslash
		case c < 0x20 || c == 0x7f:
			return pathControl
		case !isPathByte(c):
			return pathUnencoded
		}
		// Dot segments, also with a ";param" suffix that some servers strip.
		if params {
			switch c {
			case ';':
				params = false
			case '.':
				dots++
			default:
				onlyDots = false
			}
		}
	}
	if onlyDots && dots > 0 {
		return pathDotSegment
	}
	return ""
}

// isPathByte reports whether URL.EscapedPath may leave c unescaped in a path.
func isPathByte(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	switch c {
	case '-', '.', '_', '~', '!', '$', '&', '\'', '(', ')', '*', '+', ',', ';', '=', ':', '@', '[', ']', '%':
		return true
	}
	return false
}

func unhexVal(c byte) int {
	switch {
	case '0' <= c && c <= '9':
		return int(c - '0')
	case 'a' <= c && c <= 'f':
		return int(c-'a') + 10
	case 'A' <= c && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}

// decodeAppend appends the percent-decoding of s, which checkSegment accepted.
func decodeAppend(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '%' {
			c = byte(unhexVal(s[i+1])<<4 | unhexVal(s[i+2]))
			i += 2
		}
		dst = append(dst, c)
	}
	return dst
}

func decodeSegment(s string) string {
	if strings.IndexByte(s, '%') < 0 {
		return s
	}
	return string(decodeAppend(make([]byte, 0, len(s)), s))
}

// segmentEqual reports whether the raw segment decodes to lit, without
// allocating.
func segmentEqual(raw, lit string) bool {
	if strings.IndexByte(raw, '%') < 0 {
		return raw == lit
	}
	j := 0
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		if c == '%' {
			c = byte(unhexVal(raw[i+1])<<4 | unhexVal(raw[i+2]))
			i += 2
		}
		if j >= len(lit) || lit[j] != c {
			return false
		}
		j++
	}
	return j == len(lit)
}

// compilePath splits a spec path into literal and {name} segments under the
// same canonical rules as requests.
func compilePath(p string) (*PathTemplate, error) {
	if p == "" || p[0] != '/' {
		return nil, fmt.Errorf("%q: %s", p, pathNoSlash)
	}
	raw := strings.Split(p[1:], "/")
	t := &PathTemplate{path: p, segs: make([]TemplateSegment, 0, len(raw))}
	for i, r := range raw {
		if name, suffix, ok := ParseTemplateSegment(r); ok && name != "" {
			t.segs = append(t.segs, TemplateSegment{raw: r, param: name, suffix: suffix, isParam: true})
			t.params = append(t.params, name)
			continue
		}
		if r == "" && i < len(raw)-1 {
			return nil, fmt.Errorf("%q: %s", p, pathEmptySegment)
		}
		if strings.ContainsAny(r, "{}") {
			return nil, fmt.Errorf("%q: %s", p, pathTemplate)
		}
		if problem := checkSegment(r); problem != "" {
			return nil, fmt.Errorf("%q: %s", p, problem)
		}
		t.segs = append(t.segs, TemplateSegment{raw: r, lit: decodeSegment(r)})
	}
	return t, nil
}

// exactKey is the decoded path of an all-literal template, the form Decide
// looks up.
func exactKey(segs []TemplateSegment) string {
	var b strings.Builder
	for _, s := range segs {
		b.WriteByte('/')
		b.WriteString(s.lit)
	}
	return b.String()
}
