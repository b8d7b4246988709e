package learn

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
)

// Class is what a path segment value looks like.
type Class int

// Segment classes, from most to least specific. Word is the zero value: a
// segment that does not look like an identifier.
const (
	ClassWord   Class = iota // a word, likely literal ("items", "v1", "repo.git")
	ClassNumber              // decimal digits
	ClassUUID                // 8-4-4-4-12 hex digits
	ClassHex                 // 7 or more hex digits with at least one digit
	ClassToken               // 16 or more base64url characters mixing letters and digits
	ClassValue               // anything a literal segment would not hold (%, @, =, spaces) or longer than 40 bytes
)

// String returns the class's name as MaskPath writes it.
func (c Class) String() string {
	switch c {
	case ClassNumber:
		return "number"
	case ClassUUID:
		return "uuid"
	case ClassHex:
		return "hex"
	case ClassToken:
		return "token"
	case ClassValue:
		return "value"
	default:
		return "word"
	}
}

// IsIdentifier reports whether the class looks like an identifier rather
// than a literal path word.
func (c Class) IsIdentifier() bool { return c != ClassWord }

// maxWordLen is the longest segment still taken as a literal word.
const maxWordLen = 40

// Classify says what the escaped path segment seg looks like.
func Classify(seg string) Class {
	if seg == "" {
		return ClassWord
	}
	if isDigits(seg) {
		return ClassNumber
	}
	if isUUID(seg) {
		return ClassUUID
	}
	var digits, letters, hex, other int
	for i := 0; i < len(seg); i++ {
		c := seg[i]
		switch {
		case c >= '0' && c <= '9':
			digits++
			hex++
		case c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F':
			letters++
			hex++
		case c >= 'g' && c <= 'z' || c >= 'G' && c <= 'Z':
			letters++
		case c == '-' || c == '_' || c == '.' || c == '~':
		default:
			other++
		}
	}
	switch {
	case other > 0 || len(seg) > maxWordLen:
		return ClassValue
	case hex == len(seg) && len(seg) >= 7 && digits > 0:
		return ClassHex
	case len(seg) >= 16 && digits > 0 && letters > 0 && !strings.ContainsAny(seg, ".~"):
		return ClassToken
	}
	return ClassWord
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

func isUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
				return false
			}
		}
	}
	return true
}

// MaskPath returns the escaped path with every segment that looks like an
// identifier replaced by its class in braces ("/items/17" → "/items/{number}"),
// the only form of a learned path that leaves the learn record.
func MaskPath(p string) string {
	if p == "" || p[0] != '/' {
		return "/{value}"
	}
	segs := strings.Split(p[1:], "/")
	for i, s := range segs {
		if c := Classify(s); c.IsIdentifier() {
			segs[i] = "{" + c.String() + "}"
		}
	}
	return "/" + strings.Join(segs, "/")
}

// JSON types as recorded for body keys and query values.
const (
	TypeString  = "string"
	TypeInteger = "integer"
	TypeNumber  = "number"
	TypeBoolean = "boolean"
	TypeArray   = "array"
	TypeObject  = "object"
	TypeNull    = "null"
)

// ValueType types a query parameter value: integer (optional sign and
// digits), number (a decimal fraction or exponent), boolean (true, false)
// or string.
func ValueType(v string) string {
	switch {
	case v == "true" || v == "false":
		return TypeBoolean
	case isDigits(strings.TrimPrefix(v, "-")):
		return TypeInteger
	case isDecimal(v):
		return TypeNumber
	}
	return TypeString
}

// isDecimal reports whether v is a JSON-style number with a fraction or an
// exponent ("1.5", "-2e3").
func isDecimal(v string) bool {
	var n json.Number = json.Number(v)
	if _, err := n.Float64(); err != nil {
		return false
	}
	return json.Valid([]byte(v))
}

// Field is a name with the JSON type of its value.
type Field struct {
	Name string `json:"name"`
	Type string `json:"type"`
}

// maxBodyKeys caps the keys kept of one body.
const maxBodyKeys = 128

// BodyKeys returns the top-level keys of the JSON object that prefix starts
// with, each with the JSON type of its value, in order of first appearance.
// prefix may be truncated: keys whose value is cut off are left out. A body
// that is not a JSON object gives nil. Values are read only to skip them.
func BodyKeys(prefix []byte) []Field {
	dec := json.NewDecoder(bytes.NewReader(prefix))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil || tok != json.Delim('{') {
		return nil
	}
	var out []Field
	for dec.More() && len(out) < maxBodyKeys {
		tok, err := dec.Token()
		if err != nil {
			break
		}
		key, ok := tok.(string)
		if !ok {
			break
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			break
		}
		if slices.ContainsFunc(out, func(f Field) bool { return f.Name == key }) {
			continue
		}
		out = append(out, Field{Name: key, Type: rawType(raw)})
	}
	return out
}

func rawType(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return TypeNull
	}
	switch raw[0] {
	case '{':
		return TypeObject
	case '[':
		return TypeArray
	case '"':
		return TypeString
	case 't', 'f':
		return TypeBoolean
	case 'n':
		return TypeNull
	}
	if bytes.ContainsAny(raw, ".eE") {
		return TypeNumber
	}
	return TypeInteger
}

// IsJSON reports whether a Content-Type names JSON (application/json or a
// +json suffix).
func IsJSON(contentType string) bool {
	mt, _, _ := strings.Cut(contentType, ";")
	mt = strings.ToLower(strings.TrimSpace(mt))
	return mt == "application/json" || strings.HasSuffix(mt, "+json")
}

// MediaType returns the media type of a Content-Type without parameters,
// lower case: parameters (a boundary, a charset) are dropped.
func MediaType(contentType string) string {
	mt, _, _ := strings.Cut(contentType, ";")
	mt = strings.ToLower(strings.TrimSpace(mt))
	if len(mt) > 100 {
		mt = mt[:100]
	}
	return mt
}

// APIKeyHeaders are the request headers known to carry API keys, canonical
// form; a client sending one is drafted with an api_key credential.
var APIKeyHeaders = []string{
	"Api-Key", "X-Api-Key", "X-Api-Token", "X-Auth-Token", "X-Goog-Api-Key", "Private-Token", "X-Access-Token",
}

// ClientAuth describes the credential a client sent, never its value.
type ClientAuth struct {
	// Kind is bearer, basic or api_key; empty when the client sent none.
	Kind string `json:"kind,omitempty"`
	// Header is the header of an api_key credential.
	Header string `json:"header,omitempty"`
}

// InferClientAuth reads the kind of credential from the Authorization value
// and the names of the other headers a client sent (canonical form).
func InferClientAuth(authorization string, headerNames []string) ClientAuth {
	scheme, _, _ := strings.Cut(strings.TrimSpace(authorization), " ")
	switch strings.ToLower(scheme) {
	case "bearer":
		return ClientAuth{Kind: "bearer"}
	case "basic":
		return ClientAuth{Kind: "basic"}
	}
	for _, h := range APIKeyHeaders {
		if slices.Contains(headerNames, h) {
			return ClientAuth{Kind: "api_key", Header: h}
		}
	}
	return ClientAuth{}
}
