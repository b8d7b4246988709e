package policy

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/aileron-dev/aileron-proxy/internal/testkit"
)

const (
	fqnGitHub = "github://acme/aileron-connector-github"
	fqnGoogle = "github://acme/aileron-connector-google"
	fqnDup    = "local://other/overlap"

	hostGemini = "generativelanguage.googleapis.com"
)

func testOp(name, method, path string, hosts ...string) Operation {
	return Operation{Name: name, Method: method, Path: path, Hosts: hosts}
}

// testSpecs returns the connectors the table tests run against. fqnDup
// overlaps fqnGitHub on purpose.
func testSpecs() []Connector {
	gh := &Spec{
		SchemaVersion: SchemaVersion,
		Connector:     ConnectorMeta{FQN: fqnGitHub},
		Tools: []Tool{{Name: "gh-api", Operations: []Operation{
			testOp("user.get", "GET", "/user", "api.github.com"),
			testOp("issues.list", "GET", "/repos/{owner}/{repo}/issues", "api.github.com"),
			testOp("issues.create", "POST", "/repos/{owner}/{repo}/issues", "api.github.com"),
			testOp("repo.get", "GET", "/repos/{owner}/{repo}", "api.github.com"),
			testOp("issues.acme", "GET", "/repos/acme/{repo}/issues", "api.github.com"),
			testOp("issues.gadgets", "GET", "/repos/{owner}/gadgets/issues", "api.github.com"),
			testOp("issues.widgets", "GET", "/repos/acme/widgets/issues", "api.github.com"),
			testOp("orgs.list", "GET", "/orgs/", "api.github.com"),
			testOp("root", "GET", "/", "api.github.com"),
			testOp("file.get", "GET", "/files/a%20b", "api.github.com"),
			testOp("status", "GET", "/status", "git.internal:8443", "API.GitHub.com.:443"),
			testOp("v6", "GET", "/v6", "[2001:db8:0::1]:8443"),
			{Name: "help", Summary: "not proxyable: no method, path or hosts"},
		}}},
	}
	google := &Spec{
		SchemaVersion: SchemaVersion,
		Connector:     ConnectorMeta{FQN: fqnGoogle},
		Tools: []Tool{{Name: "google", Operations: []Operation{
			testOp("gmail.messages.search", "GET", "/gmail/v1/users/me/messages", "gmail.googleapis.com"),
			testOp("gmail.messages.send", "POST", "/gmail/v1/users/me/messages/send", "gmail.googleapis.com"),
			testOp("models.stream", "POST", "/v1beta/models/{model}:streamGenerateContent", hostGemini),
			testOp("models.count", "POST", "/v1beta/models/{model}:countTokens", hostGemini),
			testOp("models.method", "POST", "/v1beta/models/{model_method}", hostGemini),
			testOp("models.pro", "POST", "/v1beta/models/pro:streamGenerateContent", hostGemini),
			testOp("models.ops", "POST", "/v1beta/{model}:streamGenerateContent/ops", hostGemini),
			testOp("models.lit", "POST", "/v1beta/lit:streamGenerateContent/ops", hostGemini),
		}}},
	}
	dup := &Spec{
		SchemaVersion: SchemaVersion,
		Connector:     ConnectorMeta{FQN: fqnDup},
		Tools: []Tool{{Name: "gh2", Operations: []Operation{
			testOp("user", "GET", "/user", "api.github.com"),
			testOp("issues", "GET", "/repos/{o}/{r}/issues", "api.github.com"),
		}}},
	}
	return []Connector{{Spec: google, Hash: "sha256:bb"}, {Spec: gh, Hash: "sha256:aa"}, {Spec: dup, Hash: "sha256:cc"}}
}

func compileTest(t testing.TB) *Snapshot {
	t.Helper()
	s, err := Compile(testSpecs())
	if err != nil {
		t.Fatalf("Compile(testSpecs()) error: %v", err)
	}
	return s
}

type decideCase struct {
	name   string
	scope  []string // nil means the zero Scope
	req    Request
	reason Reason
	op     string            // "tool operation" when allowed
	params map[string]string // when allowed
}

func gh(method, path string) Request {
	return Request{Method: method, Host: "api.github.com:443", Path: path}
}

var scopeGH = []string{fqnGitHub}

func gem(path string) Request {
	return Request{Method: "POST", Host: hostGemini, Path: path}
}

