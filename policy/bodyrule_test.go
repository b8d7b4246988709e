package policy

import (
	"errors"
	"strings"
	"testing"
)

// gqlOp is a POST /graphql operation with the given graphql object.
func gqlOp(name, rule string) string {
	return `{"name": "` + name + `", "method": "POST", "path": "/graphql", "hosts": ["api.example.com"], "credential": "bearer", "graphql": ` + rule + `}`
}

func mcpOp(name, rule string) string {
	return `{"name": "` + name + `", "method": "POST", "path": "/mcp", "hosts": ["mcp.example.com"], "mcp": ` + rule + `}`
}

// TestBodyRuleValidation has one failing case per graphql and mcp rule,
// each with its location.
func TestBodyRuleValidation(t *testing.T) {
	const at = "tools[0].operations[0]"
	tests := []struct {
		name, doc, path, msg string
	}{
		{"graphql not object", specDoc(gqlOp("q", `"query"`)), at + ".graphql", "must be an object, got string"},
		{"graphql type missing", specDoc(gqlOp("q", `{"fields": ["viewer"]}`)), at + ".graphql.type", `required; use "query", "mutation" or "subscription"`},
		{"graphql type wrong", specDoc(gqlOp("q", `{"type": "Query", "fields": ["viewer"]}`)), at + ".graphql.type", `"Query" is not a GraphQL operation type`},
		{"graphql fields missing", specDoc(gqlOp("q", `{"type": "query"}`)), at + ".graphql.fields", "at least one top-level field is required"},
		{"graphql fields empty", specDoc(gqlOp("q", `{"type": "query", "fields": []}`)), at + ".graphql.fields", "at least one top-level field is required"},
		{"graphql field star", specDoc(gqlOp("q", `{"type": "query", "fields": ["*"]}`)), at + ".graphql.fields[0]", `"*" would allow every field`},
		{"graphql field name", specDoc(gqlOp("q", `{"type": "query", "fields": ["viewer", "1st"]}`)), at + ".graphql.fields[1]", `"1st" is not a GraphQL field name`},
		{"graphql field type", specDoc(gqlOp("q", `{"type": "query", "fields": [3]}`)), at + ".graphql.fields[0]", "must be a field name string"},
		{"graphql field duplicate", specDoc(gqlOp("q", `{"type": "query", "fields": ["viewer", "viewer"]}`)), at + ".graphql.fields[1]", `duplicate field "viewer"`},
		{"graphql hash", specDoc(gqlOp("q", `{"type": "query", "fields": ["viewer"], "persisted_hashes": ["ABC"]}`)), at + ".graphql.persisted_hashes[0]", "64 lower-case hex digits"},
		{"graphql method", specDoc(strings.Replace(gqlOp("q", `{"type": "query", "fields": ["viewer"]}`), `"POST"`, `"PUT"`, 1)), at + ".graphql", `the method is "PUT"`},
		{"graphql and mcp", specDoc(strings.Replace(gqlOp("q", `{"type": "query", "fields": ["viewer"]}`), `"graphql"`, `"mcp": {"tools": ["a"]}, "graphql"`, 1)), at + ".mcp", `either a GraphQL or an MCP endpoint`},
		{"mcp not object", specDoc(mcpOp("m", `[]`)), at + ".mcp", "must be an object, got array"},
		{"mcp tool star", specDoc(mcpOp("m", `{"tools": ["*"]}`)), at + ".mcp.tools[0]", `"*" would not name a tool`},
		{"mcp tool inner star", specDoc(mcpOp("m", `{"tools": ["a*b"]}`)), at + ".mcp.tools[0]", `one "*", at its end only`},
		{"mcp tool chars", specDoc(mcpOp("m", `{"tools": ["get issue"]}`)), at + ".mcp.tools[0]", `may only contain letters`},
		{"mcp tool type", specDoc(mcpOp("m", `{"tools": [1]}`)), at + ".mcp.tools[0]", `must be a tool name string`},
		{"mcp tool twice", specDoc(mcpOp("m", `{"tools": ["a"], "approval_tools": ["a"]}`)), at + ".mcp.approval_tools[0]", `tool "a" is listed twice`},
		{"mcp resources type", specDoc(mcpOp("m", `{"tools": ["a"], "resources": "no"}`)), at + ".mcp.resources", `must be true or false`},
		{"mcp method", specDoc(strings.Replace(mcpOp("m", `{"tools": ["a"]}`), `"POST"`, `"GET"`, 1)), at + ".mcp", `the method is "GET"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := ParseSpec([]byte(tc.doc))
			var ve *ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("ParseSpec() error = %v, want a *ValidationError", err)
			}
			if len(ve.Problems) != 1 {
				t.Fatalf("ParseSpec() problems = %d, want 1:\n%s", len(ve.Problems), ve.Error())
			}
			if p := ve.Problems[0]; p.Path != tc.path || !strings.Contains(p.Message, tc.msg) {
				t.Errorf("ParseSpec() problem = %s: %s, want %s: ...%s...", p.Path, p.Message, tc.path, tc.msg)
			}
		})
	}
}

func TestBodyRuleParsed(t *testing.T) {
	doc := specDoc(gqlOp("q", `{"type": "query", "fields": ["viewer", "__schema"], "persisted_hashes": ["`+strings.Repeat("ab", 32)+`"]}`) + "," +
		mcpOp("m", `{"tools": ["get_issue", "search_*"], "approval_tools": ["create_issue"], "prompts": false}`))
	spec, _, err := ParseSpec([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	g := spec.Tools[0].Operations[0].GraphQL
	if g == nil || g.Type != GraphQLQuery || strings.Join(g.Fields, ",") != "viewer,__schema" || len(g.PersistedHashes) != 1 {
		t.Fatalf("graphql = %+v", g)
	}
	snap, err := Compile([]Connector{{Spec: spec}})
	if err != nil {
		t.Fatal(err)
	}
	co, err := snap.Lookup(NewScope([]string{"github://acme/example"}), "github://acme/example", "ex", "m")
	if err != nil {
		t.Fatal(err)
	}
	p := co.Compiled.MCP()
	if co.Compiled.Body() != BodyMCP || p == nil || !p.AllowsResources() || p.AllowsPrompts() {
		t.Fatalf("mcp plan = %+v, body %v", p, co.Compiled.Body())
	}
	for _, tc := range []struct {
		tool              string
		allowed, approval bool
	}{{"get_issue", true, false}, {"search_code", true, false}, {"search", false, false}, {"create_issue", true, true}, {"delete_repo", false, false}, {"get_issue2", false, false}} {
		if a, ap := p.Tool(tc.tool); a != tc.allowed || ap != tc.approval {
			t.Errorf("Tool(%q) = %v, %v; want %v, %v", tc.tool, a, ap, tc.allowed, tc.approval)
		}
	}
}

func gqlSnap(t *testing.T, ops ...string) *Snapshot {
	t.Helper()
	spec, _, err := ParseSpec([]byte(specDoc(strings.Join(ops, ","))))
	if err != nil {
		t.Fatal(err)
	}
	snap, err := Compile([]Connector{{Spec: spec}})
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

func TestDecideInspectsBody(t *testing.T) {
	snap := gqlSnap(t,
		gqlOp("viewer", `{"type": "query", "fields": ["viewer"]}`),
		gqlOp("issues", `{"type": "query", "fields": ["repository", "search"]}`),
		strings.Replace(gqlOp("create", `{"type": "mutation", "fields": ["createIssue"]}`), `"credential"`, `"approval": "required", "credential"`, 1),
		`{"name": "plain", "method": "GET", "path": "/plain", "hosts": ["api.example.com"]}`)
	sc := NewScope([]string{"github://acme/example"})
	d := snap.Decide(sc, Request{Method: "POST", Host: "api.example.com:443", Path: "/graphql"})
	if d.Allow || d.Reason != ReasonInspectBody || d.Inspect == nil || len(d.Inspect.Candidates()) != 3 || d.Inspect.Kind() != BodyGraphQL {
		t.Fatalf("Decide(POST /graphql) = %+v, want inspect_body with 3 candidates", d)
	}
	if d := snap.Decide(sc, Request{Method: "GET", Host: "api.example.com:443", Path: "/plain"}); !d.Allow || d.Inspect != nil {
		t.Fatalf("Decide(GET /plain) = %+v, want a plain allow", d)
	}
	in := d.Inspect
	tests := []struct {
		name, body string
		op         string // "" for a refusal
		rule       string
		approval   bool
	}{
		{"anonymous", `{"query": "{ viewer { login } }"}`, "viewer", "", false},
		{"typename", `{"query": "{ __typename viewer { login } }"}`, "viewer", "", false},
		{"alias", `{"query": "{ me: viewer { login } }"}`, "viewer", "", false},
		{"alias hides forbidden", `{"query": "{ viewer: deleteRepository { id } }"}`, "", GraphQLRuleField, false},
		{"two fields one op", `{"query": "query Q($o: String!) { repository(owner: $o, name: \"x\") { id } search(query: \"x\") { n } }", "variables": {"o": "a"}}`, "issues", "", false},
		{"fields of two ops", `{"query": "{ viewer { login } repository { id } }"}`, "", GraphQLRuleField, false},
		{"fragment spread", `{"query": "query { ...F } fragment F on Query { viewer { login } }"}`, "viewer", "", false},
		{"fragment hides forbidden", `{"query": "query { ...F } fragment F on Query { viewer { login } secrets { x } }"}`, "", GraphQLRuleField, false},
		{"inline fragment hides forbidden", `{"query": "{ viewer { login } ... on Query { admin { x } } }"}`, "", GraphQLRuleField, false},
		{"nested fragment fine", `{"query": "{ viewer { ...U } } fragment U on User { login deleteRepository }"}`, "viewer", "", false},
		{"fragment cycle", `{"query": "{ ...A } fragment A on Query { ...B } fragment B on Query { ...A }"}`, "", GraphQLRuleParse, false},
		{"operationName", `{"query": "query A { viewer { login } } mutation B { createIssue { id } }", "operationName": "B"}`, "create", "", true},
		{"several ops no name", `{"query": "query A { viewer { login } } query B { viewer { id } }"}`, "", GraphQLRuleOperation, false},
		{"unknown operationName", `{"query": "query A { viewer { login } }", "operationName": "Z"}`, "", GraphQLRuleOperation, false},
		{"does not parse", `{"query": "{ viewer { login }"}`, "", GraphQLRuleParse, false},
		{"forbidden mutation", `{"query": "mutation { deleteRepository(input: {id: \"1\"}) { id } }"}`, "", GraphQLRuleField, false},
		{"subscription", `{"query": "subscription { viewer { login } }"}`, "", GraphQLRuleType, false},
		{"introspection", `{"query": "{ __schema { types { name } } }"}`, "", GraphQLRuleField, false},
		{"batch ok", `[{"query": "{ viewer { login } }"}, {"query": "mutation { createIssue { id } }"}]`, "viewer", "", true},
		{"batch one forbidden", `[{"query": "{ viewer { login } }"}, {"query": "mutation { deleteRepository { id } }"}]`, "", GraphQLRuleField, false},
		{"persisted hash only", `{"extensions": {"persistedQuery": {"version": 1, "sha256Hash": "` + strings.Repeat("ab", 32) + `"}}}`, "", GraphQLRulePersisted, false},
		{"persisted hash mismatch", `{"query": "{ viewer { login } }", "extensions": {"persistedQuery": {"version": 1, "sha256Hash": "` + strings.Repeat("ab", 32) + `"}}}`, "", GraphQLRulePersisted, false},
		{"duplicate key", `{"query": "{ viewer { login } }", "query": "mutation { deleteRepository { id } }"}`, "", GraphQLRuleEnvelope, false},
		{"case key", `{"query": "{ viewer { login } }", "Query": "mutation { deleteRepository { id } }"}`, "", GraphQLRuleEnvelope, false},
		{"trailing data", `{"query": "{ viewer { login } }"} {}`, "", GraphQLRuleEnvelope, false},
		{"no query", `{"variables": {}}`, "", GraphQLRuleEnvelope, false},
		{"empty batch", `[]`, "", GraphQLRuleBatch, false},
		{"other key", `{"query": "{ viewer { login } }", "documentId": "deleteEverything"}`, "", GraphQLRuleEnvelope, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			reqs, batch, err := ParseGraphQLBody([]byte(tc.body))
			var gd GraphQLDecision
			if err == nil {
				gd, err = in.DecideGraphQL(reqs, batch)
			} else {
				err = in.RefuseGraphQL(err)
			}
			if tc.op == "" {
				var ge *GraphQLError
				if !errors.As(err, &ge) || ge.Rule != tc.rule {
					t.Fatalf("DecideGraphQL(%s) = %+v, %v; want a %s refusal", tc.body, gd, err, tc.rule)
				}
				if !strings.Contains(ge.Message, "allowed on this path: mutation createIssue (ex create); query repository, search (ex issues); query viewer (ex viewer)") {
					t.Errorf("refusal %q does not list the allowed operations", ge.Message)
				}
				return
			}
			if err != nil {
				t.Fatalf("DecideGraphQL(%s) error = %v, want %s", tc.body, err, tc.op)
			}
			if got := gd.Match.Compiled.Operation().Name; got != tc.op || gd.Approval != tc.approval {
				t.Errorf("DecideGraphQL(%s) = %s approval %v, want %s approval %v", tc.body, got, gd.Approval, tc.op, tc.approval)
			}
		})
	}
}

func TestGraphQLFieldRefusalNamesField(t *testing.T) {
	snap := gqlSnap(t, gqlOp("viewer", `{"type": "query", "fields": ["viewer"]}`))
	d := snap.Decide(NewScope([]string{"github://acme/example"}), Request{Method: "POST", Host: "api.example.com", Path: "/graphql"})
	reqs, batch, _ := ParseGraphQLBody([]byte(`{"query": "{ viewer { login } nope: deleteRepository { id } }"}`))
	_, err := d.Inspect.DecideGraphQL(reqs, batch)
	if err == nil || !strings.Contains(err.Error(), `"deleteRepository"`) {
		t.Fatalf("DecideGraphQL() error = %v, want it to name deleteRepository", err)
	}
}

func TestGraphQLQueryString(t *testing.T) {
	r, err := ParseGraphQLQuery("query=%7Bviewer%7Blogin%7D%7D&operationName=")
	if err != nil || r.Query != "{viewer{login}}" {
		t.Fatalf("ParseGraphQLQuery() = %+v, %v", r, err)
	}
	if _, err := ParseGraphQLQuery("query=%7Bviewer%7D&query=%7Bx%7D"); err == nil {
		t.Fatal("ParseGraphQLQuery(repeated query) succeeded, want a refusal")
	}
	if _, err := ParseGraphQLQuery("query=%7Bviewer%7D&documentId=x"); err == nil {
		t.Fatal("ParseGraphQLQuery(documentId) succeeded, want a refusal")
	}
}

func TestDecideMixedIsAmbiguous(t *testing.T) {
	snap := gqlSnap(t, gqlOp("viewer", `{"type": "query", "fields": ["viewer"]}`),
		`{"name": "all", "method": "POST", "path": "/graphql", "hosts": ["api.example.com"]}`)
	d := snap.Decide(NewScope([]string{"github://acme/example"}), Request{Method: "POST", Host: "api.example.com", Path: "/graphql"})
	if d.Allow || d.Reason != ReasonAmbiguous || d.Inspect != nil {
		t.Fatalf("Decide() = %+v, want ambiguous", d)
	}
}
