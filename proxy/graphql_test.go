package proxy

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/parser"

	"github.com/aileron-dev/aileron-proxy/policy"
)

// graphQLSpec declares GraphQL operations on POST and GET /graphql of the
// test hosts, on the test connector (whose bearer credential is set).
const graphQLSpec = `{
  "schema_version": "aileron.connector.v1",
  "connector": {"fqn": "github://acme/aileron-connector-test", "version": "1.0.0"},
  "tools": [{"name": "gh", "operations": [
    {"name": "viewer", "method": "POST", "path": "/graphql", "hosts": ["api.example.test", "h2.example.test"], "credential": "bearer",
     "graphql": {"type": "query", "fields": ["viewer"]}},
    {"name": "issues", "method": "POST", "path": "/graphql", "hosts": ["api.example.test", "h2.example.test"], "credential": "bearer",
     "graphql": {"type": "query", "fields": ["repository", "search"]}},
    {"name": "issue.create", "method": "POST", "path": "/graphql", "hosts": ["api.example.test", "h2.example.test"], "credential": "bearer",
     "approval": "required", "graphql": {"type": "mutation", "fields": ["createIssue"]}},
    {"name": "viewer.get", "method": "GET", "path": "/graphql", "hosts": ["api.example.test", "h2.example.test"], "credential": "bearer",
     "graphql": {"type": "query", "fields": ["viewer"]}}
  ]}]
}`