func TestDecide(t *testing.T) {
	all := []string{fqnGitHub, fqnGoogle, fqnDup}
	cases := []decideCase{
		// Exact and templates.
		{name: "exact", scope: scopeGH, req: gh("GET", "/user"), reason: ReasonAllowed, op: "gh-api user.get"},
		{name: "root", scope: scopeGH, req: gh("GET", "/"), reason: ReasonAllowed, op: "gh-api root"},
		{name: "template", scope: scopeGH, req: gh("GET", "/repos/octo/hello/issues"), reason: ReasonAllowed, op: "gh-api issues.list",
			params: map[string]string{"owner": "octo", "repo": "hello"}},
		{name: "template params decoded", scope: scopeGH, req: gh("GET", "/repos/oc%74o/hello%20world/issues"), reason: ReasonAllowed,
			op: "gh-api issues.list", params: map[string]string{"owner": "octo", "repo": "hello world"}},
		{name: "template param with sub-delims", scope: scopeGH, req: gh("GET", "/repos/a;b=c/x@y/issues"), reason: ReasonAllowed,
			op: "gh-api issues.list", params: map[string]string{"owner": "a;b=c", "repo": "x@y"}},
		{name: "shorter template", scope: scopeGH, req: gh("GET", "/repos/octo/hello"), reason: ReasonAllowed, op: "gh-api repo.get",
			params: map[string]string{"owner": "octo", "repo": "hello"}},
		{name: "post template", scope: scopeGH, req: gh("POST", "/repos/octo/hello/issues"), reason: ReasonAllowed, op: "gh-api issues.create"},
		{name: "literal decoded for comparison", scope: scopeGH, req: gh("GET", "/us%65r"), reason: ReasonAllowed, op: "gh-api user.get"},
		{name: "spec literal encoded", scope: scopeGH, req: gh("GET", "/files/a%20b"), reason: ReasonAllowed, op: "gh-api file.get"},
		{name: "template does not match empty trailing", scope: scopeGH, req: gh("GET", "/repos/octo/"), reason: ReasonOperationNotAllowed},
		{name: "template does not match extra segment", scope: scopeGH, req: gh("GET", "/repos/octo/hello/issues/1"), reason: ReasonOperationNotAllowed},

		// Priority.
		{name: "exact beats templates", scope: scopeGH, req: gh("GET", "/repos/acme/widgets/issues"), reason: ReasonAllowed, op: "gh-api issues.widgets"},
		{name: "earlier literal beats later literal", scope: scopeGH, req: gh("GET", "/repos/acme/gadgets/issues"), reason: ReasonAllowed,
			op: "gh-api issues.acme", params: map[string]string{"repo": "gadgets"}},
		{name: "literal template beats all-param", scope: scopeGH, req: gh("GET", "/repos/acme/x/issues"), reason: ReasonAllowed, op: "gh-api issues.acme"},
		{name: "later literal beats all-param", scope: scopeGH, req: gh("GET", "/repos/x/gadgets/issues"), reason: ReasonAllowed,
			op: "gh-api issues.gadgets", params: map[string]string{"owner": "x"}},

		// Custom methods (AIP-136).
		{name: "custom method", scope: all, req: gem("/v1beta/models/gemini-2.5-pro:streamGenerateContent"), reason: ReasonAllowed,
			op: "google models.stream", params: map[string]string{"model": "gemini-2.5-pro"}},
		{name: "custom method chosen by suffix", scope: all, req: gem("/v1beta/models/gemini:countTokens"), reason: ReasonAllowed,
			op: "google models.count", params: map[string]string{"model": "gemini"}},
		{name: "custom method beats whole-segment template", scope: all, req: gem("/v1beta/models/gemini:streamGenerateContent"), reason: ReasonAllowed,
			op: "google models.stream"},
		{name: "other method falls to whole-segment template", scope: all, req: gem("/v1beta/models/gemini:embedContent"), reason: ReasonAllowed,
			op: "google models.method", params: map[string]string{"model_method": "gemini:embedContent"}},
		{name: "exact segment beats custom method", scope: all, req: gem("/v1beta/models/pro:streamGenerateContent"), reason: ReasonAllowed,
			op: "google models.pro"},
		{name: "literal segment beats custom method template", scope: all, req: gem("/v1beta/lit:streamGenerateContent/ops"), reason: ReasonAllowed,
			op: "google models.lit"},
		{name: "custom method not last", scope: all, req: gem("/v1beta/x%20y:streamGenerateContent/ops"), reason: ReasonAllowed,
			op: "google models.ops", params: map[string]string{"model": "x y"}},
		{name: "encoded colon", scope: all, req: gem("/v1beta/m%3AstreamGenerateContent/ops"), reason: ReasonAllowed,
			op: "google models.ops", params: map[string]string{"model": "m"}},
		{name: "custom method value empty", scope: all, req: gem("/v1beta/:streamGenerateContent/ops"), reason: ReasonOperationNotAllowed},
		{name: "custom method value with colon", scope: all, req: gem("/v1beta/a:b:streamGenerateContent/ops"), reason: ReasonOperationNotAllowed},
		{name: "custom method value with encoded colon", scope: all, req: gem("/v1beta/a%3ab:streamGenerateContent/ops"), reason: ReasonOperationNotAllowed},
		{name: "custom method missing", scope: all, req: gem("/v1beta/model/ops"), reason: ReasonOperationNotAllowed},
		{name: "custom method is case-sensitive", scope: all, req: gem("/v1beta/m:StreamGenerateContent/ops"), reason: ReasonOperationNotAllowed},
		{name: "custom method with extra text", scope: all, req: gem("/v1beta/m:streamGenerateContentX/ops"), reason: ReasonOperationNotAllowed},

		// Method, case and trailing slash.
		{name: "method mismatch", scope: scopeGH, req: gh("DELETE", "/user"), reason: ReasonOperationNotAllowed},
		{name: "method is case-sensitive", scope: scopeGH, req: gh("get", "/user"), reason: ReasonOperationNotAllowed},
		{name: "empty method", scope: scopeGH, req: gh("", "/user"), reason: ReasonOperationNotAllowed},
		{name: "path is case-sensitive", scope: scopeGH, req: gh("GET", "/User"), reason: ReasonOperationNotAllowed},
		{name: "trailing slash not in spec", scope: scopeGH, req: gh("GET", "/user/"), reason: ReasonOperationNotAllowed},
		{name: "trailing slash in spec", scope: scopeGH, req: gh("GET", "/orgs/"), reason: ReasonAllowed, op: "gh-api orgs.list"},
		{name: "missing trailing slash", scope: scopeGH, req: gh("GET", "/orgs"), reason: ReasonOperationNotAllowed},
		{name: "unknown path", scope: scopeGH, req: gh("GET", "/repos/a/b/pulls"), reason: ReasonOperationNotAllowed},

		// Hosts and ports.
		{name: "host without port", scope: scopeGH, req: Request{"GET", "api.github.com", "/user"}, reason: ReasonAllowed, op: "gh-api user.get"},
		{name: "host upper case and trailing dot", scope: scopeGH, req: Request{"GET", "API.GitHub.COM.:443", "/user"}, reason: ReasonAllowed, op: "gh-api user.get"},
		{name: "other port", scope: scopeGH, req: Request{"GET", "api.github.com:8443", "/user"}, reason: ReasonHostNotAllowed},
		{name: "other host", scope: scopeGH, req: Request{"GET", "evil.example.com:443", "/user"}, reason: ReasonHostNotAllowed},
		{name: "suffix host", scope: scopeGH, req: Request{"GET", "api.github.com.evil.com", "/user"}, reason: ReasonHostNotAllowed},
		{name: "host with path", scope: scopeGH, req: Request{"GET", "api.github.com/x", "/user"}, reason: ReasonHostNotAllowed},
		{name: "host with userinfo", scope: scopeGH, req: Request{"GET", "u@api.github.com", "/user"}, reason: ReasonHostNotAllowed},
		{name: "host with scheme", scope: scopeGH, req: Request{"GET", "https://api.github.com", "/user"}, reason: ReasonHostNotAllowed},
		{name: "empty host", scope: scopeGH, req: Request{"GET", "", "/user"}, reason: ReasonHostNotAllowed},
		{name: "leading zero port", scope: scopeGH, req: Request{"GET", "api.github.com:0443", "/user"}, reason: ReasonHostNotAllowed},
		{name: "non-default port", scope: scopeGH, req: Request{"GET", "git.internal:8443", "/status"}, reason: ReasonAllowed, op: "gh-api status"},
		{name: "non-default port required", scope: scopeGH, req: Request{"GET", "git.internal", "/status"}, reason: ReasonHostNotAllowed},
		{name: "op on two hosts", scope: scopeGH, req: gh("GET", "/status"), reason: ReasonAllowed, op: "gh-api status"},
		{name: "ipv6", scope: scopeGH, req: Request{"GET", "[2001:DB8::1]:8443", "/v6"}, reason: ReasonAllowed, op: "gh-api v6"},
		{name: "ipv6 default port", scope: scopeGH, req: Request{"GET", "[2001:db8::1]", "/v6"}, reason: ReasonHostNotAllowed},
		{name: "ipv6 with zone", scope: scopeGH, req: Request{"GET", "[2001:db8::1%eth0]:8443", "/v6"}, reason: ReasonHostNotAllowed},

		// Scope.
		{name: "zero scope", scope: nil, req: gh("GET", "/user"), reason: ReasonHostNotAllowed},
		{name: "zero scope traversal", scope: nil, req: gh("GET", "/../user"), reason: ReasonHostNotAllowed},
		{name: "scope without the host", scope: []string{fqnGoogle}, req: gh("GET", "/user"), reason: ReasonHostNotAllowed},
		{name: "scope without the host, bad path", scope: []string{fqnGoogle}, req: gh("GET", "/a/../user"), reason: ReasonHostNotAllowed},
		{name: "scope of an unknown connector", scope: []string{"github://nobody/none"}, req: gh("GET", "/user"), reason: ReasonHostNotAllowed},
		{name: "other connector in scope", scope: []string{fqnGoogle}, req: Request{"POST", "gmail.googleapis.com", "/gmail/v1/users/me/messages/send"},
			reason: ReasonAllowed, op: "google gmail.messages.send"},
		{name: "other connector out of scope", scope: scopeGH, req: Request{"POST", "gmail.googleapis.com", "/gmail/v1/users/me/messages/send"},
			reason: ReasonHostNotAllowed},
		{name: "overlap alone", scope: []string{fqnDup}, req: gh("GET", "/repos/x/y/issues"), reason: ReasonAllowed, op: "gh2 issues",
			params: map[string]string{"o": "x", "r": "y"}},
		{name: "overlap alone misses others", scope: []string{fqnDup}, req: gh("GET", "/repos/x/y"), reason: ReasonOperationNotAllowed},

		// Ambiguity.
		{name: "ambiguous template", scope: all, req: gh("GET", "/repos/x/y/issues"), reason: ReasonAmbiguous},
		{name: "ambiguous exact", scope: all, req: gh("GET", "/user"), reason: ReasonAmbiguous},
		{name: "more specific is not ambiguous", scope: all, req: gh("GET", "/repos/acme/y/issues"), reason: ReasonAllowed, op: "gh-api issues.acme"},
		{name: "unique with overlap in scope", scope: all, req: gh("GET", "/repos/x/y"), reason: ReasonAllowed, op: "gh-api repo.get"},
	}
	// Every refused form of path, on an allowed host and method.
	for _, p := range []string{
		"/repos/a/b/../issues", "/repos/a/../a/b/issues", "/..", "/../user", "/user/..", "/user/.", "/./user",
		"/repos/a/./b/issues", "/repos/a/b/%2e%2e/issues", "/repos/a/b/%2E%2E/issues", "/repos/a/b/.%2e/issues",
		"/repos/a/b/%2e./issues", "/repos/a/%2e/b/issues", "/repos/a/b/..;/issues", "/repos/a/b/.;x/issues", "/repos/../b/issues", "/repos/%2e%2e/b/issues", "/repos/a/%2E/issues",
		"/repos/a/b/%2e%2e%3b/issues", "/repos/a/.../issues",
		"/repos/a%2fb/c/issues", "/repos/a%2Fb/c/issues", "/repos/a/b%2F..%2Fc/issues",
		"/repos/a%5cb/c/issues", "/repos/a%5Cb/c/issues", `/repos/a\b/c/issues`, `/repos\..\user`, `\user`,
		"//user", "/repos//b/issues", "/repos/a/b//issues", "//",
		"/user%00", "/user\x00", "/us\ter", "/user\x7f", "/user%7f", "/user%0a", "/user\r\n",
		"/user%zz", "/user%2", "/user%", "/user%%30",
		"/repos/%252e%252e/x/issues", "/repos/a%252fb/c/issues",
		"/user?x=1", "/user#frag", "/repos/a b/c/issues", "/us\xc3\xa9r", "/repos/{owner}/b/issues",
		"", "user", "*",
	} {
		cases = append(cases, decideCase{name: "refused " + p, scope: scopeGH, req: gh("GET", p), reason: ReasonPathNotCanonical})
	}

	s := compileTest(t)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var sc Scope
			if tc.scope != nil {
				sc = NewScope(tc.scope)
			}
			d := s.Decide(sc, tc.req)
			if d.Reason != tc.reason || d.Allow != (tc.reason == ReasonAllowed) {
				t.Fatalf("Decide(%q) = %v (allow %v, %s), want %v", tc.req, d.Reason, d.Allow, d.Message, tc.reason)
			}
			if !d.Allow {
				if d.Match != nil {
					t.Errorf("Decide(%q).Match = %+v on deny, want nil", tc.req, d.Match)
				}
				if d.Message == "" {
					t.Errorf("Decide(%q).Message is empty on deny", tc.req)
				}
				return
			}
			if d.Match == nil {
				t.Fatalf("Decide(%q).Match = nil on allow", tc.req)
			}
			if got := d.Match.Tool + " " + d.Match.Compiled.Operation().Name; got != tc.op {
				t.Errorf("Decide(%q) matched %q, want %q", tc.req, got, tc.op)
			}
			if d.Match.Compiled.Operation().Method != tc.req.Method {
				t.Errorf("Decide(%q) matched method %q", tc.req, d.Match.Compiled.Operation().Method)
			}
			if tc.params != nil && !reflect.DeepEqual(d.Match.PathParams, tc.params) {
				t.Errorf("Decide(%q).PathParams = %v, want %v", tc.req, d.Match.PathParams, tc.params)
			}
			if !strings.Contains(d.Match.Compiled.Operation().Path, "{") && d.Match.PathParams != nil {
				t.Errorf("Decide(%q).PathParams = %v for an exact path, want nil", tc.req, d.Match.PathParams)
			}
		})
	}
}

