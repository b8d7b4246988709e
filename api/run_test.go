package api

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/aileron-dev/aileron-proxy/audit"
	"github.com/aileron-dev/aileron-proxy/internal/contract"
	"github.com/aileron-dev/aileron-proxy/internal/testkit"
	"github.com/aileron-dev/aileron-proxy/internal/testkit/specs"
	"github.com/aileron-dev/aileron-proxy/policy"
)

// TestRunRefusals covers every refusal of the run endpoint and proves with
// the upstream's counter that none of them sent anything upstream.
func TestRunRefusals(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	cs := h.createSession(fqnGH)
	tests := []struct {
		name      string
		body      string
		status    int
		code      contract.Code
		wantInMsg []string
		extraKey  string // a member of the error object that must be present
		audited   bool
	}{
		{name: "unknown operation lists the tool's", body: `{"connector_fqn":"github://acme/conn-gh","tool":"gh","operation":"issues.nope"}`,
			status: http.StatusNotFound, code: CodeOperationNotFound, wantInMsg: []string{"issues.list", "issues.create"}, extraKey: "available_operations", audited: true},
		{name: "unknown tool lists the connector's", body: `{"connector_fqn":"github://acme/conn-gh","tool":"gl","operation":"x"}`,
			status: http.StatusNotFound, code: CodeOperationNotFound, wantInMsg: []string{"gh"}, extraKey: "available_tools", audited: true},
		{name: "connector outside the session", body: `{"connector_fqn":"github://acme/conn-other","tool":"other","operation":"ping"}`,
			status: http.StatusNotFound, code: CodeOperationNotFound, wantInMsg: []string{"github://acme/conn-gh"}, extraKey: "available_connectors", audited: true},
		{name: "malformed json", body: `{"connector_fqn":`, status: http.StatusBadRequest, code: CodeInvalidBody},
		{name: "empty body", body: ``, status: http.StatusBadRequest, code: CodeInvalidBody},
		{name: "missing fields", body: `{"connector_fqn":"github://acme/conn-gh"}`, status: http.StatusBadRequest, code: CodeInvalidBody,
			wantInMsg: []string{"tool", "operation"}, extraKey: "missing"},
		{name: "unknown top-level field", body: `{"connector_fqn":"github://acme/conn-gh","tool":"gh","operation":"issues.list","argz":{}}`,
			status: http.StatusBadRequest, code: CodeInvalidBody, wantInMsg: []string{"argz"}},
		{name: "args not an object", body: `{"connector_fqn":"github://acme/conn-gh","tool":"gh","operation":"issues.list","args":[1]}`,
			status: http.StatusBadRequest, code: CodeInvalidBody, wantInMsg: []string{"args"}},
		{name: "trailing data", body: `{"connector_fqn":"github://acme/conn-gh","tool":"gh","operation":"issues.list"} {}`,
			status: http.StatusBadRequest, code: CodeInvalidBody},
		{name: "not proxyable", body: `{"connector_fqn":"github://acme/conn-gh","tool":"gh","operation":"local.only"}`,
			status: http.StatusNotImplemented, code: CodeOperationNotProxyable, audited: true},
		{name: "every arg problem listed", body: `{"connector_fqn":"github://acme/conn-gh","tool":"gh","operation":"issues.list",
			"args":{"owner":"acme","per_page":1.5,"labels":[{"a":1}],"state":7,"colour":"red"}}`,
			status: http.StatusBadRequest, code: CodeInvalidArgs, extraKey: "problems", audited: true,
			wantInMsg: []string{"repo: required", "per_page: must be an integer, got 1.5", "labels: element 0 must be a string, number or boolean", "state: must be a string", "colour: unknown argument"}},
		{name: "object in a query", body: `{"connector_fqn":"github://acme/conn-gh","tool":"gh","operation":"search","args":{"filter":{"a":1}}}`,
			status: http.StatusBadRequest, code: CodeInvalidArgs, wantInMsg: []string{"object cannot be sent as a query parameter"}, audited: true},
		{name: "path parameter with a slash", body: `{"connector_fqn":"github://acme/conn-gh","tool":"gh","operation":"issues.list","args":{"owner":"acme","repo":"../../admin"}}`,
			status: http.StatusBadRequest, code: CodeInvalidArgs, wantInMsg: []string{"single path segment"}, audited: true},
		{name: "path parameter dot-dot", body: `{"connector_fqn":"github://acme/conn-gh","tool":"gh","operation":"issues.list","args":{"owner":"acme","repo":".."}}`,
			status: http.StatusBadRequest, code: CodeInvalidArgs, wantInMsg: []string{`must not be ".."`}, audited: true},
		{name: "empty path parameter", body: `{"connector_fqn":"github://acme/conn-gh","tool":"gh","operation":"issues.list","args":{"owner":"","repo":"x"}}`,
			status: http.StatusBadRequest, code: CodeInvalidArgs, wantInMsg: []string{"must not be empty"}, audited: true},
		{name: "null arg", body: `{"connector_fqn":"github://acme/conn-gh","tool":"gh","operation":"issues.list","args":{"owner":"a","repo":"b","state":null}}`,
			status: http.StatusBadRequest, code: CodeInvalidArgs, wantInMsg: []string{"not null"}, audited: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := len(h.audit.byName(audit.EventDenied))
			r := h.run(cs.APIToken, tc.body)
			if r.status != tc.status || r.errCode(t) != tc.code {
				t.Fatalf("= %d %s, want %d %s", r.status, r.body, tc.status, tc.code)
			}
			e := r.json(t)["error"].(map[string]any)
			msg := e["message"].(string)
			for _, w := range tc.wantInMsg {
				if !strings.Contains(msg, w) {
					t.Errorf("message %q lacks %q", msg, w)
				}
			}
			if tc.extraKey != "" {
				if _, ok := e[tc.extraKey]; !ok {
					t.Errorf("error lacks %q: %s", tc.extraKey, r.body)
				}
			}
			denied := h.audit.byName(audit.EventDenied)
			if tc.audited {
				if len(denied) != before+1 {
					t.Fatalf("%d new denied events, want 1", len(denied)-before)
				}
				ev := denied[len(denied)-1]
				if ev.Source != SourceRunEndpoint || ev.Reason != tc.code.String() || ev.SessionID != cs.ID || ev.Status != tc.status {
					t.Errorf("denied event = %+v", ev)
				}
			}
			if n := h.up.count.Load(); n != 0 {
				t.Fatalf("the upstream received %d requests, want 0", n)
			}
		})
	}
	// The problems list names each bad argument once.
	r := h.run(cs.APIToken, `{"connector_fqn":"github://acme/conn-gh","tool":"gh","operation":"issues.create","args":{"owner":1,"repo":"r","title":"t","count":"3","draft":"yes","meta":[1]}}`)
	var eb struct {
		Error struct {
			Problems []ArgProblem `json:"problems"`
		} `json:"error"`
	}
	if err := json.Unmarshal(r.body, &eb); err != nil {
		t.Fatal(err)
	}
	var args []string
	for _, p := range eb.Error.Problems {
		args = append(args, p.Arg)
	}
	if want := []string{"count", "draft", "meta", "owner"}; !slices.Equal(args, want) {
		t.Errorf("problems for %v, want %v (%s)", args, want, r.body)
	}
	h.assertNoSecrets(cs.APIToken, proxySecret(t, cs))
}

