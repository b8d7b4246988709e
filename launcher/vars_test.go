package launcher

import (
	"bytes"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/aileron-dev/aileron-proxy/api"
	"github.com/aileron-dev/aileron-proxy/launcher/devcontainer"
)

func testVars() devcontainer.VarContext {
	local := map[string]string{"HOME": "/home/me", "EMPTY": "", "TOKEN_NAME": "x:y"}
	cont := map[string]string{"PATH": "/usr/bin:/bin"}
	return devcontainer.VarContext{
		LocalEnv:             func(k string) (string, bool) { v, ok := local[k]; return v, ok },
		ContainerEnv:         func(k string) (string, bool) { v, ok := cont[k]; return v, ok },
		LocalWorkspaceFolder: "/src/My Project", ContainerWorkspaceFolder: WorkspacePath,
		DevContainerID: "0abc",
	}
}

var substituteCases = []struct{ in, want string }{
	{"plain", "plain"},
	{"${localEnv:HOME}/.cache", "/home/me/.cache"},
	{"${env:HOME}", "/home/me"},
	{"${localEnv:NOPE}", ""},
	{"${localEnv:NOPE:fallback}", "fallback"},
	{"${localEnv:EMPTY:fallback}", "fallback"},
	{"${localEnv:NOPE:a:b}", "a"},
	{"${localEnv:TOKEN_NAME}", "x:y"},
	{"${containerEnv:PATH}:/opt/tool/bin", "/usr/bin:/bin:/opt/tool/bin"},
	{"${localWorkspaceFolder}|${localWorkspaceFolderBasename}", "/src/My Project|My Project"},
	{"${containerWorkspaceFolder}|${containerWorkspaceFolderBasename}", WorkspacePath + "|workspace"},
	{"id-${devcontainerId}", "id-0abc"},
	{"${unknown:X} ${localEnv} $HOME ${", "${unknown:X} ${localEnv} $HOME ${"},
	{"${localEnv:HOME", "${localEnv:HOME"},
	{"a${localEnv:HOME}b${localEnv:HOME}c", "a/home/meb/home/mec"},
}