func TestDecideMatchIdentity(t *testing.T) {
	s := compileTest(t)
	d := s.Decide(NewScope([]string{fqnGoogle}), Request{"GET", "gmail.googleapis.com:443", "/gmail/v1/users/me/messages"})
	want := Match{ConnectorFQN: fqnGoogle, ConnectorHash: "sha256:bb", Tool: "google"}
	if !d.Allow || d.Match.ConnectorFQN != want.ConnectorFQN || d.Match.ConnectorHash != want.ConnectorHash || d.Match.Tool != want.Tool {
		t.Fatalf("Decide = %+v, want allow with %+v", d, want)
	}
	if d.Message != "" || d.AllowedOperations != nil {
		t.Errorf("Decide allowed with Message %q and AllowedOperations %v, want both empty", d.Message, d.AllowedOperations)
	}
}

func TestDecideMessages(t *testing.T) {
	s := compileTest(t)
	sc := NewScope(scopeGH)
	wantAllowed := []string{
		"GET / (gh-api root)",
		"GET /files/a%20b (gh-api file.get)",
		"GET /orgs/ (gh-api orgs.list)",
		"GET /repos/acme/widgets/issues (gh-api issues.widgets)",
		"GET /repos/acme/{repo}/issues (gh-api issues.acme)",
		"GET /repos/{owner}/gadgets/issues (gh-api issues.gadgets)",
		"GET /repos/{owner}/{repo} (gh-api repo.get)",
		"GET /repos/{owner}/{repo}/issues (gh-api issues.list)",
		"GET /status (gh-api status)",
		"GET /user (gh-api user.get)",
		"POST /repos/{owner}/{repo}/issues (gh-api issues.create)",
	}
	tests := []struct {
		req          Request
		sc           Scope
		wantContains []string
		wantAllowed  []string
	}{
		{gh("GET", "/repos/a/b/pulls"), sc, []string{
			"GET /repos/a/b/pulls on api.github.com is not an operation this session allows; allowed on this host: GET / (gh-api root), ",
			"GET /repos/{owner}/{repo}/issues (gh-api issues.list)",
		}, wantAllowed},
		{gh("DELETE", "/repos/a/b/issues"), sc, []string{
			"DELETE /repos/a/b/issues on api.github.com is not an operation this session allows (this path is allowed with GET, POST); allowed on this host: ",
		}, wantAllowed},
		{gh("GET", "/repos/a/b/%2e%2e/issues"), sc, []string{
			`GET "/repos/a/b/%2e%2e/issues" on api.github.com was refused before matching: it has a "." or ".." segment`,
			"allowed on this host: GET / (gh-api root)",
		}, wantAllowed},
		{gh("GET", "/a%2fb"), sc, []string{"encoded slash (%2F)"}, wantAllowed},
		{Request{"GET", "evil.example.com", "/x"}, sc, []string{
			"GET /x is refused: evil.example.com is not a host this session can reach; hosts this session can reach: [2001:db8::1]:8443, api.github.com, git.internal:8443",
		}, nil},
		{Request{"GET", "bad host", "/x"}, sc, []string{`"bad host" is not a valid host:port`}, nil},
		{gh("GET", "/user"), Scope{}, []string{"this session has no connectors"}, nil},
		{gh("GET", "/user"), NewScope([]string{fqnGitHub, fqnDup}), []string{
			"GET /user on api.github.com matches more than one operation (gh-api user.get of " + fqnGitHub + "; gh2 user of " + fqnDup + ")",
			"aileron-proxy connector remove",
		}, nil},
	}
	for _, tc := range tests {
		d := s.Decide(tc.sc, tc.req)
		for _, w := range tc.wantContains {
			if !strings.Contains(d.Message, w) {
				t.Errorf("Decide(%q).Message = %q, want it to contain %q", tc.req, d.Message, w)
			}
		}
		if tc.wantAllowed != nil && !reflect.DeepEqual(d.AllowedOperations, tc.wantAllowed) {
			t.Errorf("Decide(%q).AllowedOperations = %q, want %q", tc.req, d.AllowedOperations, tc.wantAllowed)
		}
		if tc.wantAllowed == nil && d.Reason == ReasonHostNotAllowed && d.AllowedOperations != nil {
			t.Errorf("Decide(%q).AllowedOperations = %q for a host outside the session, want nil", tc.req, d.AllowedOperations)
		}
	}
}

