package policy

import (
	"net/url"
	"slices"
	"strings"
	"testing"
)

// FuzzDecide checks the properties of Decide over arbitrary requests against
// a fixed snapshot: it never panics; an allow always carries a Match whose
// method and host are the operation's and whose path a naive reference
// matcher accepts; traversal and encoded-separator paths are never allowed;
// the zero Scope never allows.
func FuzzDecide(f *testing.F) {
	seeds := []Request{
		gh("GET", "/user"),
		gh("GET", "/repos/octo/hello/issues"),
		gh("POST", "/repos/oc%74o/hello%20world/issues"),
		gh("GET", "/repos/acme/widgets/issues"),
		gh("GET", "/repos/a/b/../issues"),
		gh("GET", "/repos/a/b/%2e%2e/issues"),
		gh("GET", "/repos/a%2fb/c/issues"),
		gh("GET", `/repos/a\b/c/issues`),
		gh("GET", "/repos/a/b/..;/issues"),
		gh("GET", "/repos/%252e%252e/x/issues"),
		gh("GET", "/orgs/"),
		gh("GET", "/files/a%20b"),
		{"GET", "API.GITHUB.COM.", "/us%65r"},
		{"GET", "git.internal:8443", "/status"},
		{"GET", "[2001:db8::1]:8443", "/v6"},
		{"POST", "gmail.googleapis.com", "/gmail/v1/users/me/messages/send"},
		gem("/v1beta/models/gemini:streamGenerateContent"),
		gem("/v1beta/models/pro:streamGenerateContent"),
		gem("/v1beta/models/a:b:countTokens"),
		gem("/v1beta/m%3astreamGenerateContent/ops"),
		gem("/v1beta/:streamGenerateContent/ops"),
	}
	for _, r := range seeds {
		f.Add(r.Method, r.Host, r.Path)
	}
	s := compileTest(f)
	full := NewScope([]string{fqnGitHub, fqnGoogle, fqnDup})
	partial := NewScope(scopeGH)
	f.Fuzz(func(t *testing.T, method, host, path string) {
		r := Request{Method: method, Host: host, Path: path}
		if d := s.Decide(Scope{}, r); d.Allow || d.Match != nil {
			t.Fatalf("Decide(zero Scope, %q) allowed", r)
		}
		for _, sc := range []Scope{full, partial} {
			d := s.Decide(sc, r)
			if !d.Allow {
				if d.Match != nil || d.Reason == ReasonAllowed || d.Reason == "" || d.Message == "" {
					t.Fatalf("Decide(%q) = deny with match %v, reason %q, message %q", r, d.Match, d.Reason, d.Message)
				}
				continue
			}
			checkAllowed(t, sc, r, d)
		}
	})
}

func checkAllowed(t *testing.T, sc Scope, r Request, d Decision) {
	t.Helper()
	if d.Match == nil || d.Reason != ReasonAllowed {
		t.Fatalf("Decide(%q) allowed with match %v, reason %q", r, d.Match, d.Reason)
	}
	op := d.Match.Compiled.Operation()
	if op.Method != r.Method {
		t.Fatalf("Decide(%q) allowed operation %s with method %q", r, op.Name, op.Method)
	}
	if !sc.has(d.Match.ConnectorFQN) {
		t.Fatalf("Decide(%q) allowed %s outside the scope", r, d.Match.ConnectorFQN)
	}
	host := NormalizeHost(r.Host)
	if !slices.ContainsFunc(op.Hosts, func(h string) bool { return NormalizeHost(h) == host }) {
		t.Fatalf("Decide(%q) allowed operation %s whose hosts %q do not include %q", r, op.Name, op.Hosts, host)
	}
	lower := strings.ToLower(r.Path)
	if strings.Contains(lower, "%2f") || strings.Contains(lower, "%5c") || strings.Contains(r.Path, `\`) || strings.Contains(r.Path, "//") {
		t.Fatalf("Decide(%q) allowed a path with an encoded separator, backslash or empty segment", r)
	}
	params, ok := referenceMatch(op.Path, r.Path)
	if !ok {
		t.Fatalf("Decide(%q) allowed %s (%s), which the reference matcher rejects", r, op.Name, op.Path)
	}
	for k, v := range params {
		if d.Match.PathParams[k] != v {
			t.Fatalf("Decide(%q).PathParams = %v, reference %v", r, d.Match.PathParams, params)
		}
	}
}

// referenceMatch is a slow, obviously correct matcher: it rejects any dot
// segment after decoding and compares decoded segments with the template.
func referenceMatch(tmpl, path string) (map[string]string, bool) {
	if !strings.HasPrefix(path, "/") {
		return nil, false
	}
	ts, ps := strings.Split(tmpl[1:], "/"), strings.Split(path[1:], "/")
	if len(ts) != len(ps) {
		return nil, false
	}
	params := map[string]string{}
	for i, p := range ps {
		dec, err := url.PathUnescape(p)
		if err != nil || strings.ContainsAny(dec, "/\\\x00") {
			return nil, false
		}
		if base, _, _ := strings.Cut(dec, ";"); base != "" && strings.Trim(base, ".") == "" {
			return nil, false
		}
		t := ts[i]
		if name, method, ok := strings.Cut(t, "}:"); ok && strings.HasPrefix(t, "{") {
			value, rest, colon := strings.Cut(dec, ":")
			if !colon || value == "" || rest != method {
				return nil, false
			}
			params[name[1:]] = value
			continue
		}
		if strings.HasPrefix(t, "{") && strings.HasSuffix(t, "}") {
			if dec == "" {
				return nil, false
			}
			params[t[1:len(t)-1]] = dec
			continue
		}
		lit, _ := url.PathUnescape(t)
		if lit != dec {
			return nil, false
		}
	}
	return params, true
}
