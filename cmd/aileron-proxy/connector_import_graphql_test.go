package main

import (
	"path/filepath"
	"strings"
	"testing"
)

func TestConnectorImportGraphQL(t *testing.T) {
	home := t.TempDir()
	schema := filepath.Join("..", "..", "graphqlimport", "testdata", "small.graphql")
	out, errOut, code := runCLI(t, home, "", nil, "connector", "import", "--graphql", schema,
		"--fqn", "local://me/aileron-connector-demo", "--host", "api.example.com", "--path", "/api/graphql", "--credential", "bearer", "--install")
	if code != 0 || !strings.HasPrefix(out, "installed local://me/aileron-connector-demo") {
		t.Fatalf("import --graphql --install: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	if !strings.Contains(errOut, "drafted 4 query operations and 2 mutation operations (1 subscription field left out)") {
		t.Errorf("summary = %q", errOut)
	}
	list, _, _ := runCLI(t, home, "", nil, "connector", "list")
	if !strings.Contains(list, "local://me/aileron-connector-demo") {
		t.Errorf("connector list does not show the import:\n%s", list)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--graphql", schema, "--fqn", "local://me/x"}, "exactly one --host"},
		{[]string{"--graphql", schema, "--fqn", "local://me/x", "--host", "a.example", "--openapi", "x.json"}, "exclusive"},
		{[]string{"--graphql", schema, "--fqn", "local://me/x", "--host", "a.example", "--include", "GET /x"}, "for --openapi imports"},
		{[]string{"--graphql", filepath.Join(t.TempDir(), "missing.graphql"), "--fqn", "local://me/x", "--host", "a.example"}, "reading --graphql"},
	} {
		_, errOut, code := runCLI(t, home, "", nil, append([]string{"connector", "import"}, tc.args...)...)
		if code == 0 || !strings.Contains(errOut, tc.want) {
			t.Errorf("import %v: exit %d, stderr %q; want a failure saying %q", tc.args, code, errOut, tc.want)
		}
	}
}
