// Package preview is what a person sees of a request held for approval: the
// request's method, host, path, query and body fields, and the state a
// read-only fetch brought back from the source. The proxy builds it, the
// approval broker keeps it with the pending approval (never in the audit
// log), and the console, the CLI and the API show it.
//
// The package is pure: it parses bodies the proxy has already buffered and
// never does I/O.
package preview

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"mime"
	"net/url"
	"slices"
	"sort"
	"strings"
	"unicode/utf8"
)

// MaxBody is the largest body whose fields are previewed; a larger one is
// shown by size and digest only.
const MaxBody = 1 << 20

// Bounds on what one preview holds, so a large body cannot make a large
// approval card.
const (
	// MaxFields is how many fields of a body (or query) are listed.
	MaxFields = 64
	// MaxValue is how many bytes of one field value are kept.
	MaxValue = 4 << 10
	// ExcerptBytes is how many bytes of another body are shown.
	ExcerptBytes = 256
)

// Body kinds.
const (
	KindNone     = "none"
	KindJSON     = "json"
	KindForm     = "form"
	KindText     = "text"
	KindBinary   = "binary"
	KindTooLarge = "too_large"
)

// Fetch states.
const (
	FetchOK     = "fetched"
	FetchFailed = "failed"
)

// Field is one named value of a held request or a fetched answer.
type Field struct {
	Name string `json:"name"`
	// Label is the name people read (an action input's label); empty
	// means Name.
	Label string `json:"label,omitempty"`
	Value string `json:"value"`
	// Multiline marks long text shown as a block.
	Multiline bool `json:"multiline,omitempty"`
	// Primary marks a field the operation declares (shown first); the
	// others are folded below.
	Primary bool `json:"primary,omitempty"`
	// Truncated reports that Value was cut at MaxValue bytes.
	Truncated bool `json:"truncated,omitempty"`
}

// Display returns Label, or Name when there is none.
func (f Field) Display() string {
	if f.Label != "" {
		return f.Label
	}
	return f.Name
}

// Body is the held request's body.
type Body struct {
	ContentType string `json:"content_type,omitempty"`
	// Size is the body's length in bytes.
	Size int64 `json:"size"`
	// SHA256 is the hex digest of exactly the bytes that are forwarded
	// once approved.
	SHA256 string `json:"sha256"`
	// Kind is none, json, form, text, binary or too_large.
	Kind   string  `json:"kind"`
	Fields []Field `json:"fields,omitempty"`
	// Excerpt is the start of a text or binary body, made safe to show
	// (control characters escaped; binary as hex).
	Excerpt string `json:"excerpt,omitempty"`
}

// Fetch is what a preview fetch brought back.
type Fetch struct {
	// Operation is "<tool> <operation>".
	Operation string `json:"operation"`
	// State is "fetched" or "failed".
	State string `json:"state"`
	// Error says why it failed, in a short sentence; it never holds the
	// answer's body, the spec's other connectors or operations.
	Error string `json:"error,omitempty"`
	// Code is the failure's stable code (operation_not_allowed,
	// credential_not_configured, upstream_unreachable, upstream_status,
	// ...); empty when fetched.
	Code string `json:"code,omitempty"`
	// Status is the upstream's HTTP status; zero when none came.
	Status int     `json:"status,omitempty"`
	Fields []Field `json:"fields,omitempty"`
	// AuditID is the approval.preview_fetch event of the call.
	AuditID string `json:"audit_id,omitempty"`
}

// Preview is everything a person is shown about one held request.
type Preview struct {
	Method string `json:"method"`
	Host   string `json:"host"`
	Path   string `json:"path"`
	// PathParams are the operation's path templates and their values.
	PathParams []Field `json:"path_params,omitempty"`
	Query      []Field `json:"query,omitempty"`
	Body       *Body   `json:"body,omitempty"`
	Fetch      *Fetch  `json:"fetch,omitempty"`
	// GitPush is a git push's ref updates; its pack is not previewed
	// and Body is nil.
	GitPush *GitPush `json:"git_push,omitempty"`
}

