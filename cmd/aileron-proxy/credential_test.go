package main

import (
	"encoding/json"
	"errors"
	"io/fs"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/aileron-dev/aileron-proxy/credentials"
)

const credTestCanary = "CANARY-cli-9d2f7e1a-secret"

func TestCredentialSetListRemove(t *testing.T) {
	home := t.TempDir()
	work := t.TempDir()
	t.Chdir(work)
	run := func(stdin string, args ...string) (string, string) {
		t.Helper()
		stdout, stderr, code := runCLI(t, home, stdin, nil, args...)
		if code != exitOK {
			t.Fatalf("%q: exit %d\nstderr: %s", args, code, stderr)
		}
		return stdout, stderr
	}
	out, errOut := run("", "credential", "set", "GitHub://acme/gh", "--kind", "bearer", "--from-env", "GH_TOKEN")
	if out != "Set the bearer credential for github://acme/gh: env GH_TOKEN -> Authorization: Bearer {secret}\n" {
		t.Fatalf("set stdout = %q", out)
	}
	if !strings.Contains(errOut, "GH_TOKEN is not set in this shell") {
		t.Fatalf("set stderr = %q, want a note about GH_TOKEN", errOut)
	}
	run("", "credential", "set", "github://acme/gh", "--kind", "api_key", "--from-file", "key.txt", "--header", "X-Api-Key")
	run(credTestCanary+"\n", "credential", "set", "github://acme/jira", "--kind", "basic", "--username", "alice", "--stdin")
	run("", "credential", "set", "github://acme/maps", "--kind", "api_key", "--from-exec", "pass show maps", "--query", "key")
	run("", "credential", "set", "github://acme/gh", "--kind", "bearer", "--from-exec", "gh auth token", "--format", "token {secret}") // replaces
	run("rt-"+credTestCanary, "credential", "set", "github://acme/gmail", "--kind", "oauth2", "--token-url", "https://oauth2.example/token",
		"--client-id", "cid", "--client-secret-from-env", "GOOGLE_SECRET", "--refresh-token-stdin", "--scope", "mail.read", "--scope", "mail.send")

	st, err := os.Stat(filepath.Join(home, "credentials.json"))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("credentials.json: %v, mode %v; want 0600", err, st.Mode().Perm())
	}

	out, _ = run("", "credential", "list", "--json")
	var infos []credentials.BindingInfo
	if err := json.Unmarshal([]byte(out), &infos); err != nil {
		t.Fatalf("list --json: %v\n%s", err, out)
	}
	got := map[string]credentials.BindingInfo{}
	for _, in := range infos {
		got[in.FQN+" "+string(in.Kind)] = in
	}
	checks := map[string]func(credentials.BindingInfo) bool{
		"github://acme/gh bearer": func(i credentials.BindingInfo) bool {
			return i.Source == "exec" && i.Ref == "gh auth token" && i.Placement == "Authorization: token {secret}"
		},
		"github://acme/gh api_key": func(i credentials.BindingInfo) bool {
			return i.Source == "file" && i.Ref == filepath.Join(work, "key.txt") && i.Placement == "X-Api-Key: {secret}"
		},
		"github://acme/jira basic": func(i credentials.BindingInfo) bool {
			return i.Source == "stored" && i.Ref == "" && i.Username == "alice"
		},
		"github://acme/maps api_key": func(i credentials.BindingInfo) bool { return i.Placement == "query key={secret}" },
		"github://acme/gmail oauth2": func(i credentials.BindingInfo) bool {
			return i.Source == "oauth2" && i.OAuth2 != nil && i.OAuth2.ClientSecret == "env GOOGLE_SECRET" &&
				i.OAuth2.RefreshToken == "stored" && strings.Join(i.OAuth2.Scopes, ",") == "mail.read,mail.send"
		},
	}
	if len(got) != len(checks) {
		t.Fatalf("list --json has %d entries, want %d:\n%s", len(got), len(checks), out)
	}
	for k, ok := range checks {
		if !ok(got[k]) {
			t.Errorf("list entry %s = %+v", k, got[k])
		}
	}
	out, _ = run("", "credential", "list")
	for _, want := range []string{"CONNECTOR", "KIND", "SOURCE", "PLACEMENT", "exec gh auth token", "Authorization: Basic (user \"alice\")", "oauth2 https://oauth2.example/token"} {
		if !strings.Contains(out, want) {
			t.Errorf("list output lacks %q:\n%s", want, out)
		}
	}

	// What was stored is what the proxy injects.
	file, err := credentials.LoadFile(filepath.Join(home, "credentials.json"))
	if err != nil {
		t.Fatal(err)
	}
	res, err := credentials.NewResolver(credentials.ResolverConfig{File: file})
	if err != nil {
		t.Fatal(err)
	}
	inj, ok := res.Lookup("github://acme/jira", credentials.KindBasic)
	if !ok {
		t.Fatal("basic credential not found by the resolver")
	}
	req := httptest.NewRequest("GET", "https://jira.example/rest", nil)
	if _, err := inj.Apply(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	if u, p, ok := req.BasicAuth(); !ok || u != "alice" || p != credTestCanary {
		t.Fatalf("injected basic auth = %q, %v", u, ok)
	}

	out, _ = run("", "credential", "remove", "github://acme/gh", "--kind", "api_key")
	if out != "Removed the api_key credential for github://acme/gh\n" {
		t.Fatalf("remove stdout = %q", out)
	}
	run("", "credential", "remove", "github://acme/gmail")
	_, errOut, code := runCLI(t, home, "", nil, "credential", "remove", "github://acme/gmail")
	if code != exitFailure || !strings.Contains(errOut, "no credential for github://acme/gmail") {
		t.Fatalf("second remove: exit %d, stderr %q", code, errOut)
	}
	out, _ = run("", "credential", "list", "--json")
	if err := json.Unmarshal([]byte(out), &infos); err != nil || len(infos) != 3 {
		t.Fatalf("after removals: %d entries (%v)", len(infos), err)
	}
}

