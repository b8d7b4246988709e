package launcher

import (
	"context"
	"github.com/aileron-dev/aileron-proxy/launcher/runtime"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestInitAgentRecipes(t *testing.T) {
	for _, name := range AgentNames() {
		t.Run(name, func(t *testing.T) {
			a, err := LookupAgent(name)
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			if _, err := Init(dir, InitOptions{Agent: name}); err != nil {
				t.Fatalf("Init(--agent %s): %v", name, err)
			}
			p, err := NewPlan(dir, PlanOptions{})
			if err != nil {
				t.Fatalf("NewPlan of the %s recipe: %v", name, err)
			}
			if p.Tier != TierDevcontainer || p.Build == nil || !p.Build.ExtendsBase {
				t.Errorf("plan = tier %v, build %+v; want tier 1 extending %s", p.Tier, p.Build, BaseImage(""))
			}
			if got := p.ContainerEnv[a.Placeholder]; got != PlaceholderValue {
				t.Errorf("containerEnv[%s] = %q, want %q", a.Placeholder, got, PlaceholderValue)
			}
			df, err := os.ReadFile(filepath.Join(dir, ".devcontainer", "Dockerfile"))
			if err != nil {
				t.Fatal(err)
			}
			for _, want := range []string{"\nFROM " + BaseImage("") + "\n", "ARG AGENT_PACKAGE=" + a.Package + "\n",
				"ARG NODE_VERSION=" + AgentNodeVersion + "\n", "ARG " + BuildArgNPMRegistry + "=", "ARG " + BuildArgCAURL + "=\n",
				`rm -f "$ca"`, "\nUSER agent\n"} {
				if !strings.Contains(string(df), want) {
					t.Errorf("Dockerfile lacks %q:\n%s", want, df)
				}
			}
			if strings.Contains(string(df), "{{") || strings.Contains(string(df), "registry.npmjs.org/\n") && !strings.Contains(string(df), "ARG npm_config_registry=https://registry.npmjs.org/\n") {
				t.Errorf("Dockerfile has an unfilled template or a stray registry:\n%s", df)
			}
			if !strings.Contains(a.Package, "@") || strings.HasSuffix(a.Package, "@latest") {
				t.Errorf("package %q is not pinned", a.Package)
			}
		})
	}
}

func TestInitUnknownAgent(t *testing.T) {
	dir := t.TempDir()
	_, err := Init(dir, InitOptions{Agent: "aider"})
	if err == nil || !strings.Contains(err.Error(), `unknown agent "aider": use one of claude, codex, gemini, opencode`) {
		t.Fatalf("Init(aider) = %v, want the list of agents", err)
	}
	if _, err := os.Stat(filepath.Join(dir, ".devcontainer")); !os.IsNotExist(err) {
		t.Errorf("Init wrote something for an unknown agent (%v)", err)
	}
}

func TestDeclaresArg(t *testing.T) {
	df := []byte("FROM x\nARG npm_config_registry=https://r/\n  arg AILERON_BUILD_CA_URL\nARG AILERON_BUILD_CA_URL_OTHER=1\n")
	for name, want := range map[string]bool{"npm_config_registry": true, "AILERON_BUILD_CA_URL": true, "NODE_VERSION": false, "AILERON_BUILD": false} {
		if got := declaresArg(df, name); got != want {
			t.Errorf("declaresArg(%q) = %v, want %v", name, got, want)
		}
	}
}

// TestHostRegistriesServeTheBundle: a Dockerfile declaring the build args
// gets a loopback URL serving the host's bundle for exactly the build, and
// the build runs on the host network; one that does not is untouched.
func TestHostRegistriesServeTheBundle(t *testing.T) {
	bundle := filepath.Join(t.TempDir(), "bundle.pem")
	pem := "-----BEGIN CERTIFICATE-----\nMARKER\n-----END CERTIFICATE-----\n"
	if err := os.WriteFile(bundle, []byte(pem), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SSL_CERT_FILE", bundle)
	t.Setenv("PATH", t.TempDir()) // no npm: the registry arg is left to the Dockerfile default

	req := runtime.BuildRequest{Args: map[string]string{"KEEP": "1"}}
	stop, err := withHostRegistries(context.Background(), &req, []byte("FROM x\nARG npm_config_registry=https://r/\nARG AILERON_BUILD_CA_URL=\n"))
	if err != nil {
		t.Fatal(err)
	}
	url := req.Args[BuildArgCAURL]
	if !strings.HasPrefix(url, "http://127.0.0.1:") || req.Network != "host" || req.Args["KEEP"] != "1" {
		t.Fatalf("build request = %+v; want a loopback CA URL, the host network and the other args kept", req)
	}
	if _, ok := req.Args[BuildArgNPMRegistry]; ok {
		t.Errorf("npm registry arg set without npm on PATH: %q", req.Args[BuildArgNPMRegistry])
	}
	get := func(u string) (int, string) {
		resp, err := http.Get(u)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get(url); code != 200 || body != pem {
		t.Errorf("GET the CA URL = %d %q, want the bundle", code, body)
	}
	if code, _ := get(strings.TrimSuffix(url, "/ca.pem") + "x/ca.pem"); code != 404 {
		t.Errorf("GET another path = %d, want 404", code)
	}
	stop()
	if code, _ := get(url); code == 200 {
		t.Error("the bundle is still served after the build")
	}

	plain := runtime.BuildRequest{}
	stop, err = withHostRegistries(context.Background(), &plain, []byte("FROM x\nRUN true\n"))
	if err != nil {
		t.Fatal(err)
	}
	stop()
	if plain.Network != "" || len(plain.Args) != 0 {
		t.Errorf("a Dockerfile without the args got %+v", plain)
	}

	t.Setenv("SSL_CERT_FILE", filepath.Join(t.TempDir(), "missing.pem"))
	bad := runtime.BuildRequest{}
	if _, err := withHostRegistries(context.Background(), &bad, []byte("ARG AILERON_BUILD_CA_URL\n")); err == nil || !strings.Contains(err.Error(), "set SSL_CERT_FILE") {
		t.Errorf("missing bundle: err = %v, want one naming SSL_CERT_FILE", err)
	}
}

func TestCheckAgentRecipe(t *testing.T) {
	a, _ := LookupAgent("claude")
	rt := &fakeRuntime{images: map[string]bool{}, runFn: func(req runtime.RunRequest) (int, error) {
		if len(req.Cmd) < 4 || req.Cmd[3] != "claude" || req.Network != "none" {
			t.Errorf("version check ran %q on network %q", req.Cmd, req.Network)
		}
		io.WriteString(req.Stdout, "2.1.330 (Claude Code)\n")
		return 0, nil
	}}
	all := AgentHost{
		Connectors:    []string{a.Connector},
		HasCredential: func(fqn, kind string) bool { return fqn == a.Connector && kind == "api_key" },
		ContainerEnv:  map[string]string{"ANTHROPIC_API_KEY": PlaceholderValue},
	}
	res, err := CheckAgentRecipe(context.Background(), rt, "img", a, all)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if !r.OK {
			t.Errorf("%s failed: %s", r.Name, r.Detail)
		}
	}
	res, err = CheckAgentRecipe(context.Background(), &fakeRuntime{images: map[string]bool{}, runFn: func(runtime.RunRequest) (int, error) { return 127, nil }}, "img", a, AgentHost{})
	if err != nil {
		t.Fatal(err)
	}
	fixes := map[string]string{
		CheckVersion:     "sandbox init --agent claude --force",
		CheckConnector:   "aileron-proxy connector install configs/connectors/anthropic.aileron.connector.v1.json",
		CheckCredential:  "aileron-proxy credential set github://aileron-dev/aileron-connector-anthropic --kind api_key --header x-api-key",
		CheckPlaceholder: `"ANTHROPIC_API_KEY": "aileron-injected"`,
	}
	if len(res) != len(fixes) {
		t.Fatalf("got %d results, want %d", len(res), len(fixes))
	}
	for _, r := range res {
		if r.OK || !strings.Contains(r.Fix, fixes[r.Name]) {
			t.Errorf("%s: ok=%v fix %q, want a failure whose fix has %q", r.Name, r.OK, r.Fix, fixes[r.Name])
		}
	}
}

func TestBuildRegistryArg(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"https://registry.npmjs.org/\n", "https://registry.npmjs.org/"},
		{"http://10.0.0.5:4873/", "http://10.0.0.5:4873/"},
		{"https://user:s3cret@npm.example/", ""}, // userinfo would reach argv and the image history
		{"https://tok@npm.example/", ""},
		{"undefined", ""},
		{"file:///tmp/r", ""},
		{"https://", ""},
	} {
		if got := buildRegistryArg(tc.in); got != tc.want {
			t.Errorf("buildRegistryArg(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
