package policy

import (
	"strings"
	"testing"
)

// FuzzGraphQLBody feeds arbitrary bodies through the GraphQL extraction:
// it never panics, and an allowed request selects only fields its matched
// operation declares, of its declared type.
func FuzzGraphQLBody(f *testing.F) {
	for _, s := range []string{
		`{"query": "{ viewer { login } }"}`,
		`{"query": "{ me: viewer { login } }"}`,
		`{"query": "query { ...F } fragment F on Query { viewer { login } }"}`,
		`{"query": "{ ... on Query { viewer { id } } }"}`,
		`{"query": "query A { viewer { login } } mutation B { createIssue { id } }", "operationName": "B"}`,
		`[{"query": "{ viewer { login } }"}, {"query": "mutation { deleteRepository { id } }"}]`,
		`{"extensions": {"persistedQuery": {"version": 1, "sha256Hash": "abab"}}}`,
		`{"query": "{ viewer: deleteRepository { id } }"}`,
		`{"query": "{ ...A } fragment A on Query { ...A }"}`,
	} {
		f.Add([]byte(s))
	}
	spec, _, err := ParseSpec([]byte(specDoc(gqlOp("viewer", `{"type": "query", "fields": ["viewer"]}`) + "," +
		gqlOp("create", `{"type": "mutation", "fields": ["createIssue"]}`))))
	if err != nil {
		f.Fatal(err)
	}
	snap, err := Compile([]Connector{{Spec: spec}})
	if err != nil {
		f.Fatal(err)
	}
	in := snap.Decide(NewScope([]string{"github://acme/example"}), Request{Method: "POST", Host: "api.example.com", Path: "/graphql"}).Inspect
	if in == nil {
		f.Fatal("no inspection")
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		reqs, batch, err := ParseGraphQLBody(body)
		if err != nil {
			return
		}
		d, err := in.DecideGraphQL(reqs, batch)
		if err != nil {
			if !strings.Contains(err.Error(), "allowed on this path") {
				t.Fatalf("refusal %q lists nothing allowed", err)
			}
			return
		}
		for _, sel := range d.Selections {
			if sel.PersistedHash != "" {
				t.Fatalf("persisted hash %q allowed, but none is declared", sel.PersistedHash)
			}
			if sel.Type != GraphQLQuery && sel.Type != GraphQLMutation {
				t.Fatalf("type %q allowed", sel.Type)
			}
			for _, fld := range sel.Fields {
				if fld != "viewer" && fld != "createIssue" && fld != "__typename" {
					t.Fatalf("field %q allowed from %q", fld, body)
				}
			}
		}
	})
}