func TestSubstitute(t *testing.T) {
	vc := testVars()
	for _, tc := range substituteCases {
		if got := devcontainer.Substitute(tc.in, vc); got != tc.want {
			t.Errorf("Substitute(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	// Without a container environment, ${containerEnv:...} waits.
	vc.ContainerEnv = nil
	if got := devcontainer.Substitute("${containerEnv:PATH}:${localEnv:HOME}", vc); got != "${containerEnv:PATH}:/home/me" {
		t.Errorf("Substitute before the container = %q, want containerEnv kept", got)
	}
}

func FuzzSubstitute(f *testing.F) {
	for _, tc := range substituteCases {
		f.Add(tc.in)
	}
	vc := testVars()
	f.Fuzz(func(t *testing.T, s string) {
		got := devcontainer.Substitute(s, vc)
		if !strings.Contains(s, "${") && got != s {
			t.Fatalf("Substitute(%q) = %q, want it unchanged (no variable)", s, got)
		}
		// Text outside ${...} survives: every byte before the first "${" is kept.
		if i := strings.Index(s, "${"); i >= 0 && !strings.HasPrefix(got, s[:i]) {
			t.Fatalf("Substitute(%q) = %q, lost the prefix %q", s, got, s[:i])
		}
		// Substitution is not recursive: a value holding "${" is not expanded again.
		if again := devcontainer.Substitute(got, devcontainer.VarContext{}); !strings.Contains(s, "${") && again != got {
			t.Fatalf("Substitute is not idempotent on %q", s)
		}
	})
}

func TestPlanRemoteEnvAndVariables(t *testing.T) {
	dir := writeProject(t, map[string]string{
		devcontainer.Path: `{
  "build": {"dockerfile": "Dockerfile", "args": {"GREETING": "${localEnv:GREETING:hi}", "WS": "${localWorkspaceFolderBasename}"}},
  "containerEnv": {"TOOL_HOME": "${containerWorkspaceFolder}/.tool", "ID": "${devcontainerId}"},
  "remoteEnv": {"PATH": "${containerEnv:PATH}:/opt/x/bin", "FROM_HOST": "${localEnv:FROM_HOST}", "DROPPED": null, "AILERON_TOKEN": "stolen", "HTTPS_PROXY": "http://evil:1"},
}`,
		".devcontainer/Dockerfile": "FROM debian:bookworm-slim\n",
	})
	env := map[string]string{"FROM_HOST": "host-value"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	p, err := NewPlan(dir, PlanOptions{LocalEnv: lookup})
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]string{"GREETING": "hi", "WS": "My Project"}; !reflect.DeepEqual(p.Build.Args, want) {
		t.Errorf("build args = %v, want %v", p.Build.Args, want)
	}
	if _, ok := p.RemoteEnv["DROPPED"]; ok {
		t.Errorf("remoteEnv kept a null value: %v", p.RemoteEnv)
	}
	if len(p.DevContainerID) != 52 || p.DevContainerID != devcontainer.ID(dir, p.DevContainer) {
		t.Errorf("DevContainerID = %q, want 52 stable characters", p.DevContainerID)
	}
	ce, re := p.ResolveEnv(lookup, map[string]string{"PATH": "/usr/bin", "HOME": "/root"})
	if ce["TOOL_HOME"] != WorkspacePath+"/.tool" || ce["ID"] != p.DevContainerID {
		t.Errorf("containerEnv = %v", ce)
	}
	if re["PATH"] != "/usr/bin:/opt/x/bin" || re["FROM_HOST"] != "host-value" {
		t.Errorf("remoteEnv = %v", re)
	}
	sess := &api.CreatedSession{ID: launchTestID, APIToken: launchTestToken, ProxyURL: "http://" + launchTestID + ":" + launchTestSecret + "@127.0.0.1:3128"}
	got, warnings, err := SandboxEnv(SandboxEnvInput{Session: sess, ProxyAddr: "10.89.3.1:4000", APIURL: "http://127.0.0.1:7700", APIAddr: "10.89.3.1:4001",
		ContainerEnv: ce, RemoteEnv: re})
	if err != nil {
		t.Fatal(err)
	}
	if got["AILERON_TOKEN"] != launchTestToken || !strings.Contains(got["HTTPS_PROXY"], "@10.89.3.1:4000") || got["FROM_HOST"] != "host-value" {
		t.Errorf("remoteEnv overrode the runtime contract or was lost: FROM_HOST=%q", got["FROM_HOST"])
	}
	if len(warnings) != 2 || !strings.Contains(warnings[0], "remoteEnv AILERON_TOKEN") || !strings.Contains(warnings[1], "remoteEnv HTTPS_PROXY") {
		t.Errorf("warnings = %q, want one per reserved remoteEnv variable", warnings)
	}
	// Any AILERON_* name is reserved, not only those launch sets today.
	got, _, _ = SandboxEnv(SandboxEnvInput{Session: sess, ProxyAddr: "10.89.3.1:4000", APIURL: "http://127.0.0.1:7700", APIAddr: "10.89.3.1:4001",
		ContainerEnv: map[string]string{"AILERON_FUTURE": "x"}})
	if _, ok := got["AILERON_FUTURE"]; ok {
		t.Errorf("containerEnv set AILERON_FUTURE")
	}
	var text bytes.Buffer
	if err := WritePlanText(&text, p, RuntimeInfo{Kind: "docker", Selection: "--runtime docker"}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(text.String(), "host-value") {
		t.Errorf("plan shows a resolved ${localEnv} value:\n%s", text.String())
	}
	golden(t, "plan-env.txt", normalize(text.String(), dir))
}

// TestLocalEnvNames lists the ${localEnv:...} and ${env:...} names of a
// devcontainer.json (values, keys, nested, with defaults), once each.
func TestLocalEnvNames(t *testing.T) {
	dir := writeProject(t, map[string]string{devcontainer.Path: `{
  // comments and trailing commas are JSONC
  "containerEnv": {"A": "${localEnv:ALPHA}", "${env:KEYVAR}": "x"},
  "mounts": [{"source": "${localEnv:DATA:/tmp}", "target": "/d", "type": "bind"}],
  "postCreateCommand": ["sh", "-c", "echo ${localEnv:ALPHA} ${containerEnv:PATH} ${localWorkspaceFolder}"],
}`})
	got, err := devcontainer.LocalEnvNames(dir)
	if want := []string{"ALPHA", "DATA", "KEYVAR"}; err != nil || !slices.Equal(got, want) {
		t.Errorf("LocalEnvNames = %q, %v; want %q", got, err, want)
	}
	if got, err := devcontainer.LocalEnvNames(t.TempDir()); got != nil || err != nil {
		t.Errorf("LocalEnvNames without a devcontainer = %q, %v; want none", got, err)
	}
	bad := writeProject(t, map[string]string{devcontainer.Path: `{"image": `})
	if _, err := devcontainer.LocalEnvNames(bad); err == nil || !strings.Contains(err.Error(), devcontainer.Path) {
		t.Errorf("LocalEnvNames of a broken file = %v; want an error naming it", err)
	}
}