// Clone returns a deep copy.
func (p *Preview) Clone() *Preview {
	if p == nil {
		return nil
	}
	c := *p
	c.PathParams = slices.Clone(p.PathParams)
	c.Query = slices.Clone(p.Query)
	if p.Body != nil {
		b := *p.Body
		b.Fields = slices.Clone(p.Body.Fields)
		c.Body = &b
	}
	if p.Fetch != nil {
		f := *p.Fetch
		f.Fields = slices.Clone(p.Fetch.Fields)
		c.Fetch = &f
	}
	if p.GitPush != nil {
		g := *p.GitPush
		g.Updates = slices.Clone(p.GitPush.Updates)
		c.GitPush = &g
	}
	return &c
}

// FieldNames returns the names of the previewed fields (path, query, body
// and fetched), without values: what the audit log may record.
func (p *Preview) FieldNames() []string {
	if p == nil {
		return nil
	}
	var names []string
	add := func(prefix string, fs []Field) {
		for _, f := range fs {
			names = append(names, prefix+f.Name)
		}
	}
	add("path.", p.PathParams)
	add("query.", p.Query)
	if p.Body != nil {
		add("body.", p.Body.Fields)
	}
	if p.Fetch != nil {
		add("fetch.", p.Fetch.Fields)
	}
	return names
}

// Label is how an input is shown: its label and whether it is long text.
type Label struct {
	Text      string `json:"label,omitempty"`
	Multiline bool   `json:"multiline,omitempty"`
}

// Hints order and label the fields of a held request.
type Hints struct {
	// Order lists the fields shown first (the operation's approval_preview
	// fields, else its declared inputs), in order.
	Order []string `json:"order,omitempty"`
	// Labels gives labels by field name (from action manifests).
	Labels map[string]Label `json:"labels,omitempty"`
}

// Arrange labels fields and puts the ones in h.Order first, in that order,
// marked Primary; the rest follow by name.
func (h Hints) Arrange(fields []Field) []Field {
	for i := range fields {
		f := &fields[i]
		if l, ok := h.Labels[f.Name]; ok {
			f.Label = l.Text
			f.Multiline = f.Multiline || l.Multiline
		}
		f.Primary = slices.Contains(h.Order, f.Name)
	}
	sort.SliceStable(fields, func(i, j int) bool {
		a, b := fields[i], fields[j]
		if a.Primary != b.Primary {
			return a.Primary
		}
		if a.Primary {
			return slices.Index(h.Order, a.Name) < slices.Index(h.Order, b.Name)
		}
		return a.Name < b.Name
	})
	return fields
}

// NewField returns a field whose name and value are made safe to show
// (control characters escaped) and whose value is cut to MaxValue bytes (at a rune
// boundary) and marked multi-line when it holds a newline.
func NewField(name, value string) Field {
	value = safeText([]byte(value))
	f := Field{Name: safeText([]byte(name)), Value: value}
	if len(value) > MaxValue {
		cut := MaxValue
		for cut > 0 && !utf8.RuneStart(value[cut]) {
			cut--
		}
		f.Value, f.Truncated = value[:cut], true
	}
	f.Multiline = strings.Contains(f.Value, "\n")
	return f
}

// QueryFields returns the fields of a raw query, repeated values joined
// with ",".
func QueryFields(rawQuery string, h Hints) []Field {
	if rawQuery == "" {
		return nil
	}
	q, err := url.ParseQuery(rawQuery)
	if err != nil && len(q) == 0 {
		return []Field{NewField("(query)", rawQuery)}
	}
	return h.Arrange(valuesFields(q))
}