func TestSandboxProxyRefusals(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	cs := h.createSession(fqnGH)
	base := SandboxProxyRequest{ConnectorFQN: fqnGH, Tool: "gh", Operation: "issues.list", Method: "GET",
		URL: "https://" + hostGH + "/repos/acme/x/issues"}
	tests := []struct {
		name   string
		mut    func(*SandboxProxyRequest)
		status int
		code   contract.Code
	}{
		{"plain http", func(r *SandboxProxyRequest) { r.URL = "http://" + hostGH + "/repos/acme/x/issues" }, http.StatusNotFound, CodeSandboxOperationNotFound},
		{"other host", func(r *SandboxProxyRequest) { r.URL = "https://evil.example/repos/acme/x/issues" }, http.StatusNotFound, CodeSandboxOperationNotFound},
		{"other port", func(r *SandboxProxyRequest) { r.URL = "https://" + hostGH + ":8443/repos/acme/x/issues" }, http.StatusNotFound, CodeSandboxOperationNotFound},
		{"wrong method", func(r *SandboxProxyRequest) { r.Method = "POST" }, http.StatusNotFound, CodeSandboxOperationNotFound},
		{"path not the template", func(r *SandboxProxyRequest) { r.URL = "https://" + hostGH + "/repos/acme/issues" }, http.StatusNotFound, CodeSandboxOperationNotFound},
		{"path of another operation", func(r *SandboxProxyRequest) { r.URL = "https://" + hostGH + "/flaky/get" }, http.StatusNotFound, CodeSandboxOperationNotFound},
		{"encoded slash", func(r *SandboxProxyRequest) { r.URL = "https://" + hostGH + "/repos/acme/x%2Fy/issues" }, http.StatusNotFound, CodeSandboxOperationNotFound},
		{"userinfo", func(r *SandboxProxyRequest) { r.URL = "https://u:p@" + hostGH + "/repos/acme/x/issues" }, http.StatusNotFound, CodeSandboxOperationNotFound},
		{"unknown operation", func(r *SandboxProxyRequest) { r.Operation = "nope" }, http.StatusNotFound, CodeSandboxOperationNotFound},
		{"missing url", func(r *SandboxProxyRequest) { r.URL = "" }, http.StatusBadRequest, CodeInvalidBody},
		{"bad header", func(r *SandboxProxyRequest) { r.Headers = map[string]string{"Bad Name": "x"} }, http.StatusBadRequest, CodeInvalidBody},
		{"bad base64", func(r *SandboxProxyRequest) { r.BodyBase64 = "!!" }, http.StatusBadRequest, CodeInvalidBody},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req := base
			tc.mut(&req)
			r := h.do(http.MethodPost, "/v1/sandbox-proxy/requests", cs.APIToken, req)
			if r.status != tc.status || r.errCode(t) != tc.code {
				t.Fatalf("= %d %s, want %d %s", r.status, r.body, tc.status, tc.code)
			}
			if n := h.up.count.Load(); n != 0 {
				t.Fatalf("the upstream received %d requests, want 0", n)
			}
		})
	}
}