func TestDecideLongListIsCapped(t *testing.T) {
	var ops []Operation
	for i := range 30 {
		ops = append(ops, testOp("op"+string(rune('a'+i%26))+strings.Repeat("x", i/26), "GET", "/p/"+string(rune('a'+i%26))+strings.Repeat("x", i/26), "h.example"))
	}
	s, err := Compile([]Connector{{Spec: &Spec{Connector: ConnectorMeta{FQN: "local://a/b"}, Tools: []Tool{{Name: "t", Operations: ops}}}}})
	if err != nil {
		t.Fatal(err)
	}
	d := s.Decide(NewScope([]string{"local://a/b"}), Request{"GET", "h.example", "/nope"})
	if len(d.AllowedOperations) != 30 || !strings.HasSuffix(d.Message, ", and 10 more (see allowed_operations)") {
		t.Errorf("Decide(/nope) = %d allowed operations, message %q; want 30 and a capped message", len(d.AllowedOperations), d.Message)
	}
}

func TestDecideNilSnapshot(t *testing.T) {
	var s *Snapshot
	d := s.Decide(NewScope(scopeGH), gh("GET", "/user"))
	if d.Allow || d.Reason != ReasonHostNotAllowed {
		t.Errorf("nil Snapshot Decide = %v %v, want deny %v", d.Allow, d.Reason, ReasonHostNotAllowed)
	}
	if s.Intercepts(NewScope(scopeGH), "api.github.com") || s.Hosts(NewScope(scopeGH)) != nil || s.Connectors() != nil {
		t.Error("nil Snapshot intercepts, lists hosts or connectors")
	}
	if _, err := s.Lookup(NewScope(scopeGH), fqnGitHub, "gh-api", "user.get"); !errors.Is(err, ErrUnknownConnector) {
		t.Errorf("nil Snapshot Lookup error = %v, want ErrUnknownConnector", err)
	}
}