func valuesFields(q url.Values) []Field {
	var out []Field
	for _, k := range slices.Sorted(mapKeys(q)) {
		if len(out) == MaxFields {
			break
		}
		out = append(out, NewField(k, strings.Join(q[k], ",")))
	}
	return out
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// NewBody previews a body of size bytes with digest sum (hex). data holds
// the body when size <= MaxBody, and is nil for a larger one, which is then
// shown by size and digest only.
func NewBody(contentType string, data []byte, size int64, sum string, h Hints) *Body {
	b := &Body{ContentType: contentType, Size: size, SHA256: sum}
	switch {
	case size == 0:
		b.Kind = KindNone
		return b
	case data == nil || size > MaxBody:
		b.Kind = KindTooLarge
		return b
	}
	mt, _, _ := mime.ParseMediaType(contentType)
	switch {
	case mt == "application/json" || strings.HasSuffix(mt, "+json"):
		if fields, ok := jsonFields(data); ok {
			b.Kind, b.Fields = KindJSON, h.Arrange(fields)
			return b
		}
	case mt == "application/x-www-form-urlencoded":
		if q, err := url.ParseQuery(string(data)); err == nil {
			b.Kind, b.Fields = KindForm, h.Arrange(valuesFields(q))
			return b
		}
	}
	if isText(mt, data) {
		b.Kind, b.Excerpt = KindText, safeText(data[:min(len(data), ExcerptBytes)])
		return b
	}
	b.Kind, b.Excerpt = KindBinary, hex.EncodeToString(data[:min(len(data), ExcerptBytes/8)])
	return b
}

// jsonFields returns the top-level members of a JSON object: strings as
// they are, other values as compact JSON.
func jsonFields(data []byte) ([]Field, bool) {
	var obj map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&obj); err != nil || obj == nil || dec.More() {
		return nil, false
	}
	var out []Field
	for _, k := range slices.Sorted(mapKeys(obj)) {
		if len(out) == MaxFields {
			break
		}
		out = append(out, NewField(k, Scalar(obj[k])))
	}
	return out, true
}

// Scalar renders a JSON value: a string unquoted, anything else compact.
func Scalar(raw json.RawMessage) string {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err == nil {
		return buf.String()
	}
	return strings.TrimSpace(string(raw))
}

// Lookup returns the value at a dotted path ("owner.login") of a JSON
// document.
func Lookup(data []byte, path string) (json.RawMessage, bool) {
	cur := json.RawMessage(data)
	for _, part := range strings.Split(path, ".") {
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(cur, &obj); err != nil {
			return nil, false
		}
		v, ok := obj[part]
		if !ok {
			return nil, false
		}
		cur = v
	}
	return cur, true
}

// Render returns the labelled fields of a fetched JSON answer, in the order
// given (label → dotted field); with none it returns the answer's top-level
// members. A field the answer lacks is shown as "(absent)".
func Render(data []byte, labels, paths []string) ([]Field, bool) {
	if len(labels) == 0 {
		return jsonFields(data)
	}
	if !json.Valid(data) {
		return nil, false
	}
	out := make([]Field, 0, len(labels))
	for i, l := range labels {
		v, ok := Lookup(data, paths[i])
		f := NewField(paths[i], "(absent)")
		if ok {
			f = NewField(paths[i], Scalar(v))
		}
		f.Label, f.Primary = l, true
		out = append(out, f)
	}
	return out, true
}

func isText(mt string, data []byte) bool {
	if strings.HasPrefix(mt, "text/") || mt == "application/xml" || strings.HasSuffix(mt, "+xml") ||
		mt == "application/json" || strings.HasSuffix(mt, "+json") {
		return utf8.Valid(data)
	}
	if mt != "" && mt != "application/octet-stream" {
		return false
	}
	return utf8.Valid(data) && bytes.IndexByte(data, 0) < 0
}

// safeText returns data as valid UTF-8 with control characters other than
// newline and tab escaped, so an excerpt cannot move a terminal's cursor or
// hide text.
func safeText(data []byte) string {
	var b strings.Builder
	for len(data) > 0 {
		r, n := utf8.DecodeRune(data)
		switch {
		case r == utf8.RuneError && n <= 1:
			b.WriteString(`\x` + hex.EncodeToString(data[:1]))
		case r == '\n' || r == '\t':
			b.WriteRune(r)
		case r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) || r == 0x200e || r == 0x200f || (r >= 0x202a && r <= 0x202e) || (r >= 0x2066 && r <= 0x2069):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteRune(r)
		}
		data = data[n:]
	}
	return b.String()
}
