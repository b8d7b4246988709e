package main

import (
	"bytes"
	"os"
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
	readme, err := os.ReadFile("../../configs/connectors/README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(readme), "```sh\naileron-proxy connector import ")
	if !ok {
		t.Fatal("configs/connectors/README.md has no ```sh block starting with aileron-proxy connector import")
	}
	block, _, _ = strings.Cut(block, "```")
	args := shellWords(t, "connector import "+block)

	const (
		url    = "https://raw.githubusercontent.com/github/rest-api-description/a6c95e025223022e1522b7e6e6ed32d08aa8dd9e/descriptions/api.github.com/api.github.com.json"
		target = "configs/connectors/github.aileron.connector.v1.json"
	)
	want, err := os.ReadFile("../../" + target)
	if err != nil {
		t.Fatal(err)
	}
	local := importGunzip(t, "github-2020-07-30.json.gz")
	out := t.TempDir() + "/github.json"
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
	for _, want := range []string{"imported 97 operations of 623", "updated: 97 operations kept their names, 3 carried over", "git.upload-pack is not in the document", "git.receive-pack is not in the document", "git.info-refs is not in the document"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("the summary lacks %q:\n%s", want, stderr)
		}
	}
}
