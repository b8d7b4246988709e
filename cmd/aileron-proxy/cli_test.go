package main

// What the tests of every command share: runCLI runs the CLI in process as
// main does, testkit.Golden compares output with testdata/*.golden, and the
// two tree-wide tests enforce the CLI rules of STYLE.md §8 on every command.

import (
	"bytes"
	"context"
	"io"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/spf13/cobra"

	"github.com/aileron-dev/aileron-proxy/internal/testkit"
)

// runCLITimeout bounds one in-process run. It fits the slowest legitimate
// run, `sandbox check` building an image against a real Docker.
const runCLITimeout = 10 * time.Minute

// runCLI runs `aileron-proxy --home HOME ARGS...` in process with stdin and
// the environment env (nil for none), as main does. It returns stdout,
// stderr with main's "error: " line, and main's exit code.
func runCLI(t *testing.T, home, stdin string, env map[string]string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errOut bytes.Buffer
	root := newRootCmd(newApp(strings.NewReader(stdin), &out, &errOut, func(k string) string { return env[k] }))
	root.SetArgs(append([]string{"--home", home}, args...))
	ctx, cancel := context.WithTimeout(t.Context(), runCLITimeout)
	defer cancel()
	code = exitStatus(root.ExecuteContext(ctx), &errOut)
	return out.String(), errOut.String(), code
}

// testRoot is the command tree for inspection; it is never executed.
func testRoot() *cobra.Command {
	return newRootCmd(newApp(strings.NewReader(""), io.Discard, io.Discard, func(string) string { return "" }))
}

// walkCommands calls fn on every command below root, depth first, skipping
// the help and completion commands cobra generates.
func walkCommands(root *cobra.Command, fn func(*cobra.Command)) {
	for _, c := range root.Commands() {
		if c.Name() == "help" || c.Name() == "completion" {
			continue
		}
		fn(c)
		walkCommands(c, fn)
	}
}

// helpGoldens maps each testdata/*-help.golden file to the commands whose
// --help it holds, in order. Every command must appear exactly once.
var helpGoldens = []struct {
	file string
	// bare files hold one command's help alone, without the "$ ..." line
	// and the blank line that separate the commands of a transcript.
	bare bool
	cmds [][]string
}{
	{file: "root-help.golden", cmds: [][]string{{}}},
	{file: "action-help.golden", cmds: [][]string{{"action"}, {"action", "install"}, {"action", "list"}, {"action", "validate"}, {"action", "remove"}}},
	{file: "approvals-help.golden", cmds: [][]string{{"approvals"}, {"approvals", "list"}, {"approvals", "show"}, {"approvals", "approve"}, {"approvals", "deny"}}},
	{file: "connector-help.golden", cmds: [][]string{{"connector"}, {"connector", "import"}, {"connector", "install"}, {"connector", "list"}, {"connector", "validate"}, {"connector", "remove"}, {"connector", "draft"}}},
	{file: "credential-audit-help.golden", cmds: [][]string{{"credential"}, {"credential", "set"}, {"credential", "list"}, {"credential", "remove"}, {"audit"}, {"audit", "tail"}}},
	{file: "internal-help.golden", cmds: [][]string{{"internal"}, {"internal", "guard"}, {"internal", "guard", "hold"}, {"internal", "guard", "apply"}, {"internal", "guard", "show"}}},
	{file: "launch-help.golden", bare: true, cmds: [][]string{{"launch"}}},
	{file: "sandbox-help.golden", cmds: [][]string{{"sandbox"}, {"sandbox", "init"}, {"sandbox", "plan"}, {"sandbox", "build"}, {"sandbox", "check"}}},
	{file: "sandbox-long-help.golden", cmds: [][]string{{"sandbox", "up"}, {"sandbox", "ls"}, {"sandbox", "down"}, {"sandbox", "exec"}}},
	{file: "internal-sandbox-help.golden", cmds: [][]string{{"internal", "sandbox"}, {"internal", "sandbox", "hold"}, {"internal", "sandbox", "exec"}, {"internal", "sandbox", "fs"}}},
	{file: "mcp-help.golden", bare: true, cmds: [][]string{{"mcp"}}},
	{file: "serve-help.golden", cmds: [][]string{{"serve"}}},
	{file: "session-help.golden", cmds: [][]string{{"session"}, {"session", "create"}, {"session", "list"}, {"session", "end"}}},
	{file: "tools-help.golden", cmds: [][]string{{"tools"}, {"tools", "render"}}},
	{file: "ui-help.golden", cmds: [][]string{{"ui"}}},
}