func TestDecisionZeroValueDenies(t *testing.T) {
	var d Decision
	if d.Allow || d.Match != nil || d.Reason.String() != "unspecified" {
		t.Errorf("zero Decision = %+v (reason %s), want a deny with reason unspecified", d, d.Reason)
	}
	if ReasonAmbiguous.String() != "ambiguous_operation" || ReasonPathNotCanonical.String() != "path_not_canonical" {
		t.Errorf("Reason.String() spells %q, %q", ReasonAmbiguous, ReasonPathNotCanonical)
	}
}

func TestDecideConcurrent(t *testing.T) {
	s := compileTest(t)
	sc := NewScope(scopeGH)
	var wg sync.WaitGroup
	errs := make(chan string, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 500 {
				d := s.Decide(sc, gh("GET", "/repos/o/r/issues"))
				if !d.Allow || d.Match.PathParams["owner"] != "o" {
					errs <- d.Message
					return
				}
				d.Match.PathParams["owner"] = "mutated" // the caller's copy only
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Errorf("concurrent Decide denied or shared params: %s", e)
	}
}

func TestScope(t *testing.T) {
	if got := (Scope{}).FQNs(); got != nil {
		t.Errorf("Scope{}.FQNs() = %q, want nil", got)
	}
	if got := NewScope(nil); !got.isEmpty() {
		t.Errorf("NewScope(nil) = %v, want the zero Scope", got)
	}
	if got := NewScope([]string{"", ""}); !got.isEmpty() {
		t.Errorf(`NewScope("", "") = %v, want the zero Scope`, got)
	}
	in := []string{"local://b/b", "local://a/a", "local://b/b", ""}
	sc := NewScope(in)
	in[0] = "local://changed/x"
	if got, want := sc.FQNs(), []string{"local://a/a", "local://b/b"}; !reflect.DeepEqual(got, want) {
		t.Errorf("NewScope(%q).FQNs() = %q, want %q", in, got, want)
	}
}

func TestHostsAndIntercepts(t *testing.T) {
	s := compileTest(t)
	tests := []struct {
		scope []string
		want  []string
	}{
		{nil, nil},
		{scopeGH, []string{"[2001:db8::1]:8443", "api.github.com:443", "git.internal:8443"}},
		{[]string{fqnGoogle}, []string{"generativelanguage.googleapis.com:443", "gmail.googleapis.com:443"}},
		{[]string{fqnDup}, []string{"api.github.com:443"}},
	}
	for _, tc := range tests {
		sc := NewScope(tc.scope)
		if got := s.Hosts(sc); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("Hosts(%q) = %q, want %q", tc.scope, got, tc.want)
		}
	}
	intercepts := []struct {
		scope []string
		host  string
		want  bool
	}{
		{scopeGH, "api.github.com:443", true},
		{scopeGH, "API.GITHUB.COM", true},
		{scopeGH, "api.github.com.", true},
		{scopeGH, "api.github.com:8443", false},
		{scopeGH, "[2001:db8::1]:8443", true},
		{scopeGH, "[2001:0db8:0:0::1]:8443", true},
		{scopeGH, "gmail.googleapis.com:443", false},
		{scopeGH, "api.github.com:443/", false},
		{scopeGH, "", false},
		{nil, "api.github.com:443", false},
		{[]string{fqnGoogle}, "gmail.googleapis.com", true},
	}
	for _, tc := range intercepts {
		if got := s.Intercepts(NewScope(tc.scope), tc.host); got != tc.want {
			t.Errorf("Intercepts(%q, %q) = %v, want %v", tc.scope, tc.host, got, tc.want)
		}
	}
}

