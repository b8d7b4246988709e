package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// shellWords splits a POSIX shell command made of plain words, single
// quotes and backslash-newline continuations (what the README's command
// uses); anything else fails the test.
func shellWords(t *testing.T, cmd string) []string {
	t.Helper()
	cmd = strings.ReplaceAll(cmd, "\\\n", " ")
	var words []string
	var cur strings.Builder
	inWord, quoted := false, false
	for _, r := range cmd {
		switch {
		case quoted && r == '\'':
			quoted = false
		case quoted:
			cur.WriteRune(r)
		case r == '\'':
			quoted, inWord = true, true
		case r == ' ' || r == '\t' || r == '\n':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		case strings.ContainsRune("\"\\$`;&|<>()?*{}", r):
			t.Fatalf("the README's command uses %q, which this test does not parse", r)
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if quoted {
		t.Fatal("the README's command has an unclosed quote")
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words
}

// TestGitHubConnectorRegenerates runs the command configs/connectors/README.md
// documents for regenerating the GitHub connector, on the local copy of the
// description its URL names, and checks the shipped file is its output
// byte for byte: the file is what the documented command makes, and
// re-running it changes nothing.
func TestGitHubConnectorRegenerates(t *testing.T) {
	checkConnectorRegenerates(t, "## Regenerating the GitHub connector",
		"https://raw.githubusercontent.com/github/rest-api-description/a6c95e025223022e1522b7e6e6ed32d08aa8dd9e/descriptions/api.github.com/api.github.com.json",
		"configs/connectors/github.aileron.connector.v1.json", "github-2020-07-30.json.gz",
		"imported 97 operations of 623", "updated: names kept for 97 operations, 3 operations carried over", "git.upload-pack is not in the document", "git.receive-pack is not in the document", "git.info-refs is not in the document")
}

// TestOpenAIConnectorRegenerates does the same for the OpenAI connector,
// whose WebSocket operation the description does not cover.
func TestOpenAIConnectorRegenerates(t *testing.T) {
	checkConnectorRegenerates(t, "## Regenerating the OpenAI connector",
		"https://raw.githubusercontent.com/openai/openai-openapi/f85dbe223d40e1a31cba812ab2d755c7e98a92a3/openapi.yaml",
		"configs/connectors/openai.aileron.connector.v1.json", "openai.yaml.gz",
		"imported 15 operations of 288 in the document (273 filtered out, 0 skipped)", "updated: names kept for 15 operations, 1 operation carried over", "responses.websocket is not in the document")
}

// checkConnectorRegenerates runs the first connector import command under
// heading in configs/connectors/README.md, with its --openapi url replaced by
// the local copy gz and its --update and -o target by the shipped file and a
// temporary output, and checks the output equals the shipped file and the
// summary says each of summary.
func checkConnectorRegenerates(t *testing.T, heading, url, target, gz string, summary ...string) {
	t.Helper()
	readme, err := os.ReadFile("../../configs/connectors/README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(readme), "\n"+heading+"\n")
	if !ok {
		t.Fatalf("configs/connectors/README.md has no section %q", heading)
	}
	_, block, ok := strings.Cut(section, "```sh\naileron-proxy connector import ")
	if !ok {
		t.Fatalf("section %q of configs/connectors/README.md has no ```sh block starting with aileron-proxy connector import", heading)
	}
	block, _, _ = strings.Cut(block, "```")
	args := shellWords(t, "connector import "+block)

	want, err := os.ReadFile("../../" + target)
	if err != nil {
		t.Fatal(err)
	}
	local := importGunzip(t, gz)
	out := t.TempDir() + "/" + filepath.Base(target)
	var sawURL, sawUpdate, sawOutput bool
	for i := 0; i+1 < len(args); i++ {
		switch {
		case args[i] == "--openapi" && args[i+1] == url:
			args[i+1], sawURL = local, true
		case args[i] == "--update" && args[i+1] == target:
			args[i+1], sawUpdate = "../../"+target, true
		case args[i] == "-o" && args[i+1] == target:
			args[i+1], sawOutput = out, true
		}
	}
	if !sawURL || !sawUpdate || !sawOutput {
		t.Fatalf("the README's command %q must read --openapi %s, --update %s and write -o %s", args, url, target, target)
	}
	_, stderr, code := runCLI(t, t.TempDir(), "", nil, args...)
	if code != exitOK {
		t.Fatalf("the README's command: exit %d\n%s", code, stderr)
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s is not the output of the command in configs/connectors/README.md; run it from the repository root and review the diff", target)
	}
	for _, want := range summary {
		if !strings.Contains(stderr, want) {
			t.Errorf("the summary lacks %q:\n%s", want, stderr)
		}
	}
}

// TestConnectorImportUpdate re-imports onto a spec in place: the kept name
// and the carried-over operation survive, a second run changes nothing,
// and a broken --update file or a missing --fqn is refused without writing.
func TestConnectorImportUpdate(t *testing.T) {
	home := t.TempDir()
	doc := importWrite(t, "openapi.yaml", importDoc)
	const kept = `{"schema_version": "aileron.connector.v1", "connector": {"fqn": "local://me/items", "version": "1.0.0"},
	 "tools": [{"name": "items", "operations": [
	  {"name": "item.fetch", "method": "GET", "path": "/v1/items/{item}", "hosts": ["api.items.example.test"], "credential": "api_key",
	   "inputs": [{"name": "item", "required": true}]},
	  {"name": "health", "method": "GET", "path": "/healthz", "hosts": ["api.items.example.test"]}]}]}`
	spec := importWrite(t, "items.json", kept)

	_, stderr, code := runCLI(t, home, "", nil, "connector", "import", "--openapi", doc, "--update", spec, "-o", spec)
	if code != exitOK {
		t.Fatalf("import --update: exit %d\n%s", code, stderr)
	}
	for _, want := range []string{"imported 2 operations of 2", "updated: names kept for 1 operation, 1 operation carried over", "GET /healthz: health is not in the document"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("summary lacks %q:\n%s", want, stderr)
		}
	}
	first, err := os.ReadFile(spec)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"fqn": "local://me/items"`, `"version": "1.0.0"`, `"name": "item.fetch"`, `"path": "/v1/items/{id}"`, `"name": "items.delete"`, `"name": "health"`} {
		if !strings.Contains(string(first), want) {
			t.Errorf("updated spec lacks %s:\n%s", want, first)
		}
	}
	if strings.Contains(string(first), `"items.get"`) {
		t.Errorf("the route of item.fetch was imported again as items.get:\n%s", first)
	}
	if _, stderr, code = runCLI(t, home, "", nil, "connector", "import", "--openapi", doc, "--update", spec, "-o", spec); code != exitOK {
		t.Fatalf("second import --update: exit %d\n%s", code, stderr)
	}
	if again, _ := os.ReadFile(spec); !bytes.Equal(again, first) {
		t.Errorf("a second update changed the spec:\n%s\nwas\n%s", again, first)
	}

	broken := importWrite(t, "broken.json", `{"schema_version": "aileron.connector.v1", "connector": {"fqn": "nope"}, "tools": []}`)
	out := filepath.Join(t.TempDir(), "out.json")
	_, stderr, code = runCLI(t, home, "", nil, "connector", "import", "--openapi", doc, "--update", broken, "-o", out)
	if code != exitFailure || !strings.Contains(stderr, "--update "+broken) || !strings.Contains(stderr, "connector validate") {
		t.Errorf("import --update of an invalid spec: exit %d, stderr %q; want exit 1 naming the file and the fix", code, stderr)
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("a failed import wrote %s", out)
	}
	_, stderr, code = runCLI(t, home, "", nil, "connector", "import", "--openapi", doc, "--fqn", "local://me/other", "--update", spec)
	if code != exitFailure || !strings.Contains(stderr, `differs from the FQN "local://me/items"`) {
		t.Errorf("import --update with another --fqn: exit %d, stderr %q", code, stderr)
	}
	if _, stderr, code = runCLI(t, home, "", nil, "connector", "import", "--openapi", doc); code != exitUsage || !strings.Contains(stderr, "--update SPEC") {
		t.Errorf("import without --fqn or --update: exit %d, stderr %q", code, stderr)
	}
}