// TestHelpGolden pins the --help of every command (rerun with -update and
// review the diff).
func TestHelpGolden(t *testing.T) {
	root := testRoot()
	covered := map[string]bool{}
	for _, g := range helpGoldens {
		for _, args := range g.cmds {
			path := strings.Join(append([]string{"aileron-proxy"}, args...), " ")
			if c, _, err := root.Find(args); err != nil || c.CommandPath() != path {
				t.Errorf("%s lists %q, which is not a registered command", g.file, path)
			}
			if covered[path] {
				t.Errorf("%q is in more than one help golden file", path)
			}
			covered[path] = true
		}
	}
	walkCommands(root, func(c *cobra.Command) {
		if !covered[c.CommandPath()] {
			t.Errorf("no golden file holds `%s --help`; add the command to helpGoldens and run -update", c.CommandPath())
		}
	})

	for _, g := range helpGoldens {
		t.Run(g.file, func(t *testing.T) {
			var b strings.Builder
			for _, args := range g.cmds {
				stdout, stderr, code := runCLI(t, t.TempDir(), "", nil, append(args, "--help")...)
				if code != exitOK || stderr != "" {
					t.Fatalf("%q --help: exit %d, stderr %q", args, code, stderr)
				}
				if g.bare {
					b.WriteString(stdout)
					continue
				}
				b.WriteString("$ " + strings.Join(append(append([]string{"aileron-proxy"}, args...), "--help"), " ") + "\n" + stdout + "\n")
			}
			testkit.Golden(t, filepath.Join("testdata", g.file), []byte(b.String()))
		})
	}
}

// styleGaps are known violations of STYLE.md §8 in non-test code, as
// "command path: rule". Fix the command and delete its entry; the test fails
// while an entry is stale.
var styleGaps = map[string]bool{}

// TestCommandStyle enforces the cobra conventions of STYLE.md §8 on every
// command of the tree.
func TestCommandStyle(t *testing.T) {
	flagName := regexp.MustCompile(`--([A-Za-z0-9_-]+)`)
	seenGaps := map[string]bool{}
	failed := func(path, rule string) bool {
		if styleGaps[path+": "+rule] {
			seenGaps[path+": "+rule] = true
			return false
		}
		return true
	}
	n := 0
	walkCommands(testRoot(), func(c *cobra.Command) {
		n++
		name := c.CommandPath()
		if c.Args == nil && failed(name, "Args") {
			t.Errorf("%s: Args is not set", name)
		}
		if (c.Short == "" || !unicode.IsUpper([]rune(c.Short)[0]) || strings.HasSuffix(c.Short, ".")) && failed(name, "Short") {
			t.Errorf("%s: Short %q must start with a capital and have no period", name, c.Short)
		}
		if (c.Long == "" || c.Example == "") && failed(name, "Long") {
			t.Errorf("%s: Long and Example are required", name)
		}
		for _, ex := range strings.Split(c.Example, "\n") {
			if !runsCommand(ex, name) && failed(name, "Example") {
				t.Errorf("%s: example %q does not start with the command", name, ex)
			}
		}
		if !strings.HasPrefix(c.Use, c.Name()+" ") && failed(name, "Use") {
			t.Errorf("%s: Use %q must show the syntax after the name", name, c.Use)
		}
		for _, m := range flagName.FindAllStringSubmatch(c.LocalFlags().FlagUsages(), -1) {
			if f := m[1]; (strings.ToLower(f) != f || strings.Contains(f, "_")) && failed(name, "flags") {
				t.Errorf("%s: flag --%s is not kebab-case", name, f)
			}
		}
	})
	if n == 0 {
		t.Fatal("the root command has no subcommands")
	}
	for gap := range styleGaps {
		if !seenGaps[gap] {
			t.Errorf("styleGaps lists %q, which no longer fails; delete the entry", gap)
		}
	}
}

// runsCommand reports whether an Example line invokes the command path
// first, or as the receiving end of a pipe (`printf %s "$T" | aileron-proxy ...`).
func runsCommand(line, path string) bool {
	for _, part := range strings.Split(line, "| ") {
		if p := strings.TrimSpace(part); p == path || strings.HasPrefix(p, path+" ") {
			return true
		}
	}
	return false
}
