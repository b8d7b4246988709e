package graphqlimport_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aileron-dev/aileron-proxy/graphqlimport"
	"github.com/aileron-dev/aileron-proxy/internal/testkit"
	"github.com/aileron-dev/aileron-proxy/policy"
)

func read(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestImportSmallGolden(t *testing.T) {
	res, err := graphqlimport.Import(read(t, "small.graphql"), graphqlimport.Options{
		FQN: "local://example/aileron-connector-demo", Host: "api.example.com", Credential: policy.CredentialBearer})
	if err != nil {
		t.Fatal(err)
	}
	testkit.Golden(t, filepath.Join("testdata", "small.golden.json"), res.JSON)
	if res.Queries != 4 || res.Mutations != 2 || res.Subscriptions != 1 {
		t.Errorf("counts = %d queries, %d mutations, %d subscriptions; want 4, 2, 1", res.Queries, res.Mutations, res.Subscriptions)
	}
}

// snapshotOf compiles the imported spec and returns the inspection of POST
// path on host.
func inspectionOf(t *testing.T, spec *policy.Spec, host, path string) *policy.Inspection {
	t.Helper()
	snap, err := policy.Compile([]policy.Connector{{Spec: spec}})
	if err != nil {
		t.Fatal(err)
	}
	d := snap.Decide(policy.NewScope([]string{spec.Connector.FQN}), policy.Request{Method: "POST", Host: host, Path: path})
	if d.Inspect == nil {
		t.Fatalf("Decide(POST %s) = %+v, want a GraphQL inspection", path, d)
	}
	return d.Inspect
}

func decide(t *testing.T, in *policy.Inspection, body string) (policy.GraphQLDecision, error) {
	t.Helper()
	reqs, batch, err := policy.ParseGraphQLBody([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	return in.DecideGraphQL(reqs, batch)
}

// TestImportPublicSchemas drafts specs from GitHub's and Linear's
// published schemas (testdata/README.md) and checks them against requests
// their clients send.
func TestImportPublicSchemas(t *testing.T) {
	tests := []struct {
		file, host, fqn      string
		minQ, minM           int
		query, queryOp       string
		mutation, mutationOp string
	}{
		{"github.schema.graphql", "api.github.com", "github://acme/aileron-connector-github-graphql", 30, 200,
			`{"query": "query { viewer { login } }"}`, "query.viewer",
			`{"query": "mutation($id: ID!) { deleteIssue(input: {issueId: $id}) { clientMutationId } }"}`, "mutation.deleteIssue"},
		{"linear.schema.graphql", "api.linear.app", "github://acme/aileron-connector-linear", 100, 200,
			`{"query": "query { issues(first: 5) { nodes { id title } } }"}`, "query.issues",
			`{"query": "mutation { issueCreate(input: {title: \"x\", teamId: \"t\"}) { success } }"}`, "mutation.issueCreate"},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			res, err := graphqlimport.Import(read(t, tc.file), graphqlimport.Options{FQN: tc.fqn, Host: tc.host, Credential: policy.CredentialBearer})
			if err != nil {
				t.Fatal(err)
			}
			if res.Queries < tc.minQ || res.Mutations < tc.minM {
				t.Fatalf("drafted %d queries and %d mutations; want at least %d and %d", res.Queries, res.Mutations, tc.minQ, tc.minM)
			}
			for _, op := range res.Spec.Tools[0].Operations {
				if (op.GraphQL.Type == policy.GraphQLMutation) != op.Approval.IsRequired() {
					t.Fatalf("%s: approval %s, want required exactly for mutations", op.Name, op.Approval)
				}
			}
			in := inspectionOf(t, res.Spec, tc.host, "/graphql")
			d, err := decide(t, in, tc.query)
			if err != nil || d.Match.Compiled.Operation().Name != tc.queryOp || d.Approval {
				t.Errorf("query: %+v, %v; want %s without approval", d.Match, err, tc.queryOp)
			}
			d, err = decide(t, in, tc.mutation)
			if err != nil || d.Match.Compiled.Operation().Name != tc.mutationOp || !d.Approval {
				t.Errorf("mutation: %+v, %v; want %s held for approval", d.Match, err, tc.mutationOp)
			}
			if _, err := decide(t, in, `{"query": "{ notAField }"}`); err == nil || !strings.Contains(err.Error(), `"notAField"`) {
				t.Errorf("unknown field: %v, want a refusal naming it", err)
			}
		})
	}
}

func TestImportErrors(t *testing.T) {
	for _, tc := range []struct {
		name, sdl string
		opts      graphqlimport.Options
		want      string
	}{
		{"bad fqn", "type Query { a: Int }", graphqlimport.Options{FQN: "nope", Host: "h.example"}, "--fqn"},
		{"no host", "type Query { a: Int }", graphqlimport.Options{FQN: "local://a/b"}, "--host"},
		{"bad sdl", "type Query { a: }", graphqlimport.Options{FQN: "local://a/b", Host: "h.example"}, "parsing the schema"},
		{"no fields", "type User { a: Int }", graphqlimport.Options{FQN: "local://a/b", Host: "h.example"}, "no query or mutation fields"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := graphqlimport.Import([]byte(tc.sdl), tc.opts)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Import() error = %v, want %q", err, tc.want)
			}
			if tc.name == "no fields" && !errors.Is(err, graphqlimport.ErrNoOperations) {
				t.Errorf("error %v is not ErrNoOperations", err)
			}
		})
	}
}