func TestLookup(t *testing.T) {
	s := compileTest(t)
	sc := NewScope([]string{fqnGitHub, fqnGoogle})
	m, err := s.Lookup(sc, fqnGitHub, "gh-api", "issues.list")
	if err != nil {
		t.Fatalf("Lookup(issues.list) error: %v", err)
	}
	if m.ConnectorFQN != fqnGitHub || m.ConnectorHash != "sha256:aa" || m.Tool != "gh-api" || m.Compiled.Operation().Name != "issues.list" || m.PathParams != nil {
		t.Errorf("Lookup(issues.list) = %+v", m)
	}
	if m, err := s.Lookup(sc, fqnGitHub, "gh-api", "help"); err != nil || m.Compiled.Operation().IsProxyable() {
		t.Errorf("Lookup(help) = %+v, %v; want the non-proxyable operation", m, err)
	}
	errCases := []struct {
		name          string
		sc            Scope
		fqn, tool, op string
		want          error
		contains      []string
	}{
		{"not installed", sc, "github://nobody/none", "t", "o", ErrUnknownConnector,
			[]string{`"github://nobody/none"`, "it is not installed", "this session's connectors are " + fqnGitHub + ", " + fqnGoogle}},
		{"installed, not in scope", sc, fqnDup, "gh2", "user", ErrUnknownConnector, []string{"it is not in this session"}},
		{"zero scope", Scope{}, fqnGitHub, "gh-api", "user.get", ErrUnknownConnector, []string{"this session has no connectors"}},
		{"unknown tool", sc, fqnGitHub, "gh", "user.get", ErrUnknownTool, []string{`unknown tool "gh"`, "the connector's tools are gh-api"}},
		{"unknown operation", sc, fqnGitHub, "gh-api", "pulls.list", ErrUnknownOperation,
			[]string{`unknown operation "pulls.list"`, "tool gh-api offers file.get, help, issues.acme, issues.create, issues.gadgets, issues.list, issues.widgets, orgs.list, repo.get, root, status, user.get, v6"}},
	}
	for _, tc := range errCases {
		t.Run(tc.name, func(t *testing.T) {
			m, err := s.Lookup(tc.sc, tc.fqn, tc.tool, tc.op)
			if !errors.Is(err, tc.want) || m != nil {
				t.Fatalf("Lookup(%q, %q, %q) = %v, %v; want %v", tc.fqn, tc.tool, tc.op, m, err, tc.want)
			}
			for _, c := range tc.contains {
				if !strings.Contains(err.Error(), c) {
					t.Errorf("Lookup error %q does not contain %q", err, c)
				}
			}
		})
	}
}

