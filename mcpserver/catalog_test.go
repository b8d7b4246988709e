package mcpserver

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/aileron-dev/aileron-proxy/internal/testkit"
	"github.com/aileron-dev/aileron-proxy/internal/testkit/specs"
)

var validName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// TestCatalogGolden pins the names, schemas and annotations of the demo
// and GitHub connectors shipped in configs/connectors.
func TestCatalogGolden(t *testing.T) {
	var docs []string
	for _, f := range []string{"demo", "github"} {
		b, err := os.ReadFile("../configs/connectors/" + f + ".aileron.connector.v1.json")
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, string(b))
	}
	snap := specs.Compile(t, docs...)
	entries := Catalog(snap, AllScope(snap), nil)
	if len(entries) == 0 {
		t.Fatal("no tools")
	}
	var defs []any
	for _, e := range entries {
		if !validName.MatchString(e.Name) {
			t.Errorf("tool name %q is not [A-Za-z0-9_-]{1,64}", e.Name)
		}
		defs = append(defs, e.Def)
	}
	got, err := json.MarshalIndent(defs, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	testkit.Golden(t, "testdata/tools.golden.json", append(got, '\n'))
}

func TestNamesCollideAndStayStable(t *testing.T) {
	mk := func(fqn, tool, op string) *Entry { return &Entry{ConnectorFQN: fqn, Tool: tool, Operation: op} }
	a := mk("github://a/x", "gh", "issues.list")
	b := mk("github://b/y", "gh", "issues.list")
	c := mk("github://a/x", "gh", "issues:list") // maps to the same base name
	long := mk("github://a/x", strings.Repeat("t", 40), strings.Repeat("o", 40))
	solo := mk("github://a/x", "gh", "user.get")
	assignNames([]*Entry{a, b, c, long, solo})
	if solo.Name != "gh__user_get" {
		t.Errorf("solo = %q", solo.Name)
	}
	seen := map[string]bool{}
	for _, e := range []*Entry{a, b, c, long} {
		if !validName.MatchString(e.Name) || !strings.HasPrefix(e.Name, e.Name[:2]) || seen[e.Name] {
			t.Errorf("name %q is invalid or duplicate", e.Name)
		}
		seen[e.Name] = true
	}
	if len(long.Name) != MaxNameLen {
		t.Errorf("long name %q has %d characters, want %d", long.Name, len(long.Name), MaxNameLen)
	}
	// The same entries in another order, without one of them: each keeps
	// its name while it still collides.
	a2, b2 := mk("github://a/x", "gh", "issues.list"), mk("github://b/y", "gh", "issues.list")
	assignNames([]*Entry{b2, a2})
	if a2.Name != a.Name || b2.Name != b.Name {
		t.Errorf("names changed with order: %q %q, were %q %q", a2.Name, b2.Name, a.Name, b.Name)
	}
}
