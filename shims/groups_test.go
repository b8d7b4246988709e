package shims

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aileron-dev/aileron-proxy/internal/testkit"
	"github.com/aileron-dev/aileron-proxy/internal/testkit/specs"
	"github.com/aileron-dev/aileron-proxy/policy"
)

// syntheticConnector is a GitHub-like connector of n operations (see
// specs.Synthetic) whose tool "gh" also has an operation without a group
// prefix and one that is not proxyable.
func syntheticConnector(t *testing.T, n int) policy.Connector {
	t.Helper()
	spec, _, err := policy.ParseSpec(specs.Synthetic("github://acme/synthetic", "gh", "api.github.example", n))
	if err != nil {
		t.Fatalf("parsing the %d-operation synthetic spec: %v", n, err)
	}
	ops := &spec.Tools[0].Operations
	*ops = append(*ops,
		policy.Operation{Name: "meta", Summary: "API root", Method: "GET", Path: "/", Hosts: []string{"api.github.example"}, Idempotency: policy.Idempotent},
		policy.Operation{Name: "notes", Summary: "How to page through lists"},
	)
	return policy.Connector{Spec: spec, Hash: "sha256:synthetic"}
}

// TestGroupedHelpGolden renders a tool above the grouped-help threshold:
// its --help lists one line per operation under its group, tools.txt names
// the groups, and one operation's --help is still complete.
func TestGroupedHelpGolden(t *testing.T) {
	sh := testkit.RequireTool(t, "sh")
	r, err := Render(RenderOptions{Connectors: []policy.Connector{syntheticConnector(t, 40)}})
	if err != nil {
		t.Fatalf("Render(synthetic) = %v", err)
	}
	testkit.Golden(t, filepath.Join("testdata", "grouped-tools.txt.golden"), r.ToolsTxt)
	help := helpTranscript(t, []string{sh}, r.Shims[0], []string{"repos.get-pulls", "meta"})
	testkit.Golden(t, filepath.Join("testdata", "grouped.help.golden"), help)
}

// TestLargeToolStaysUsable renders a 1,000-operation tool and runs its shim:
// --help is one line per operation plus a few per group, tools.txt and the
// unknown-operation error stay short, one operation's help is complete, and
// rendering and the shell's reading of the script stay fast.
func TestLargeToolStaysUsable(t *testing.T) {
	sh := testkit.RequireTool(t, "sh")
	conn := syntheticConnector(t, 1000)
	start := time.Now()
	r, err := Render(RenderOptions{Connectors: []policy.Connector{conn}})
	if err != nil {
		t.Fatalf("Render(synthetic) = %v", err)
	}
	took := time.Since(start)
	if took > 2*time.Second {
		t.Errorf("rendering a 1,000-operation tool took %v, want well under 2s", took)
	}
	if n := len(r.ToolsTxt); n > 400 {
		t.Errorf("tools.txt is %d bytes for one 1,000-operation tool, want a line naming the groups:\n%s", n, r.ToolsTxt)
	}
	s := r.Shims[0]
	script := writeScript(t, s)
	env := []string{"PATH=/usr/bin:/bin"}
	start = time.Now()
	res := run(t, t.TempDir(), env, sh, script, "--help")
	helpTook := time.Since(start)
	if res.code != 0 || res.stderr != "" {
		t.Fatalf("gh --help: exit %d, stderr %q", res.code, res.stderr)
	}
	groups := groupOperations(&conn.Spec.Tools[0])
	lines := strings.Count(res.stdout, "\n")
	if max := 1002 + 2*len(groups) + 30; lines > max {
		t.Errorf("gh --help has %d lines for 1,002 operations in %d groups, want at most %d", lines, len(groups), max)
	}
	for _, op := range conn.Spec.Tools[0].Operations {
		if n := strings.Count(res.stdout, "\n  "+op.Name+" "); n != 1 {
			t.Fatalf("gh --help lists %s %d times, want once", op.Name, n)
		}
	}
	one := run(t, t.TempDir(), env, sh, script, "teams.update-issues-2", "--help")
	for _, want := range []string{"PATCH /orgs/{org}/teams/{team_slug}/issues-2/{issues_2_id}", "hosts: api.github.example", "issues_2_id", "Example:"} {
		if one.code != 0 || !strings.Contains(one.stdout, want) {
			t.Fatalf("gh teams.update-issues-2 --help: exit %d, lacks %q:\n%s", one.code, want, one.stdout)
		}
	}
	bad := run(t, t.TempDir(), env, sh, script, "repos.nope")
	if bad.code != ExitUsage || len(bad.stderr) > 600 || !strings.Contains(bad.stderr, "listed by 'gh --help'") {
		t.Errorf("gh repos.nope: exit %d, stderr (%d bytes) %q; want %d and a short message pointing at --help", bad.code, len(bad.stderr), bad.stderr, ExitUsage)
	}
	t.Logf("render %v, script %d KiB, sh --help %v (%d lines); tools.txt: %s", took, len(s.Script)>>10, helpTook, lines, r.ToolsTxt)
}
