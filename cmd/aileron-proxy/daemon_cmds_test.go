package main

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"

	"github.com/spf13/cobra"
)

// The -update flag rewrites golden files; registered here unless another
// test file of the package already did.
var _ = func() bool {
	if flag.Lookup("update") == nil {
		flag.Bool("update", false, "rewrite golden files in testdata/")
	}
	return true
}()

// TestSessionApprovalsHelpGolden pins the help of the session and approvals
// commands.
func TestSessionApprovalsHelpGolden(t *testing.T) {
	for _, group := range []struct {
		file string
		cmds [][]string
	}{
		{"session-help.golden", [][]string{{"session"}, {"session", "create"}, {"session", "list"}, {"session", "end"}}},
		{"approvals-help.golden", [][]string{{"approvals"}, {"approvals", "list"}, {"approvals", "approve"}, {"approvals", "deny"}}},
	} {
		var b strings.Builder
		for _, args := range group.cmds {
			stdout, stderr, code := cliRun(t, t.TempDir(), append(args, "--help")...)
			if code != exitOK || stderr != "" {
				t.Fatalf("%q --help: exit %d, stderr %q", args, code, stderr)
			}
			b.WriteString("$ aileron-proxy " + strings.Join(args, " ") + " --help\n" + stdout + "\n")
		}
		path := filepath.Join("testdata", group.file)
		if f := flag.Lookup("update"); f != nil && f.Value.String() == "true" {
			if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("reading %s (create it with -update): %v", path, err)
		}
		if b.String() != string(want) {
			t.Errorf("help differs from %s (rerun with -update and review the diff):\n%s", path, b.String())
		}
	}
}

// TestSessionApprovalsCommandStyle enforces the cobra conventions of
// STYLE.md on the session and approvals command trees.
func TestSessionApprovalsCommandStyle(t *testing.T) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		name := c.CommandPath()
		if c.Args == nil {
			t.Errorf("%s: Args is not set", name)
		}
		if c.Short == "" || !unicode.IsUpper([]rune(c.Short)[0]) || strings.HasSuffix(c.Short, ".") {
			t.Errorf("%s: Short %q must start with a capital and have no period", name, c.Short)
		}
		if c.Long == "" || c.Example == "" {
			t.Errorf("%s: Long and Example are required", name)
		}
		group := strings.Join(strings.Fields(name)[:2], " ") // "aileron-proxy session"
		for _, ex := range strings.Split(c.Example, "\n") {
			if !strings.HasPrefix(strings.TrimSpace(ex), group+" ") {
				t.Errorf("%s: example %q does not start with %q", name, ex, group)
			}
		}
		if !strings.HasPrefix(c.Use, c.Name()+" ") {
			t.Errorf("%s: Use %q must show the syntax after the name", name, c.Use)
		}
		for _, m := range regexp.MustCompile(`--([A-Za-z0-9_-]+)`).FindAllStringSubmatch(c.LocalFlags().FlagUsages(), -1) {
			if f := m[1]; strings.ToLower(f) != f || strings.Contains(f, "_") {
				t.Errorf("%s: flag --%s is not kebab-case", name, f)
			}
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	root := newRootCmd(newApp(strings.NewReader(""), &bytes.Buffer{}, &bytes.Buffer{}, func(string) string { return "" }))
	found := 0
	for _, c := range root.Commands() {
		if c.Name() == "session" || c.Name() == "approvals" {
			walk(c)
			found++
		}
	}
	if found != 2 {
		t.Fatalf("found %d of the session and approvals commands on the root", found)
	}
}
