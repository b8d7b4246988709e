package shims

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aileron-dev/aileron-proxy/internal/testkit"
	"github.com/aileron-dev/aileron-proxy/policy"
)

func fixtureConnectors(t *testing.T) []policy.Connector {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join("testdata", "specs", "*.aileron.connector.v1.json"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no fixture specs in testdata/specs: %v", err)
	}
	var conns []policy.Connector
	for _, p := range paths {
		conns = append(conns, loadConnector(t, p))
	}
	return conns
}

// helpTranscript runs every help form of a shim with sh and no daemon
// environment, and returns the outputs in one document.
func helpTranscript(t *testing.T, shell []string, s Shim, ops []string) []byte {
	t.Helper()
	script := writeScript(t, s)
	cwd := t.TempDir()
	env := []string{"PATH=" + os.Getenv("PATH")}
	var doc bytes.Buffer
	show := func(args ...string) string {
		argv := append(append(append([]string(nil), shell...), script), args...)
		res := run(t, cwd, env, argv...)
		if res.code != 0 || res.stderr != "" {
			t.Fatalf("%s %s: exit %d, stderr %q", s.Command, strings.Join(args, " "), res.code, res.stderr)
		}
		doc.WriteString("$ " + strings.Join(append([]string{s.Command}, args...), " ") + "\n")
		doc.WriteString(res.stdout)
		doc.WriteString("\n")
		return res.stdout
	}
	general := show("--help")
	for _, alias := range [][]string{{"-h"}, {"help"}, {}} {
		argv := append(append(append([]string(nil), shell...), script), alias...)
		if res := run(t, cwd, env, argv...); res.stdout != general || res.code != 0 {
			t.Errorf("%s %v: exit %d, output differs from --help:\n%s", s.Command, alias, res.code, res.stdout)
		}
	}
	for _, op := range ops {
		one := show(op, "--help")
		argv := append(append(append([]string(nil), shell...), script), "help", op)
		if res := run(t, cwd, env, argv...); res.stdout != one || res.code != 0 {
			t.Errorf("%s help %s: exit %d, output differs from %s --help", s.Command, op, res.code, op)
		}
	}
	if entries, _ := os.ReadDir(cwd); len(entries) != 0 {
		t.Errorf("help of %s created files in its working directory: %v", s.Command, entries)
	}
	return doc.Bytes()
}

func opNames(c policy.Connector, toolName string) []string {
	for _, tl := range c.Spec.Tools {
		if tl.Name == toolName {
			var out []string
			for _, op := range tl.Operations {
				out = append(out, op.Name)
			}
			return out
		}
	}
	return nil
}

func TestToolsGolden(t *testing.T) {
	sh := testkit.RequireTool(t, "sh")
	conns := fixtureConnectors(t)
	r, err := Render(RenderOptions{Connectors: conns, AgentCommand: "claude"})
	if err != nil {
		t.Fatalf("Render(fixtures) = %v", err)
	}
	testkit.Golden(t, filepath.Join("testdata", "tools.txt.golden"), r.ToolsTxt)

	byFQN := map[string]policy.Connector{}
	for _, c := range conns {
		byFQN[c.Spec.Connector.FQN] = c
	}
	var cmds []string
	for _, s := range r.Shims {
		cmds = append(cmds, s.Command)
		testkit.Golden(t, filepath.Join("testdata", s.Command+".sh.golden"), s.Script)
		help := helpTranscript(t, []string{sh}, s, opNames(byFQN[s.ConnectorFQN], s.Tool))
		testkit.Golden(t, filepath.Join("testdata", s.Command+".help.golden"), help)
	}
	if got, want := strings.Join(cmds, " "), "gh-api google"; got != want {
		t.Errorf("Render(fixtures) commands = %q, want %q", got, want)
	}

	// The order of the connectors must not matter.
	rev := []policy.Connector{conns[1], conns[0]}
	r2, err := Render(RenderOptions{Connectors: rev})
	if err != nil {
		t.Fatalf("Render(reversed fixtures) = %v", err)
	}
	if !bytes.Equal(r.ToolsTxt, r2.ToolsTxt) {
		t.Errorf("tools.txt depends on connector order:\n%s\nvs\n%s", r.ToolsTxt, r2.ToolsTxt)
	}
	for i := range r.Shims {
		if !bytes.Equal(r.Shims[i].Script, r2.Shims[i].Script) {
			t.Errorf("shim %s depends on connector order", r.Shims[i].Command)
		}
	}
}

