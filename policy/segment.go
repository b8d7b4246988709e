package policy

import "strings"

// Template segments: a path segment of an operation is a literal, a whole
// "{name}" template, or a template followed by a custom method (AIP-136),
// "{name}:method", as in Google's "/v1beta/models/{model}:generateContent".
// A custom-method template matches a value that is non-empty and holds no ':'
// (nor '/'), followed by the literal ":method".

// ParseTemplateSegment reports whether the spec path segment seg is a
// template, "{name}" or "{name}:method", and returns its name and its suffix
// (":method", or "" for a whole-segment template). It checks the shape only:
// the name may be empty and is not checked against IsValidName. A method starts with an ASCII
// letter and holds only ASCII letters, digits, '.', '_' and '-'.
func ParseTemplateSegment(seg string) (name, suffix string, ok bool) {
	if len(seg) < 2 || seg[0] != '{' {
		return "", "", false
	}
	j := strings.IndexByte(seg, '}')
	if j < 1 || strings.IndexByte(seg[1:j], '{') >= 0 {
		return "", "", false
	}
	name, suffix = seg[1:j], seg[j+1:]
	if suffix != "" && !isCustomMethod(suffix) {
		return "", "", false
	}
	return name, suffix, true
}

// isCustomMethod reports whether s is ":method" as ParseTemplateSegment
// describes it.
func isCustomMethod(s string) bool {
	if len(s) < 2 || s[0] != ':' || !isLetter(s[1]) {
		return false
	}
	for i := 2; i < len(s); i++ {
		if c := s[i]; !isAlnum(c) && c != '.' && c != '_' && c != '-' {
			return false
		}
	}
	return true
}

func isLetter(c byte) bool { return c|0x20 >= 'a' && c|0x20 <= 'z' }

// splitCustomMethod splits a raw, canonical request segment at its first ':'
// (also when percent-encoded as %3A): value is the raw text before it, rest
// the raw text from it on. ok is false when the segment has no ':' or the
// value before it is empty.
func splitCustomMethod(seg string) (value, rest string, ok bool) {
	for i := 0; i < len(seg); i++ {
		switch {
		case seg[i] == ':':
		case seg[i] == '%' && i+2 < len(seg) && seg[i+1] == '3' && seg[i+2]|0x20 == 'a':
		default:
			continue
		}
		return seg[:i], seg[i:], i > 0
	}
	return "", "", false
}
