package launcher

import (
	"bytes"
	"context"
	"errors"
	"github.com/aileron-dev/aileron-proxy/launcher/devcontainer"
	"github.com/aileron-dev/aileron-proxy/launcher/runtime"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
)

// mountRulesFor builds rules rooted in a fake home under dir, with a fake
// runtime socket, so the tests never depend on the host's.
func mountRulesFor(t *testing.T, dir string) *devcontainer.MountRules {
	t.Helper()
	home := filepath.Join(dir, "home")
	for _, d := range []string{".ssh", ".aileron", "run", "code/data"} {
		if err := os.MkdirAll(filepath.Join(home, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	sock := filepath.Join(home, "run", "docker.sock")
	if err := os.WriteFile(sock, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(home, ".ssh"), filepath.Join(home, "code", "sneaky")); err != nil {
		t.Fatal(err)
	}
	return &devcontainer.MountRules{AileronHome: filepath.Join(home, ".aileron"), Home: home, Sockets: []string{sock}}
}

func TestMountsPlanned(t *testing.T) {
	dir := writeProject(t, map[string]string{
		devcontainer.Path: `{
  "image": "debian:bookworm-slim",
  "workspaceMount": "source=${localWorkspaceFolder},target=/src/${localWorkspaceFolderBasename},type=bind,consistency=cached",
  "workspaceFolder": "/src/${localWorkspaceFolderBasename}",
  "mounts": [
    "source=${localEnv:DATA_DIR},target=/data,type=bind,readonly",
    {"type": "volume", "source": "cache-${devcontainerId}", "target": "${containerWorkspaceFolder}/node_modules"},
    {"type": "volume", "target": "/scratch"},
  ],
}`,
		"data/file.txt": "x",
	})
	// ${localEnv:...} comes from PlanOptions.LocalEnv (the launching
	// process), not this process's environment.
	local := func(k string) (string, bool) { return map[string]string{"DATA_DIR": dir + "/data"}[k], k == "DATA_DIR" }
	p, err := NewPlan(dir, PlanOptions{MountRules: mountRulesFor(t, t.TempDir()), LocalEnv: local})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Refusal(); err != nil {
		t.Fatalf("Refusal() = %v", err)
	}
	if want := (runtime.Mount{Source: dir, Target: "/src/My Project"}); p.Workspace != want || p.WorkspaceFolder != "/src/My Project" {
		t.Errorf("workspace = %+v at %q, want %+v", p.Workspace, p.WorkspaceFolder, want)
	}
	want := []runtime.Mount{
		{Source: filepath.Join(dir, "data"), Target: "/data", ReadOnly: true},
		{Source: "cache-" + p.DevContainerID, Target: "/src/My Project/node_modules", Volume: true},
		{Target: "/scratch", Volume: true},
	}
	if !reflect.DeepEqual(p.Mounts, want) {
		t.Errorf("Mounts = %+v\nwant %+v", p.Mounts, want)
	}
	var text bytes.Buffer
	if err := WritePlanText(&text, p, RuntimeInfo{Kind: "docker", Selection: "--runtime docker"}); err != nil {
		t.Fatal(err)
	}
	golden(t, "plan-mounts.txt", regexp.MustCompile(`cache-[0-9a-v]{52}`).ReplaceAllString(normalize(text.String(), dir), "cache-<id>"))
	f := &fakeExec{}
	if _, err := newFakeRuntime(t, runtime.Docker, f).Run(context.Background(), runtime.RunRequest{Image: "img", Mounts: p.Mounts}); err != nil {
		t.Fatal(err)
	}
	got := strings.Join(f.calls[0].Args, " ")
	for _, w := range []string{"--mount type=bind,source=" + filepath.Join(dir, "data") + ",target=/data,readonly", "--mount type=volume,source=cache-", "--mount type=volume,target=/scratch"} {
		if !strings.Contains(got, w) {
			t.Errorf("run argv = %q, want %q", got, w)
		}
	}
}

func TestMountsRefused(t *testing.T) {
	root := t.TempDir()
	rules := mountRulesFor(t, root)
	home := rules.Home
	tests := []struct{ name, mount, want string }{
		{"root", `"source=/,target=/host,type=bind"`, `the host's root directory "/" may not be mounted`},
		{"etc", `{"source": "/etc", "target": "/hostetc", "type": "bind"}`, `is under /etc`},
		{"etc file", `"source=/etc/passwd,target=/p,type=bind"`, `is under /etc`},
		{"socket", `"source=` + home + `/run/docker.sock,target=/var/run/docker.sock,type=bind"`, "exposes the container runtime socket"},
		{"socket dir", `"source=` + home + `/run,target=/r,type=bind"`, "exposes the container runtime socket"},
		{"aileron home", `"source=` + home + `/.aileron,target=/a,type=bind"`, "exposes $AILERON_HOME"},
		{"ssh", `"source=` + home + `/.ssh,target=/s,type=bind"`, "exposes the credential file ~/.ssh"},
		{"symlink to ssh", `"source=` + home + `/code/sneaky,target=/s,type=bind"`, "exposes the credential file ~/.ssh"},
		{"home", `"source=` + home + `,target=/h,type=bind"`, "exposes"},
		{"reserved target", `"source=` + home + `/code/data,target=/etc/aileron/ca.pem,type=bind"`, `target "/etc/aileron/ca.pem" is where launch mounts /etc/aileron`},
		{"workspace target", `"source=` + home + `/code/data,target=` + WorkspacePath + `,type=bind"`, "would replace the project's mount"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := writeProject(t, map[string]string{devcontainer.Path: "{\n  \"image\": \"x\",\n  \"mounts\": [" + tc.mount + "]\n}"})
			p, err := NewPlan(dir, PlanOptions{MountRules: rules})
			if err != nil {
				t.Fatal(err)
			}
			refusal := p.Refusal()
			if refusal == nil || !strings.Contains(refusal.Error(), ":3:14: mounts: refused: ") || !strings.Contains(refusal.Error(), tc.want) {
				t.Errorf("Refusal() = %v, want mounts refused at 3:14 with %q", refusal, tc.want)
			}
			if len(p.Mounts) != 0 {
				t.Errorf("Mounts = %+v, want the refused mount left out", p.Mounts)
			}
		})
	}
}

func TestMountErrors(t *testing.T) {
	rules := mountRulesFor(t, t.TempDir())
	for _, tc := range []struct{ mounts, want string }{
		{`["type=bind,target=/x"]`, "a bind mount needs a source"},
		{`["source=relative,target=/x,type=bind"]`, `bind source "relative" must be an absolute host path`},
		{`["source=/nonexistent-aileron,target=/x,type=bind"]`, `bind source "/nonexistent-aileron"`},
		{`["source=v,target=rel,type=volume"]`, `target "rel" must be an absolute path`},
		{`["source=a/b,target=/x,type=volume"]`, "must be a volume name"},
		{`["type=tmpfs,target=/x"]`, `mount type "tmpfs" is not supported`},
		{`["source=/tmp,target=/x,bind-propagation=shared"]`, `mount option "bind-propagation" is not supported`},
		{`[{"type": "bind", "source": "/tmp", "target": "/x", "propagation": "shared"}]`, `mount key "propagation" is not supported`},
		{`"source=/tmp,target=/x"`, "mounts: must be an array"},
	} {
		dir := writeProject(t, map[string]string{devcontainer.Path: `{"image": "x", "mounts": ` + tc.mounts + `}`})
		_, err := NewPlan(dir, PlanOptions{MountRules: rules})
		var ce *devcontainer.ConfigError
		if !errors.As(err, &ce) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewPlan(mounts %s) error = %v, want a *ConfigError with %q", tc.mounts, err, tc.want)
		}
	}
}