// TestToolsHostileSpec renders a spec whose text tries to break out of the
// script (quotes, $(...), backticks, the heredoc delimiter on its own line,
// terminal escapes) and checks the help under both shells prints it inert.
func TestToolsHostileSpec(t *testing.T) {
	conn := loadConnector(t, filepath.Join("testdata", "hostile.aileron.connector.v1.json"))
	r, err := Render(RenderOptions{Connectors: []policy.Connector{conn}})
	if err != nil {
		t.Fatalf("Render(hostile) = %v", err)
	}
	if len(r.Shims) != 1 || r.Shims[0].Command != "hostile" {
		t.Fatalf("Render(hostile) shims = %+v, want one named hostile", r.Shims)
	}
	s := r.Shims[0]
	script := string(s.Script)
	if strings.Contains(script, "<<'"+delimiterBase+"'") {
		t.Errorf("the script uses the delimiter %q although the spec text contains it", delimiterBase)
	}
	if strings.ContainsAny(script, "\x1b\u202e\r") {
		t.Errorf("the script carries raw control characters from the spec")
	}
	ops := opNames(conn, "Hostile")
	shells := map[string][]string{}
	for _, name := range []string{"dash", "busybox"} {
		p := testkit.RequireTool(t, name)
		if name == "busybox" {
			shells[name] = []string{p, "sh"}
		} else {
			shells[name] = []string{p}
		}
	}
	var first []byte
	for _, name := range []string{"dash", "busybox"} {
		doc := helpTranscript(t, shells[name], s, ops)
		if first == nil {
			first = doc
			testkit.Golden(t, filepath.Join("testdata", "hostile.help.golden"), doc)
		} else if !bytes.Equal(doc, first) {
			t.Errorf("help under %s differs from dash:\n%s", name, doc)
		}
		for _, want := range []string{
			`it's "quoted" $(touch pwned-dollar) ` + "`touch pwned-backtick`" + ` ${HOME}`,
			"\n" + delimiterBase + "\n",
			`\u001b[31mred\u001b[0m \u202eevil\u202c done`,
			"ünïcödé 日本語 🎉",
			`hostile say --args '{"who":"<who>","count":1}'`,
		} {
			if !bytes.Contains(doc, []byte(want)) {
				t.Errorf("help under %s lacks %q", name, want)
			}
		}
	}
}

func TestToolsHeredocDelimiter(t *testing.T) {
	if d, err := heredocDelimiter("plain text\n"); err != nil || d != delimiterBase {
		t.Errorf("heredocDelimiter(plain) = %q, %v, want %q", d, err, delimiterBase)
	}
	text := "a\n" + delimiterBase + "\nb " + delimiterBase + "_X"
	d, err := heredocDelimiter(text)
	if err != nil {
		t.Fatalf("heredocDelimiter = %v", err)
	}
	if strings.Contains(text, d) || !strings.HasPrefix(d, delimiterBase+"_") {
		t.Errorf("heredocDelimiter(%q) = %q, which occurs in the text or lacks the prefix", text, d)
	}
	if d2, _ := heredocDelimiter(text); d2 != d {
		t.Errorf("heredocDelimiter is not deterministic: %q then %q", d, d2)
	}
}

