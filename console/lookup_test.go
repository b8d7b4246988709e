package console

import (
	"testing"

	"github.com/aileron-dev/aileron-proxy/internal/testkit/specs"
)

// TestLookupOperation: the approvals page finds an operation by connector,
// tool and name, and nothing for any part that is not in the snapshot.
func TestLookupOperation(t *testing.T) {
	snap := specs.Compile(t, `{
  "schema_version": "aileron.connector.v1",
  "connector": {"fqn": "github://acme/conn-a"},
  "tools": [{"name": "a", "operations": [
    {"name": "get", "method": "GET", "path": "/x/{id}", "inputs": [{"name": "id", "required": true}], "summary": "Get an x", "hosts": ["api.a.example"]}
  ]}]
}`)
	if op := lookupOperation(snap, "github://acme/conn-a", "a", "get"); op == nil || op.Path != "/x/{id}" || op.Summary != "Get an x" {
		t.Errorf("lookupOperation(conn-a, a, get) = %+v, want the get operation", op)
	}
	for _, tc := range []struct{ name, fqn, tool, op string }{
		{"unknown connector", "github://acme/nope", "a", "get"},
		{"unknown tool", "github://acme/conn-a", "b", "get"},
		{"unknown operation", "github://acme/conn-a", "a", "put"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if op := lookupOperation(snap, tc.fqn, tc.tool, tc.op); op != nil {
				t.Errorf("lookupOperation(%q, %q, %q) = %+v, want nil", tc.fqn, tc.tool, tc.op, op)
			}
		})
	}
	if op := lookupOperation(nil, "github://acme/conn-a", "a", "get"); op != nil {
		t.Errorf("lookupOperation(nil snapshot) = %+v, want nil", op)
	}
}