func TestCompileErrors(t *testing.T) {
	spec := func(fqn string, ops ...Operation) *Spec {
		return &Spec{Connector: ConnectorMeta{FQN: fqn}, Tools: []Tool{{Name: "t", Operations: ops}}}
	}
	tests := []struct {
		name  string
		conns []Connector
		want  string
	}{
		{"nil spec", []Connector{{}}, "compiling connectors[0]: spec is nil"},
		{"empty fqn", []Connector{{Spec: spec("")}}, "compiling connectors[0]: connector.fqn is empty"},
		{"duplicate fqn", []Connector{{Spec: spec("local://a/b"), Hash: "sha256:1"}, {Spec: spec("local://a/b"), Hash: "sha256:2"}},
			`compiling connector "local://a/b": it is listed twice (hashes "sha256:1" and "sha256:2")`},
		{"bad host", []Connector{{Spec: spec("local://a/b", testOp("o", "GET", "/x", "ok.example", "https://x.example/"))}},
			`compiling connector "local://a/b": tools[0].operations[0].hosts[1]: "https://x.example/" is not a valid host[:port]`},
		{"bad port", []Connector{{Spec: spec("local://a/b", testOp("o", "GET", "/x", "x.example:99999"))}}, `hosts[0]: "x.example:99999"`},
		{"relative path", []Connector{{Spec: spec("local://a/b", testOp("o", "GET", "x", "x.example"))}},
			`tools[0].operations[0].path: "x": it does not start with "/"`},
		{"dot segment", []Connector{{Spec: spec("local://a/b", testOp("o", "GET", "/a/../b", "x.example"))}}, `"/a/../b": it has a "." or ".." segment`},
		{"encoded slash", []Connector{{Spec: spec("local://a/b", testOp("o", "GET", "/a%2Fb", "x.example"))}}, "encoded slash"},
		{"empty segment", []Connector{{Spec: spec("local://a/b", testOp("o", "GET", "/a//b", "x.example"))}}, "empty segment"},
		{"partial template", []Connector{{Spec: spec("local://a/b", testOp("o", "GET", "/a/x{id}", "x.example"))}}, "whole segment"},
		{"empty template", []Connector{{Spec: spec("local://a/b", testOp("o", "GET", "/a/{}", "x.example"))}}, "whole segment"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Compile(tc.conns)
			if err == nil || !strings.Contains(err.Error(), tc.want) || s != nil {
				t.Fatalf("Compile() = %v, %v; want error containing %q", s, err, tc.want)
			}
		})
	}
}

func TestCompile(t *testing.T) {
	conns := testSpecs()
	s, err := Compile(conns)
	if err != nil {
		t.Fatalf("Compile error: %v", err)
	}
	var fqns []string
	for _, c := range s.Connectors() {
		fqns = append(fqns, c.Spec.Connector.FQN)
	}
	if want := []string{fqnGitHub, fqnGoogle, fqnDup}; !reflect.DeepEqual(fqns, want) {
		t.Errorf("Connectors() FQNs = %q, want %q (sorted)", fqns, want)
	}
	if c, ok := s.Connector(fqnGoogle); !ok || c.Hash != "sha256:bb" {
		t.Errorf("Connector(%q) = %+v, %v", fqnGoogle, c, ok)
	}
	if _, ok := s.Connector("local://no/such"); ok {
		t.Error("Connector(unknown) found")
	}
	// The snapshot owns its data: changing the input, or what Connectors
	// returned, changes no decision.
	conns[1].Spec.Tools[0].Operations[0].Path = "/changed"
	conns[1].Spec.Tools[0].Operations[0].Hosts[0] = "evil.example"
	list := s.Connectors()
	list[0] = Connector{}
	if d := s.Decide(NewScope(scopeGH), gh("GET", "/user")); !d.Allow || d.Match.Compiled.Operation().Path != "/user" {
		t.Errorf("after mutating the inputs, Decide(/user) = %v %s; want allowed", d.Reason, d.Message)
	}
	if c, _ := s.Connector(fqnGitHub); c.Spec == nil {
		t.Error("mutating Connectors() changed the snapshot")
	}
	// An empty set compiles and allows nothing.
	empty, err := Compile(nil)
	if err != nil || empty.Decide(NewScope(scopeGH), gh("GET", "/user")).Allow || empty.Hosts(NewScope(scopeGH)) != nil {
		t.Errorf("Compile(nil) = %v, %v; want an empty snapshot that allows nothing", empty, err)
	}
}