// newGraphQLEnv is an env whose session holds graphQLSpec and whose
// upstreams serve /graphql with a stand-in that parses what it receives.
func newGraphQLEnv(t *testing.T) *env {
	t.Helper()
	spec, _, err := policy.ParseSpec([]byte(graphQLSpec))
	if err != nil {
		t.Fatalf("ParseSpec: %v", err)
	}
	snap, err := policy.Compile([]policy.Connector{{Spec: spec, Hash: "sha256:graphql"}})
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	e := newEnv(t, func(c *Config) { c.Policy = func() *policy.Snapshot { return snap } })
	e.useSession(t, snap)
	e.handlers.Store("/graphql", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// e.upstream has already digested the body (the tests compare it
		// with what they sent and parse that); the stand-in checks the
		// credential and answers in GraphQL's shape.
		if r.Header.Get("Authorization") != "Bearer "+testToken {
			http.Error(w, `{"errors":[{"message":"bad credentials"}]}`, http.StatusUnauthorized)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"data":{"viewer":{"login":"octocat"}}}`)
	}))
	return e
}

// gqlPost sends a GraphQL POST through the proxy.
func gqlPost(t *testing.T, e *env, h2 bool, host, body string) (*http.Response, error) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, "https://"+host+"/graphql", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", clientAuth)
	return e.client(h2).Do(req)
}

// parsesAsGraphQL is the stand-in's check of a received body.
func parsesAsGraphQL(t *testing.T, body string) {
	t.Helper()
	var env struct {
		Query string `json:"query"`
	}
	if err := json.Unmarshal([]byte(body), &env); err != nil {
		t.Fatalf("body %q is not a GraphQL envelope: %v", body, err)
	}
	if _, err := parser.ParseQuery(&ast.Source{Input: env.Query}); err != nil {
		t.Fatalf("query %q does not parse: %v", env.Query, err)
	}
}

func TestGraphQLAllowedForwardedByteForByte(t *testing.T) {
	cases := []struct{ name, body, op string }{
		{"anonymous", `{"query":"{viewer{login}}"}`, "viewer"},
		{"alias", `{"query": "{ me: viewer { login } }"}`, "viewer"},
		{"top-level fragment", `{"query": "query V { ...F } fragment F on Query { viewer { login } }", "operationName": "V"}`, "viewer"},
		{"nested fragment", `{"query": "{ viewer { ...U } } fragment U on User { login name }"}`, "viewer"},
		{"variables", `{"query": "query Q($o: String!, $n: String!) { repository(owner: $o, name: $n) { id } }", "variables": {"o": "octo-CANARY-VAR", "n": "hello"}}`, "issues"},
		{"operationName picks", `{"query": "query A { viewer { login } } query B { search(query: \"x\", type: ISSUE, first: 1) { issueCount } }", "operationName": "B"}`, "issues"},
		{"typename", `{"query": "{ __typename viewer { login } }"}`, "viewer"},
		{"batch", `[{"query": "{ viewer { login } }"}, {"query": "{ repository(owner: \"a\", name: \"b\") { id } }"}]`, "viewer"},
	}
	for _, pc := range protoCases {
		t.Run(pc.name, func(t *testing.T) {
			e := newGraphQLEnv(t)
			for _, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					resp, err := gqlPost(t, e, pc.h2, pc.host, tc.body)
					if err != nil {
						t.Fatal(err)
					}
					got := readAll(t, resp)
					if resp.StatusCode != http.StatusOK || !strings.Contains(string(got), "octocat") {
						t.Fatalf("status = %d, body %s; want 200 from the upstream", resp.StatusCode, got)
					}
					seen := e.expectSeen(t)
					sum := sha256.Sum256([]byte(tc.body))
					if seen.SHA256 != hex.EncodeToString(sum[:]) || seen.Body != int64(len(tc.body)) {
						t.Errorf("upstream received %d bytes (%s), want the %d bytes sent (%x)", seen.Body, seen.SHA256, len(tc.body), sum)
					}
					if !strings.HasPrefix(tc.body, "[") {
						parsesAsGraphQL(t, tc.body)
					}
					ev := e.audit.Next(t)
					if ev.Operation != tc.op || ev.Fields["graphql.type"] == "" || ev.Fields["graphql.fields"] == "" {
						t.Errorf("audit = %s %v, want operation %s with graphql fields", ev.Operation, ev.Fields, tc.op)
					}
					if b, _ := json.Marshal(ev); bytes.Contains(b, []byte("CANARY-VAR")) || bytes.Contains(b, []byte("hello")) {
						t.Errorf("audit event %s records a variable's value", b)
					}
				})
			}
		})
	}
}

func TestGraphQLAuditRecordsOperation(t *testing.T) {
	e := newGraphQLEnv(t)
	resp, err := gqlPost(t, e, false, apiHost, `{"query": "query Repo { r: repository(owner: \"secret-owner\", name: \"x\") { id } search(query: \"q\") { n } }"}`)
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, resp)
	e.expectSeen(t)
	ev := e.audit.Next(t)
	want := map[string]string{"graphql.type": "query", "graphql.operation": "Repo", "graphql.fields": "repository,search"}
	for k, v := range want {
		if ev.Fields[k] != v {
			t.Errorf("audit field %s = %q, want %q (all: %v)", k, ev.Fields[k], v, ev.Fields)
		}
	}
	if b, _ := json.Marshal(ev); bytes.Contains(b, []byte("secret-owner")) {
		t.Errorf("audit event %s records a literal argument", b)
	}
}

func TestGraphQLRefusals(t *testing.T) {
	hash := strings.Repeat("ab", 32)
	cases := []struct{ name, body, want string }{
		{"does not parse", `{"query": "{ viewer { login }"}`, "does not parse"},
		{"several operations without operationName", `{"query": "query A { viewer { login } } query B { viewer { id } }"}`, "no operationName"},
		{"field outside every declaration", `{"query": "mutation { deleteRepository(input: {repositoryId: \"R_1\"}) { clientMutationId } }"}`, `"deleteRepository"`},
		{"alias hides a forbidden field", `{"query": "mutation { createIssue: deleteRepository(input: {repositoryId: \"R_1\"}) { clientMutationId } }"}`, `"deleteRepository"`},
		{"fragment hides a forbidden field", `{"query": "query { ...F } fragment F on Query { viewer { login } organization(login: \"x\") { id } }"}`, `"organization"`},
		{"batch with one forbidden element", `[{"query": "{ viewer { login } }"}, {"query": "mutation { deleteRepository(input: {}) { clientMutationId } }"}]`, "batch element 1"},
		{"persisted query by hash only", `{"extensions": {"persistedQuery": {"version": 1, "sha256Hash": "` + hash + `"}}}`, "persisted query"},
		{"subscription on a query path", `{"query": "subscription { viewer { login } }"}`, "allows no subscription"},
		{"introspection not declared", `{"query": "{ __schema { types { name } } }"}`, `"__schema"`},
		{"repeated query key", `{"query": "{ viewer { login } }", "query": "mutation { deleteRepository(input: {}) { clientMutationId } }"}`, `repeats the key "query"`},
	}
	e := newGraphQLEnv(t)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := gqlPost(t, e, false, apiHost, tc.body)
			d := wantRefusal(t, resp, err, http.StatusForbidden, "graphql_not_allowed")
			if !strings.Contains(d.Message, tc.want) {
				t.Errorf("message %q does not say %q", d.Message, tc.want)
			}
			if len(d.AllowedOperations) != 3 || !strings.Contains(d.Message, "query viewer (gh viewer)") {
				t.Errorf("refusal lists %v (message %q), want the 3 operations of POST /graphql", d.AllowedOperations, d.Message)
			}
			e.expectNothingSeen(t)
			if ev := e.audit.Next(t); ev.Decision != "denied" || ev.Reason != "graphql_not_allowed" {
				t.Errorf("audit = %s %s, want denied graphql_not_allowed", ev.Decision, ev.Reason)
			}
		})
	}
}

func TestGraphQLBodyBounds(t *testing.T) {
	e := newGraphQLEnv(t)
	big := `{"query": "{ viewer { login } }", "variables": {"x": "` + strings.Repeat("a", MaxInspectedBody) + `"}}`
	resp, err := gqlPost(t, e, false, apiHost, big)
	d := wantRefusal(t, resp, err, http.StatusRequestEntityTooLarge, "body_too_large")
	if !strings.Contains(d.Message, "4 MiB") {
		t.Errorf("413 message %q does not give the bound", d.Message)
	}
	e.expectNothingSeen(t)

	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write([]byte(`{"query": "mutation { deleteRepository(input: {}) { clientMutationId } }"}`))
	_ = zw.Close()
	req, _ := http.NewRequest(http.MethodPost, "https://"+apiHost+"/graphql", &gz)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Content-Encoding", "gzip")
	resp, err = e.client(false).Do(req)
	wantRefusal(t, resp, err, http.StatusUnsupportedMediaType, "body_not_inspectable")

	req, _ = http.NewRequest(http.MethodPost, "https://"+apiHost+"/graphql?query="+url.QueryEscape("mutation{deleteRepository(input:{}){clientMutationId}}"),
		strings.NewReader(`{"query": "{ viewer { login } }"}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err = e.client(false).Do(req)
	d = wantRefusal(t, resp, err, http.StatusForbidden, "graphql_not_allowed")
	if !strings.Contains(d.Message, "in its URL") {
		t.Errorf("message %q does not say the URL carries a query", d.Message)
	}
	e.expectNothingSeen(t)
}

func TestGraphQLGet(t *testing.T) {
	e := newGraphQLEnv(t)
	resp, err := e.client(true).Get("https://" + h2Host + "/graphql?query=" + url.QueryEscape("{ viewer { login } }"))
	if err != nil {
		t.Fatal(err)
	}
	if b := readAll(t, resp); resp.StatusCode != http.StatusOK {
		t.Fatalf("GET ?query= status = %d: %s", resp.StatusCode, b)
	}
	e.expectSeen(t)
	resp, err = e.client(true).Get("https://" + h2Host + "/graphql?query=" + url.QueryEscape("{ repository(owner: \"a\", name: \"b\") { id } }"))
	wantRefusal(t, resp, err, http.StatusForbidden, "graphql_not_allowed")
	e.expectNothingSeen(t)
}

func TestGraphQLMutationHeldThenForwarded(t *testing.T) {
	for _, pc := range protoCases {
		t.Run(pc.name, func(t *testing.T) {
			e := newGraphQLEnv(t)
			body := `{"query": "mutation Create($t: String!) { createIssue(input: {repositoryId: \"R_1\", title: $t}) { issue { number } } }", "variables": {"t": "Bug"}}`
			req, _ := http.NewRequest(http.MethodPost, "https://"+pc.host+"/graphql", strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			r, done := e.held(t, pc.h2, req)
			if r.Operation != "issue.create" || r.Tool != "gh" {
				t.Errorf("held %s %s, want gh issue.create", r.Tool, r.Operation)
			}
			e.expectNothingSeen(t)
			e.approver.outcomes <- ApprovalApproved
			if resp := <-done; resp == nil || resp.StatusCode != http.StatusOK {
				t.Fatalf("approved mutation answered %v", resp)
			}
			seen := e.expectSeen(t)
			sum := sha256.Sum256([]byte(body))
			if seen.SHA256 != hex.EncodeToString(sum[:]) {
				t.Errorf("upstream received another body than the one approved")
			}
			e.expectNothingSeen(t)
			if ev := e.audit.Next(t); ev.Reason != reasonApproved || ev.Fields["graphql.operation"] != "Create" {
				t.Errorf("audit = %s %v, want approved with operation Create", ev.Reason, ev.Fields)
			}
		})
	}
}