func TestCredentialUsageErrors(t *testing.T) {
	const fqn = "github://acme/x"
	cases := []struct {
		name  string
		stdin string
		args  []string
		want  string
	}{
		{"no fqn", "", []string{"--kind", "bearer", "--from-env", "X"}, "accepts 1 arg(s), received 0; usage: aileron-proxy credential set FQN --kind KIND"},
		{"no kind", "", []string{fqn, "--from-env", "X"}, "--kind is required"},
		{"bad kind", "", []string{fqn, "--kind", "token", "--from-env", "X"}, `--kind "token" is not a credential kind`},
		{"no source", "", []string{fqn, "--kind", "bearer"}, "pass exactly one secret source: --from-env VAR"},
		{"two sources", "", []string{fqn, "--kind", "bearer", "--from-env", "X", "--from-exec", "y"}, "--from-env and --from-exec"},
		{"basic no username", "", []string{fqn, "--kind", "basic", "--from-env", "X"}, "needs --username"},
		{"username on bearer", "", []string{fqn, "--kind", "bearer", "--from-env", "X", "--username", "a"}, "--username is only for --kind basic"},
		{"basic with header", "", []string{fqn, "--kind", "basic", "--username", "a", "--from-env", "X", "--header", "X-K"}, "drop --header"},
		{"query and header", "", []string{fqn, "--kind", "api_key", "--from-env", "X", "--query", "k", "--header", "X-K"}, "--query excludes --header"},
		{"format without secret", "", []string{fqn, "--kind", "bearer", "--from-env", "X", "--format", "token"}, "{secret} exactly once"},
		{"forbidden header", "", []string{fqn, "--kind", "api_key", "--from-env", "X", "--header", "Host"}, "managed by the proxy"},
		{"bad env name", "", []string{fqn, "--kind", "bearer", "--from-env", "1X"}, "environment variable name"},
		{"bad fqn", "", []string{"acme/x", "--kind", "bearer", "--from-env", "X"}, `connector FQN "acme/x" must be <scheme>://<owner>/<repo>`},
		{"bad scheme", "", []string{"ftp://acme/x", "--kind", "bearer", "--from-env", "X"}, `scheme "ftp" is not supported`},
		{"oauth flags on bearer", "", []string{fqn, "--kind", "bearer", "--token-url", "https://a/t"}, "only apply to --kind oauth2"},
		{"oauth source and refresh", "", []string{fqn, "--kind", "oauth2", "--from-env", "X", "--token-url", "https://a/t"}, "not both"},
		{"oauth nothing", "", []string{fqn, "--kind", "oauth2"}, "--refresh-token-from-env|--refresh-token-from-file|--refresh-token-stdin"},
		{"oauth no client id", "", []string{fqn, "--kind", "oauth2", "--token-url", "https://a/t", "--refresh-token-from-env", "RT"}, "--client-id"},
		{"oauth no refresh", "", []string{fqn, "--kind", "oauth2", "--token-url", "https://a/t", "--client-id", "c"}, "exactly one of --refresh-token-from-env"},
		{"oauth two secrets", "", []string{fqn, "--kind", "oauth2", "--token-url", "https://a/t", "--client-id", "c", "--refresh-token-from-env", "RT",
			"--client-secret-from-env", "A", "--client-secret-from-file", "/b"}, "only one of --client-secret"},
		{"oauth http", "", []string{fqn, "--kind", "oauth2", "--token-url", "http://auth.example/t", "--client-id", "c", "--refresh-token-from-env", "RT"}, "must use https"},
		{"short stdin", "Qz7\n", []string{fqn, "--kind", "bearer", "--stdin"}, "shorter than 4 bytes"},
		{"empty stdin", "", []string{fqn, "--kind", "bearer", "--stdin"}, "the secret is empty"},
		{"unknown flag", "", []string{fqn, "--kind", "bearer", "--token", "x"}, "unknown flag: --token"},
	}
	home := t.TempDir()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			stdout, stderr, code := runCLI(t, home, tc.stdin, nil, append([]string{"credential", "set"}, tc.args...)...)
			if code != exitUsage {
				t.Fatalf("exit %d, want %d\nstderr: %s", code, exitUsage, stderr)
			}
			if !strings.Contains(stderr, tc.want) {
				t.Fatalf("stderr = %q, want it to contain %q", stderr, tc.want)
			}
			if stdout != "" || strings.Contains(stderr, "Qz7") {
				t.Fatalf("stdout %q / stderr %q", stdout, stderr)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(home, "credentials.json")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a failed set wrote credentials.json: %v", err)
	}
	for _, args := range [][]string{{"credential", "list", "x"}, {"credential", "remove"}, {"credential", "remove", "github://a/b", "--kind", "x"}, {"credential", "nope"}} {
		if _, stderr, code := runCLI(t, home, "", nil, args...); code != exitUsage {
			t.Errorf("%q: exit %d (%s), want %d", args, code, stderr, exitUsage)
		}
	}
}