// TestFixtureSpecs compiles the fixture specs (copies of shared/fixtures) (decoded with
// encoding/json, as ParseSpec would) and checks their operations route.
func TestFixtureSpecs(t *testing.T) {
	files, err := filepath.Glob("testdata/fixtures/*.aileron.connector.v1.json")
	if err != nil || len(files) < 2 {
		t.Fatalf("fixture specs in testdata/fixtures: %v, %v", files, err)
	}
	var conns []Connector
	var fqns []string
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var sp Spec
		if err := json.Unmarshal(data, &sp); err != nil {
			t.Fatalf("decoding %s: %v", f, err)
		}
		conns = append(conns, Connector{Spec: &sp, Hash: "sha256:" + filepath.Base(f)})
		fqns = append(fqns, sp.Connector.FQN)
	}
	s, err := Compile(conns)
	if err != nil {
		t.Fatalf("Compile(fixtures) error: %v", err)
	}
	sc := NewScope(fqns)
	for _, tc := range []struct {
		req Request
		op  string
	}{
		{Request{"POST", "github.com:443", "/acme/widgets/git-upload-pack"}, "git.upload-pack"},
		{Request{"GET", "github.com", "/acme/widgets/info/refs"}, "git.info-refs"},
		{Request{"POST", "gmail.googleapis.com", "/gmail/v1/users/me/messages/send"}, "gmail.messages.send"},
		{Request{"GET", "api.github.com", "/repos/acme/widgets/issues"}, "issues.list"},
		{Request{"GET", "api.github.com", "/repos/acme/widgets/pulls"}, ""},
		{Request{"POST", "github.com:443", "/acme/widgets/git-receive-pack"}, ""},
	} {
		d := s.Decide(sc, tc.req)
		got := ""
		if d.Allow {
			got = d.Match.Compiled.Operation().Name
		}
		if got != tc.op {
			t.Errorf("Decide(%q) = %q (%s), want %q", tc.req, got, d.Message, tc.op)
		}
	}
	if got := s.Hosts(sc); !slices.Equal(got, []string{"api.github.com:443", "github.com:443", "gmail.googleapis.com:443"}) {
		t.Errorf("Hosts(fixtures) = %q", got)
	}
}

// TestNormalizeHost is the matcher's view of the one host grammar
// (internal/hostport): unbracketed IPv6 is refused as in specs, and
// internationalised names compare in punycode.
func TestNormalizeHost(t *testing.T) {
	tests := []struct{ in, want string }{
		{"api.github.com:443", "api.github.com:443"},
		{"api.github.com", "api.github.com:443"},
		{"API.GitHub.com.", "api.github.com:443"},
		{"api.github.com.:8443", "api.github.com:8443"},
		{"127.0.0.1:8080", "127.0.0.1:8080"},
		{"[::1]:8443", "[::1]:8443"},
		{"[0:0::1]", "[::1]:443"},
		{"[2001:DB8::1]:1", "[2001:db8::1]:1"},
		{"::1", ""},
		{"", ""},
		{":443", ""},
		{"h:", ""},
		{"h:0", ""},
		{"h:65536", ""},
		{"h:+1", ""},
		{"h:08", ""},
		{"a..b", ""},
		{".a", ""},
		{"a b", ""},
		{"a/b", ""},
		{"u@a", ""},
		{"[::1", ""},
		{"[::1]x", ""},
		{"[1.2.3.4]:80", ""},
		{"[fe80::1%eth0]:443", ""},
		{"h\u00e9.example", "xn--h-bga.example:443"},
		{"a_b.example:8443", "a_b.example:8443"},
		{strings.Repeat("a", 64) + ".example", ""},
	}
	for _, tc := range tests {
		if got := NormalizeHost(tc.in); got != tc.want {
			t.Errorf("NormalizeHost(%q) = %q; want %q", tc.in, got, tc.want)
		}
	}
}

// TestReasonsListed fails when a Reason constant is missing from Reasons,
// the list the proxy's metric labels are built from.
func TestReasonsListed(t *testing.T) {
	listed := map[Reason]bool{}
	for _, r := range Reasons() {
		listed[r] = true
	}
	consts := testkit.StringConsts(t, "match.go", "Reason")
	for _, c := range consts {
		if !listed[Reason(c.Value)] {
			t.Errorf("%s (%q) is missing from Reasons()", c.Name, c.Value)
		}
	}
	if len(consts) != len(listed) {
		t.Errorf("match.go declares %d Reason constants, Reasons() lists %d", len(consts), len(listed))
	}
}
