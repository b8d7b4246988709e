package preview

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
)

// Directive is an installed action's preview, which the control API sends
// the proxy with a held call: the read-only operation to fetch (of the
// call's connector), its arguments, what to render, and the action's input
// labels. The proxy honours it only from the API.
type Directive struct {
	Tool      string `json:"tool,omitempty"`
	Operation string `json:"operation,omitempty"`
	// Args are the fetched operation's arguments, as in a spec's
	// approval_preview.fetch.args.
	Args map[string]string `json:"args,omitempty"`
	// Render maps labels to dotted fields of the fetched answer.
	Render map[string]string `json:"render,omitempty"`
	// Labels label the held request's fields (action inputs).
	Labels map[string]Label `json:"labels,omitempty"`
}

// Encode returns d as base64url JSON for a header.
func (d Directive) Encode() string {
	b, _ := json.Marshal(d) // plain strings and maps: cannot fail
	return base64.RawURLEncoding.EncodeToString(b)
}

// DecodeDirective parses a header value made by Encode.
func DecodeDirective(v string) (Directive, error) {
	var d Directive
	raw, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(v, "="))
	if err != nil {
		return d, fmt.Errorf("decoding the preview directive: %w", err)
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		return d, fmt.Errorf("decoding the preview directive: %w", err)
	}
	return d, nil
}