// TestCredentialCanary runs every credential command with a canary secret
// supplied through stdin, the environment and a file, and checks it appears
// in no output and in no file but credentials.json (0600, where --stdin
// stores it by design).
func TestCredentialCanary(t *testing.T) {
	home := t.TempDir()
	secretFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(secretFile, []byte(credTestCanary+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"CANARY_TOKEN": credTestCanary, "SHORT": "Qz7"}
	runs := []struct {
		stdin string
		args  []string
	}{
		{credTestCanary, []string{"credential", "set", "github://acme/a", "--kind", "bearer", "--stdin"}},
		{"", []string{"credential", "set", "github://acme/b", "--kind", "api_key", "--from-env", "CANARY_TOKEN", "--query", "k"}},
		{"", []string{"credential", "set", "github://acme/c", "--kind", "basic", "--username", "u", "--from-file", secretFile}},
		{credTestCanary, []string{"credential", "set", "github://acme/d", "--kind", "oauth2", "--token-url", "https://o.example/t", "--client-id", "c", "--refresh-token-stdin"}},
		{credTestCanary, []string{"credential", "set", "github://acme/e", "--kind", "basic", "--stdin"}}, // usage error after reading
		{credTestCanary + "\n" + credTestCanary, []string{"credential", "set", "github://acme/e", "--kind", "bearer", "--stdin"}},
		{"", []string{"credential", "list"}},
		{"", []string{"credential", "list", "--json"}},
		{"", []string{"credential", "set", "--help"}},
		{"", []string{"credential", "remove", "github://acme/a"}},
		{"", []string{"credential", "list", "--json"}},
	}
	for _, r := range runs {
		stdout, stderr, _ := runCLI(t, home, r.stdin, env, r.args...)
		if strings.Contains(stdout+stderr, credTestCanary) || strings.Contains(stdout+stderr, "Qz7") {
			t.Fatalf("%q printed the secret:\nstdout: %s\nstderr: %s", r.args, stdout, stderr)
		}
	}
	err := filepath.WalkDir(home, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if !strings.Contains(string(data), credTestCanary) {
			return nil
		}
		if filepath.Base(p) != "credentials.json" {
			t.Errorf("%s contains the secret", p)
		}
		if st, _ := os.Stat(p); st.Mode().Perm() != 0o600 {
			t.Errorf("%s holds a secret with mode %04o, want 0600", p, st.Mode().Perm())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestCredentialFlagsTakeNoSecret pins the flags of `credential set`: each
// takes a reference (a variable name, path, command, URL or placement), so
// a secret never needs to be on the command line. A new flag must be
// reviewed here.
func TestCredentialFlagsTakeNoSecret(t *testing.T) {
	set, _, err := testRoot().Find([]string{"credential", "set"})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, m := range regexp.MustCompile(`(?m)^\s+(?:-\w, )?--([a-z0-9-]+)`).FindAllStringSubmatch(set.LocalFlags().FlagUsages(), -1) {
		if m[1] != "help" {
			names = append(names, m[1])
		}
	}
	sort.Strings(names)
	// The aws_sigv4 flags name variables, paths, a profile, a region and a
	// service: none takes a key.
	want := "access-key-id-from-env access-key-id-from-file aws-region aws-service client-id client-secret-from-env client-secret-from-file format from-aws-profile from-env from-exec from-file header kind query refresh-token-from-env refresh-token-from-file refresh-token-stdin scope session-token-from-env session-token-from-file stdin token-url username"
	if got := strings.Join(names, " "); got != want {
		t.Fatalf("credential set flags:\n got %s\nwant %s", got, want)
	}
}
