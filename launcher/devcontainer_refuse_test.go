package launcher

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/aileron-dev/aileron-proxy/launcher/devcontainer"
	"github.com/aileron-dev/aileron-proxy/launcher/runtime"
	"go.uber.org/zap/zaptest"
)

// refusedCases are devcontainers the sandbox refuses, one key each; the
// plan golden of each is testdata/plan-refused-<name>.txt.golden.
var refusedCases = []struct {
	name, json string
	// want are substrings of the refusal error.
	want []string
}{
	{"privileged", `"privileged": true`, []string{":3:17: privileged: refused: the sandbox never runs privileged"}},
	{"capAdd", `"capAdd": ["SYS_PTRACE", "NET_ADMIN"]`, []string{"capAdd: refused: capability \"SYS_PTRACE\"", "capAdd: refused: capability \"NET_ADMIN\""}},
	{"securityOpt", `"securityOpt": ["no-new-privileges", "seccomp=unconfined"]`, []string{`securityOpt: refused: "seccomp=unconfined" could weaken isolation`}},
	{"runArgs", `"runArgs": ["--memory", "2g", "--network=host", "-v", "/:/host", "--label", "dev.aileron.session=x"]`, []string{
		`runArgs: refused: "--network" is not on the allow-list`, `runArgs: refused: "-v" is not on the allow-list`,
		`runArgs: refused: "/:/host" is not a flag`, `label "dev.aileron.session=x" is reserved`}},
	{"runArgsName", `"runArgs": ["--name=mine"]`, []string{`runArgs: refused: "--name" is not on the allow-list`}},
	{"forwardPorts", `"forwardPorts": [3000]`, []string{"forwardPorts: refused: the sandbox accepts no inbound connections"}},
	{"appPort", `"appPort": "8080:80"`, []string{"appPort: refused: the sandbox accepts no inbound connections"}},
	{"dockerComposeFile", `"dockerComposeFile": "compose.yml", "service": "app"`, []string{"dockerComposeFile: refused: Docker Compose devcontainers are not supported yet"}},
}

func refusedProject(t *testing.T, keys string) string {
	t.Helper()
	return writeProject(t, map[string]string{devcontainer.Path: "{\n  \"image\": \"debian:bookworm-slim\",\n  " + keys + "\n}\n"})
}

func TestRefusedKeys(t *testing.T) {
	for _, tc := range refusedCases {
		t.Run(tc.name, func(t *testing.T) {
			dir := refusedProject(t, tc.json)
			p, err := NewPlan(dir, PlanOptions{})
			if err != nil {
				t.Fatalf("NewPlan: %v (a refused key is shown by the plan, not a parse error)", err)
			}
			refusal := p.Refusal()
			if refusal == nil {
				t.Fatalf("Refusal() = nil for %s, want a refusal", tc.json)
			}
			var ce *devcontainer.ConfigError
			if !errors.As(refusal, &ce) {
				t.Fatalf("Refusal() = %T, want *ConfigError", refusal)
			}
			for _, w := range tc.want {
				if !strings.Contains(refusal.Error(), w) {
					t.Errorf("Refusal() = %q, want it to contain %q", refusal, w)
				}
			}
			// Nothing is prepared for a refused plan: Prepare stops before
			// touching the runtime (nil here would panic).
			if _, err := Prepare(context.Background(), nil, p, PrepareOptions{Policy: BuildAuto}); err == nil || err.Error() != refusal.Error() {
				t.Errorf("Prepare error = %v, want the refusal", err)
			}
			cfg := LaunchConfig{Logger: zaptest.NewLogger(t), Runtime: &fakeRuntime{}, Plan: p, BuildPolicy: BuildAuto, Sessions: &fakeSessions{},
				Daemon: DaemonEndpoints{ProxyAddr: "127.0.0.1:1", APIURL: "http://127.0.0.1:2"}, GuardBinary: "/bin/true", Agent: []string{"sh"}}
			if err := cfg.validate(); err == nil || err.Error() != refusal.Error() {
				t.Errorf("LaunchConfig.validate error = %v, want the refusal", err)
			}
			var text bytes.Buffer
			if err := WritePlanText(&text, p, RuntimeInfo{Kind: "docker", Selection: "--runtime docker"}); err != nil {
				t.Fatal(err)
			}
			golden(t, "plan-refused-"+tc.name+".txt", normalize(text.String(), dir))
		})
	}
}