func TestToolsConflicts(t *testing.T) {
	google := func(fqn, name string) policy.Connector {
		return fakeConnector(fqn, tool(name, "gmail.messages.search"))
	}
	tests := []struct {
		name  string
		opts  RenderOptions
		kinds []ConflictKind
		want  []string // substrings of the error
	}{
		{
			name: "two connectors, one command",
			opts: RenderOptions{Connectors: []policy.Connector{
				google("github://acme/aileron-connector-google", "google"),
				google("github://other/google-clone", "Google"),
			}},
			kinds: []ConflictKind{ConflictDuplicate},
			want: []string{
				`command "google" is claimed by tool "google" of github://acme/aileron-connector-google (sha256:`,
				`and tool "Google" of github://other/google-clone (sha256:`,
				google("github://other/google-clone", "Google").Hash,
				google("github://acme/aileron-connector-google", "google").Hash,
				`"aileron-proxy connector remove github://acme/aileron-connector-google" or "aileron-proxy connector remove github://other/google-clone"`,
			},
		},
		{
			name: "one connector, two tools differing in case",
			opts: RenderOptions{Connectors: []policy.Connector{
				fakeConnector("local://me/tools", tool("Deploy", "run"), tool("deploy", "run")),
			}},
			kinds: []ConflictKind{ConflictDuplicate},
			want:  []string{`command "deploy" is claimed by tool "Deploy" of local://me/tools`, "rename one of the tools in the spec"},
		},
		{
			name:  "agent command",
			opts:  RenderOptions{Connectors: []policy.Connector{google("github://acme/claude-api", "Claude")}, AgentCommand: "/usr/local/bin/claude"},
			kinds: []ConflictKind{ConflictAgent},
			want:  []string{`command "claude" of tool "Claude" of github://acme/claude-api (sha256:`, `would shadow the agent command "claude"`, `"aileron-proxy connector remove github://acme/claude-api"`},
		},
		{
			name:  "reserved name",
			opts:  RenderOptions{Connectors: []policy.Connector{google("github://acme/codex-api", "codex")}, Reserved: []string{"", "codex"}},
			kinds: []ConflictKind{ConflictReserved},
			want:  []string{`command "codex" of tool "codex" of github://acme/codex-api`, `would shadow "codex", a command the sandbox mounts`, `"aileron-proxy connector remove github://acme/codex-api"`},
		},
		{
			name: "basic commands",
			opts: RenderOptions{Connectors: []policy.Connector{
				fakeConnector("github://acme/net", tool("Curl", "get"), tool("git", "clone"), tool("ok-tool", "x")),
			}},
			kinds: []ConflictKind{ConflictBasic, ConflictBasic},
			want:  []string{`command "curl" of tool "Curl"`, `would shadow the basic sandbox command "git" (see docs/shims.md)`},
		},
		{
			name: "unsafe names",
			opts: RenderOptions{Connectors: []policy.Connector{
				fakeConnector("github://acme/bad", tool("../x", "get"), tool("x", "help", "-v", "ok", "ok", "a b")),
				{Hash: "sha256:00"},
			}},
			kinds: []ConflictKind{ConflictInvalid, ConflictInvalid, ConflictInvalid, ConflictInvalid, ConflictInvalid, ConflictInvalid},
			want: []string{
				`tool "../x" of github://acme/bad`, `is not a safe command name`,
				`operation "help" collides with the shim's own flags`,
				`operation "-v" collides`, `operation "ok" is declared twice`,
				`operation "a b" is not a valid name`, `connector 1 (sha256:00) has no spec`,
			},
		},
		{
			name: "every conflict is listed",
			opts: RenderOptions{
				Connectors: []policy.Connector{
					google("github://a/one", "dup"), google("github://b/two", "dup"),
					google("github://c/three", "sh"),
				},
				AgentCommand: "dup",
			},
			kinds: []ConflictKind{ConflictDuplicate, ConflictAgent, ConflictBasic},
			want:  []string{"rendering tools: 3 conflicts:\n  command \"dup\""},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Render(tc.opts)
			if r != nil {
				t.Errorf("Render returned output despite conflicts")
			}
			var ce *ConflictError
			if !errors.As(err, &ce) {
				t.Fatalf("Render = %v, want a *ConflictError", err)
			}
			var kinds []ConflictKind
			for _, c := range ce.Conflicts {
				kinds = append(kinds, c.Kind)
				if c.Message == "" {
					t.Errorf("conflict %+v has no message", c)
				}
			}
			if got, want := kindsString(kinds), kindsString(tc.kinds); got != want {
				t.Errorf("Render conflict kinds = %s, want %s\n%v", got, want, err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Render error lacks %q:\n%v", w, err)
				}
			}
		})
	}
}

func kindsString(ks []ConflictKind) string {
	var s []string
	for _, k := range ks {
		s = append(s, k.String())
	}
	return strings.Join(s, ",")
}

func TestToolsEmpty(t *testing.T) {
	r, err := Render(RenderOptions{})
	if err != nil || len(r.ToolsTxt) != 0 || len(r.Shims) != 0 {
		t.Errorf("Render(no connectors) = %+v, %v, want empty output", r, err)
	}
}

func TestToolsBasicCommandsDocumented(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "docs", "shims.md"))
	if err != nil {
		t.Fatalf("reading docs/shims.md: %v", err)
	}
	for _, c := range BasicCommands() {
		if !bytes.Contains(doc, []byte("`"+c+"`")) {
			t.Errorf("docs/shims.md does not list the basic command %q", c)
		}
	}
}