// TestNotFound phrases the API's 404 from each kind of policy.LookupError,
// listing the error's allowed names under the kind's key.
func TestNotFound(t *testing.T) {
	tests := []struct {
		name     string
		le       policy.LookupError
		msg, key string
	}{
		{"operation", policy.LookupError{Kind: policy.LookupOperation, FQN: "f://o/r", Tool: "t", Operation: "x", Installed: true, Allowed: []string{"a", "b"}},
			`tool "t" of connector "f://o/r" has no operation "x"; it offers: a, b`, "available_operations"},
		{"tool", policy.LookupError{Kind: policy.LookupTool, FQN: "f://o/r", Tool: "t", Operation: "x", Installed: true, Allowed: []string{}},
			`connector "f://o/r" has no tool "t"; its tools: none`, "available_tools"},
		{"connector outside the session", policy.LookupError{Kind: policy.LookupConnector, FQN: "f://o/r", Installed: true, Allowed: []string{"f://o/s"}},
			`connector "f://o/r" is not one of this session's connectors; this session's connectors: f://o/s`, "available_connectors"},
		{"connector not installed", policy.LookupError{Kind: policy.LookupConnector, FQN: "f://o/r", Allowed: []string{}},
			`connector "f://o/r" is not installed; this session's connectors: none`, "available_connectors"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			msg, key, list := notFound(&tc.le)
			if msg != tc.msg || key != tc.key || !slices.Equal(list, tc.le.Allowed) {
				t.Errorf("notFound(%+v) = %q, %q, %q; want %q, %q, %q", tc.le, msg, key, list, tc.msg, tc.key, tc.le.Allowed)
			}
		})
	}
}