func TestAcceptedHarmlessForms(t *testing.T) {
	dir := refusedProject(t, `"privileged": false, "capAdd": [], "securityOpt": ["no-new-privileges:true"], "forwardPorts": [], "init": true,
  "runArgs": ["--memory", "2g", "--cpus=1.5", "--pids-limit", "256", "--shm-size=1g", "--ulimit", "nofile=1024:2048", "-l", "team=ml", "--hostname=box"]`)
	p, err := NewPlan(dir, PlanOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Refusal(); err != nil {
		t.Fatalf("Refusal() = %v, want nil for harmless settings", err)
	}
	want := []string{"--init", "--memory=2g", "--cpus=1.5", "--pids-limit=256", "--shm-size=1g", "--ulimit=nofile=1024:2048", "--label=team=ml", "--hostname=box"}
	if !reflect.DeepEqual(p.RunArgs, want) {
		t.Errorf("RunArgs = %q, want %q", p.RunArgs, want)
	}
	var text, js bytes.Buffer
	if err := WritePlanText(&text, p, RuntimeInfo{Kind: "docker", Selection: "--runtime docker"}); err != nil {
		t.Fatal(err)
	}
	if err := WritePlanJSON(&js, p, RuntimeInfo{Kind: "docker", Selection: "--runtime docker"}); err != nil {
		t.Fatal(err)
	}
	golden(t, "plan-runargs.txt", normalize(text.String(), dir))
	golden(t, "plan-runargs.json", normalize(js.String(), dir))
	f := &fakeExec{}
	if _, err := newFakeRuntime(t, runtime.Docker, f).Run(context.Background(), runtime.RunRequest{Image: "img", ExtraArgs: p.RunArgs, Cmd: []string{"sh"}}); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(f.calls[0].Args, " "); !strings.HasSuffix(got, strings.Join(want, " ")+" img sh") {
		t.Errorf("run argv = %q, want the runArgs just before the image", got)
	}
}

func TestRunArgsBadValues(t *testing.T) {
	for _, tc := range []struct{ args, want string }{
		{`["--memory"]`, `"--memory" needs a value`},
		{`["--init=yes"]`, `"--init=yes" takes no value`},
		{`"--memory=1g"`, "runArgs: must be an array of strings"},
		{`[1]`, "runArgs: must be a string"},
	} {
		_, err := devcontainer.Parse("dc.json", []byte(`{"image": "x", "runArgs": `+tc.args+`}`))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseDevContainer(runArgs %s) error = %v, want %q", tc.args, err, tc.want)
		}
	}
}