func TestBuildCall(t *testing.T) {
	snap := specs.Compile(t, specGH)
	op := func(name string) *policy.CompiledOperation {
		m, err := snap.Lookup(policy.NewScope([]string{fqnGH}), fqnGH, "gh", name)
		if err != nil {
			t.Fatal(err)
		}
		return m.Compiled
	}
	tests := []struct {
		name     string
		op       string
		args     string
		wantURL  string
		wantBody string
	}{
		{"query with large integer and array", "issues.list",
			`{"owner":"acme","repo":"widgets","per_page":12345678901234567890,"labels":["bug","help wanted"],"state":"open"}`,
			"https://api.test.example/repos/acme/widgets/issues?labels=bug&labels=help+wanted&per_page=12345678901234567890&state=open", ""},
		{"integer in exponent form printed exactly", "issues.list",
			`{"owner":"acme","repo":"w","per_page":1e6,"since_id":2.0E2}`,
			"https://api.test.example/repos/acme/w/issues?per_page=1000000&since_id=200", ""},
		{"path parameters escaped", "issues.list",
			`{"owner":"a b","repo":"r?x#y%z"}`,
			"https://api.test.example/repos/a%20b/r%3Fx%23y%25z/issues", ""},
		{"number array element exact", "issues.list",
			`{"owner":"o","repo":"r","labels":[1e3, true, "x"]}`,
			"https://api.test.example/repos/o/r/issues?labels=1000&labels=true&labels=x", ""},
		{"json body with exact numbers", "issues.create",
			`{"owner":"acme","repo":"w","title":"Hi <b>","count":98765432109876543210,"ratio":0.5,"draft":false,"labels":["a"],"meta":{"k":[1,{"z":null}]}}`,
			"https://api.test.example/repos/acme/w/issues",
			`{"count":98765432109876543210,"draft":false,"labels":["a"],"meta":{"k":[1,{"z":null}]},"ratio":0.5,"title":"Hi \u003cb\u003e"}`},
		{"empty json body", "flaky.post", `{}`, "https://api.test.example/flaky/post", `{}`},
		{"integer path parameter", "issues.delete", `{"owner":"o","repo":"r","number":42}`, "https://api.test.example/repos/o/r/issues/42", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			args := decodeArgs(t, tc.args)
			c, problems := buildCall(op(tc.op), args)
			if len(problems) > 0 {
				t.Fatalf("buildCall problems: %+v", problems)
			}
			if c.url != tc.wantURL {
				t.Errorf("url = %s\n want %s", c.url, tc.wantURL)
			}
			if string(c.body) != tc.wantBody {
				t.Errorf("body = %s\n want %s", c.body, tc.wantBody)
			}
			if (tc.wantBody != "") != (c.contentType == "application/json") {
				t.Errorf("content type %q for body %q", c.contentType, c.body)
			}
		})
	}
}

func decodeArgs(t *testing.T, s string) map[string]any {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	var args map[string]any
	if err := dec.Decode(&args); err != nil {
		t.Fatal(err)
	}
	return args
}

func TestExactInteger(t *testing.T) {
	tests := []struct {
		in   string
		want string
		ok   bool
	}{
		{"0", "0", true},
		{"-0", "0", true},
		{"42", "42", true},
		{"-7", "-7", true},
		{"12345678901234567890123", "12345678901234567890123", true},
		{"1e6", "1000000", true},
		{"1E+2", "100", true},
		{"2.50e1", "25", true},
		{"1.0", "1", true},
		{"1.5", "", false},
		{"1e-1", "", false},
		{"1e999999999", "", false},
	}
	for _, tc := range tests {
		got, ok := exactInteger(json.Number(tc.in))
		if got != tc.want || ok != tc.ok {
			t.Errorf("exactInteger(%q) = %q, %v; want %q, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

func TestAuditArgsHeader(t *testing.T) {
	snap := specs.Compile(t, specGH)
	m, err := snap.Lookup(policy.NewScope([]string{fqnGH}), fqnGH, "gh", "issues.list")
	if err != nil {
		t.Fatal(err)
	}
	c, problems := buildCall(m.Compiled, decodeArgs(t, `{"owner":"o","repo":"r","q":"secret words","state":"open","per_page":5}`))
	if len(problems) > 0 {
		t.Fatal(problems)
	}
	raw, err := base64.RawURLEncoding.DecodeString(c.auditArgs)
	if err != nil {
		t.Fatalf("audit args header %q: %v", c.auditArgs, err)
	}
	// Only args named by args.* audit fields, keyed by input name; the
	// proxy redacts.
	if got, want := string(raw), `{"q":"secret words","state":"open"}`; got != want {
		t.Errorf("audit args = %s, want %s", got, want)
	}
}

// TestErrorGolden pins the JSON of representative error responses.
func TestErrorGolden(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	cs := h.createSession(fqnGH)
	cases := []struct{ name, body string }{
		{"invalid_args", `{"connector_fqn":"github://acme/conn-gh","tool":"gh","operation":"issues.list","args":{"per_page":"ten","extra":1}}`},
		{"not_found", `{"connector_fqn":"github://acme/conn-gh","tool":"gh","operation":"issues.get"}`},
		{"missing_fields", `{}`},
	}
	var out strings.Builder
	for _, c := range cases {
		r := h.run(cs.APIToken, c.body)
		var v any
		if err := json.Unmarshal(r.body, &v); err != nil {
			t.Fatal(err)
		}
		pretty, _ := json.MarshalIndent(v, "", "  ")
		out.WriteString("# " + c.name + " " + http.StatusText(r.status) + "\n" + string(pretty) + "\n")
	}
	testkit.Golden(t, filepath.Join("testdata", "run_errors.golden"), []byte(out.String()))
}