func TestBuildTargetCacheFromOptions(t *testing.T) {
	dir := writeProject(t, map[string]string{
		devcontainer.Path: `{"build": {"dockerfile": "Dockerfile", "target": "dev", "cacheFrom": "ghcr.io/acme/cache:1",
  "args": {"V": "${localEnv:V:7}"}, "options": ["--pull", "--label", "team=ml", "--platform=linux/amd64"]}}`,
		".devcontainer/Dockerfile": "FROM debian:bookworm-slim AS dev\n",
	})
	p, err := NewPlan(dir, PlanOptions{LocalEnv: func(string) (string, bool) { return "", false }})
	if err != nil {
		t.Fatal(err)
	}
	b := p.Build
	if b.Target != "dev" || !reflect.DeepEqual(b.CacheFrom, []string{"ghcr.io/acme/cache:1"}) || b.Args["V"] != "7" ||
		!reflect.DeepEqual(b.Options, []string{"--pull", "--label=team=ml", "--platform=linux/amd64"}) {
		t.Errorf("build = %+v", b)
	}
	var text bytes.Buffer
	if err := WritePlanText(&text, p, RuntimeInfo{Kind: "docker", Selection: "--runtime docker"}); err != nil {
		t.Fatal(err)
	}
	golden(t, "plan-build.txt", normalize(text.String(), dir))
	f := &fakeExec{}
	rt := newFakeRuntime(t, runtime.Docker, f)
	if _, err := Prepare(context.Background(), rt, p, PrepareOptions{Policy: BuildAlways}); err != nil {
		t.Fatal(err)
	}
	var build string
	for i := range f.calls {
		if a := f.argv(i); strings.Contains(a, " build ") {
			build = a
		}
	}
	if !strings.Contains(build, "--target dev --cache-from ghcr.io/acme/cache:1 --pull --label=team=ml --platform=linux/amd64 "+filepath.Join(dir, ".devcontainer")) {
		t.Errorf("build argv = %q", build)
	}

	dir = writeProject(t, map[string]string{
		devcontainer.Path:          "{\n\"build\": {\"dockerfile\": \"Dockerfile\",\n \"options\": [\"--network=host\", \"--ssh\", \"default\", \"--secret\", \"id=x,src=/root/.aws/credentials\"]}}",
		".devcontainer/Dockerfile": "FROM debian:bookworm-slim\n",
	})
	p, err = NewPlan(dir, PlanOptions{})
	if err != nil {
		t.Fatal(err)
	}
	refusal := p.Refusal()
	for _, w := range []string{`:3:13: build.options: refused: "--network" is not on the allow-list (the build could reach host files, credentials or networks)`, `"--ssh" is not on the allow-list`, `"--secret" is not on the allow-list`} {
		if refusal == nil || !strings.Contains(refusal.Error(), w) {
			t.Errorf("Refusal() = %v, want %q", refusal, w)
		}
	}
}

// TestPlanUsersGolden: remoteUser wins over containerUser, and
// updateRemoteUserUID false is shown.
func TestPlanUsersGolden(t *testing.T) {
	for name, dc := range map[string]string{
		"users":         `{"image": "x", "containerUser": "root", "remoteUser": "dev"}`,
		"users-noremap": `{"image": "x", "containerUser": "builder", "updateRemoteUserUID": false}`,
	} {
		dir := writeProject(t, map[string]string{devcontainer.Path: dc})
		p, err := NewPlan(dir, PlanOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var text bytes.Buffer
		if err := WritePlanText(&text, p, RuntimeInfo{Kind: "docker", Selection: "--runtime docker"}); err != nil {
			t.Fatal(err)
		}
		golden(t, "plan-"+name+".txt", normalize(text.String(), dir))
	}
}

// TestRunArgsNotSubstituted: runArgs are used as written, so a
// ${localEnv:...} value can neither carry a reserved dev.aileron.* label
// past the check nor reach the runtime's argv.
func TestRunArgsNotSubstituted(t *testing.T) {
	dir := refusedProject(t, `"runArgs": ["--label=${localEnv:RUNARG_LABEL}", "--hostname=${localEnv:RUNARG_HOST:box}"]`)
	env := func(k string) (string, bool) {
		if k == "RUNARG_LABEL" {
			return "dev.aileron.managed=true", true
		}
		return "", false
	}
	p, err := NewPlan(dir, PlanOptions{LocalEnv: env})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"--label=${localEnv:RUNARG_LABEL}", "--hostname=${localEnv:RUNARG_HOST:box}"}; !reflect.DeepEqual(p.RunArgs, want) {
		t.Errorf("RunArgs = %q, want them as written %q", p.RunArgs, want)
	}
}
