package runtime

import (
	"context"
	"io"
	"os"
	"os/exec"
	"reflect"
	"strings"
	"sync"
	"testing"

	"go.uber.org/zap/zaptest"
)

// fakeExec records invocations and answers through respond.
type fakeExec struct {
	mu      sync.Mutex
	calls   []Command
	envFile map[string]string // env file path → contents, read during the call
	respond func(c Command) (stdout, stderr string, err error)
}

func (f *fakeExec) exec(_ context.Context, c Command) error {
	f.mu.Lock()
	f.calls = append(f.calls, c)
	for i, a := range c.Args {
		if a == "--env-file" && i+1 < len(c.Args) {
			b, err := os.ReadFile(c.Args[i+1])
			if err != nil {
				panic(err)
			}
			st, _ := os.Stat(c.Args[i+1])
			if f.envFile == nil {
				f.envFile = map[string]string{}
			}
			f.envFile[c.Args[i+1]] = st.Mode().Perm().String() + "\n" + string(b)
		}
	}
	f.mu.Unlock()
	var out, errOut string
	var err error
	if f.respond != nil {
		out, errOut, err = f.respond(c)
	}
	if c.Stdout != nil {
		io.WriteString(c.Stdout, out)
	}
	if c.Stderr != nil {
		io.WriteString(c.Stderr, errOut)
	}
	return err
}

func (f *fakeExec) argv(i int) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[i].Path + " " + strings.Join(f.calls[i].Args, " ")
}

func lookAll(string) (string, error) { return "/usr/bin/x", nil }

func newFakeRuntime(t *testing.T, kind Kind, f *fakeExec) Runtime {
	t.Helper()
	rt, err := New(context.Background(), Config{Kind: kind, Logger: zaptest.NewLogger(t), Exec: f.exec, LookPath: lookAll})
	if err != nil {
		t.Fatalf("New(%s): %v", kind, err)
	}
	return rt
}

func TestNewRuntimeAuto(t *testing.T) {
	tests := []struct {
		name       string
		dockerInfo error
		have       map[string]bool
		wantKind   Kind
		wantWhy    string
		wantErr    string
	}{
		{"docker answers", nil, map[string]bool{"docker": true, "podman": true}, Docker, "auto: the Docker engine answered (server 20.10.24)", ""},
		{"docker down, podman present", &ExitError{Code: 1}, map[string]bool{"docker": true, "podman": true}, Podman, "auto: docker info failed: Cannot connect to the Docker daemon; using Podman", ""},
		{"no docker binary", nil, map[string]bool{"podman": true}, Podman, "auto: docker not found on PATH; using Podman", ""},
		{"nothing", &ExitError{Code: 1}, map[string]bool{"docker": true}, "", "", "docker info failed: Cannot connect to the Docker daemon, and podman is not installed (start Docker or install Podman)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeExec{respond: func(c Command) (string, string, error) {
				if tc.dockerInfo != nil {
					return "", "Cannot connect to the Docker daemon\nmore", tc.dockerInfo
				}
				return "20.10.24\n", "", nil
			}}
			look := func(name string) (string, error) {
				if tc.have[name] {
					return "/usr/bin/" + name, nil
				}
				return "", exec.ErrNotFound
			}
			rt, err := New(context.Background(), Config{Kind: Auto, Logger: zaptest.NewLogger(t), Exec: f.exec, LookPath: look})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("New err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			if rt.Kind() != tc.wantKind || rt.Selection() != tc.wantWhy {
				t.Errorf("New = %s (%q), want %s (%q)", rt.Kind(), rt.Selection(), tc.wantKind, tc.wantWhy)
			}
			if tc.have["docker"] && f.argv(0) != "docker info --format {{.ServerVersion}}" {
				t.Errorf("probe = %q, want docker info", f.argv(0))
			}
		})
	}
}

func TestNewRuntimeExplicit(t *testing.T) {
	missing := func(string) (string, error) { return "", exec.ErrNotFound }
	_, err := New(context.Background(), Config{Kind: Podman, Logger: zaptest.NewLogger(t), LookPath: missing})
	if err == nil || !strings.Contains(err.Error(), "finding podman") || !strings.Contains(err.Error(), "--runtime") {
		t.Errorf("New(podman, not installed) err = %v, want a fix naming --runtime", err)
	}
	if _, err := New(context.Background(), Config{Kind: Docker}); err == nil {
		t.Errorf("New without a Logger succeeded")
	}
	if _, err := New(context.Background(), Config{Logger: zaptest.NewLogger(t)}); err == nil {
		t.Errorf("New with the zero Kind succeeded")
	}
	f := &fakeExec{}
	rt := newFakeRuntime(t, Podman, f)
	if len(f.calls) != 0 || rt.Selection() != "--runtime podman" || rt.HostAlias() != "host.containers.internal" {
		t.Errorf("explicit podman: calls %d, selection %q, alias %q", len(f.calls), rt.Selection(), rt.HostAlias())
	}
}

func TestParseKinds(t *testing.T) {
	for _, s := range []string{"auto", "Docker", " podman "} {
		if _, err := ParseKind(s); err != nil {
			t.Errorf("ParseKind(%q): %v", s, err)
		}
	}
	if _, err := ParseKind("containerd"); err == nil || !strings.Contains(err.Error(), `use "auto", "docker" or "podman"`) {
		t.Errorf("ParseKind(containerd) err = %v", err)
	}
}

func TestBuildArgv(t *testing.T) {
	f := &fakeExec{}
	rt := newFakeRuntime(t, Docker, f)
	err := rt.Build(context.Background(), BuildRequest{
		Tag: "aileron/x:1", Dockerfile: "/p/.devcontainer/Dockerfile", Context: "/p",
		Args: map[string]string{"B": "2", "A": "x y"}, Labels: map[string]string{labelManaged: "true"},
	})
	if err != nil {
		t.Fatal(err)
	}
	c := f.calls[0]
	want := []string{"build", "--tag", "aileron/x:1", "--file", "/p/.devcontainer/Dockerfile", "--build-arg", "A=x y", "--build-arg", "B=2", "--label", "dev.aileron.managed=true", "/p"}
	if c.Path != "docker" || !reflect.DeepEqual(c.Args, want) {
		t.Errorf("build argv = %s %q, want docker %q", c.Path, c.Args, want)
	}

	f.respond = func(Command) (string, string, error) {
		return "Step 1/2 : FROM nope\n", "pull access denied for nope\n", &ExitError{Code: 1}
	}
	err = rt.Build(context.Background(), BuildRequest{Tag: "t", Dockerfile: "D", Context: "."})
	if err == nil || !strings.Contains(err.Error(), "building t with docker: exit status 1") || !strings.Contains(err.Error(), "pull access denied") {
		t.Errorf("failed build err = %v, want the status and the log tail", err)
	}
}

func TestRunArgvKeepsSecretsOutOfArgv(t *testing.T) {
	f := &fakeExec{respond: func(Command) (string, string, error) { return "", "", &ExitError{Code: 3} }}
	rt := newFakeRuntime(t, Podman, f)
	const secret = "s3cr3t-proxy-password"
	code, err := rt.Run(context.Background(), RunRequest{
		Image: "img:1", Entrypoint: "/bin/sh", Cmd: []string{"-c", "exit 3"},
		Name: "aileron-s1", Network: "aileron-net", AddHosts: map[string]string{"host.containers.internal": "10.89.0.1"},
		User: "1000:1000", Workdir: workspacePath,
		Env:    map[string]string{"HTTPS_PROXY": "http://s1:" + secret + "@10.89.0.1:3128", "A": "1"},
		Mounts: []Mount{{Source: "/p", Target: workspacePath}, {Source: "/h/tools.txt", Target: "/etc/aileron/tools.txt", ReadOnly: true}},
		Labels: map[string]string{labelManaged: "true"}, Interactive: true, TTY: true,
	})
	if err != nil || code != 3 {
		t.Fatalf("Run = %d, %v; want the container's status 3", code, err)
	}
	args := f.calls[0].Args
	joined := strings.Join(args, " ")
	if strings.Contains(joined, secret) {
		t.Fatalf("secret in argv: %q", args)
	}
	envFile := args[indexOf(args, "--env-file")+1]
	wantArgs := []string{"run", "--rm", "--name", "aileron-s1", "--label", "dev.aileron.managed=true", "--network", "aileron-net",
		"--add-host", "host.containers.internal:10.89.0.1", "--user", "1000:1000", "--workdir", workspacePath, "--entrypoint", "/bin/sh",
		"--mount", "type=bind,source=/p,target=" + workspacePath, "--mount", "type=bind,source=/h/tools.txt,target=/etc/aileron/tools.txt,readonly",
		"--env-file", envFile, "--interactive", "--tty", "img:1", "-c", "exit 3"}
	if !reflect.DeepEqual(args, wantArgs) {
		t.Errorf("run argv =\n%q\nwant\n%q", args, wantArgs)
	}
	if got, want := f.envFile[envFile], "-rw-------\nA=1\nHTTPS_PROXY=http://s1:"+secret+"@10.89.0.1:3128\n"; got != want {
		t.Errorf("env file = %q, want %q", got, want)
	}
	if _, err := os.Stat(envFile); !os.IsNotExist(err) {
		t.Errorf("env file %s still exists after Run (stat err %v)", envFile, err)
	}
}

func TestRunRejectsBadInput(t *testing.T) {
	f := &fakeExec{}
	rt := newFakeRuntime(t, Docker, f)
	for name, req := range map[string]RunRequest{
		"comma in mount":     {Image: "i", Mounts: []Mount{{Source: "/a,b", Target: "/w"}}},
		"bad env name":       {Image: "i", Env: map[string]string{"A=B": "x"}},
		"newline in env":     {Image: "i", Env: map[string]string{"A": "x\ny"}},
		"no image":           {},
		"empty mount target": {Image: "i", Mounts: []Mount{{Source: "/a"}}},
	} {
		if _, err := rt.Run(context.Background(), req); err == nil {
			t.Errorf("Run(%s) succeeded, want an error", name)
		}
	}
	if len(f.calls) != 0 {
		t.Errorf("the CLI ran %d times for rejected requests", len(f.calls))
	}
}

func TestImageExists(t *testing.T) {
	tests := []struct {
		kind    Kind
		stderr  string
		err     error
		want    bool
		wantErr bool
		argv    string
	}{
		{Docker, "", nil, true, false, "docker image inspect --format {{.Id}} a:1"},
		{Docker, "Error: No such image: a:1", &ExitError{Code: 1}, false, false, ""},
		{Docker, "Cannot connect to the Docker daemon", &ExitError{Code: 1}, false, true, ""},
		{Podman, "", nil, true, false, "podman image exists a:1"},
		{Podman, "", &ExitError{Code: 1}, false, false, ""},
		{Podman, "Error: database is locked", &ExitError{Code: 125}, false, true, ""},
	}
	for _, tc := range tests {
		f := &fakeExec{respond: func(Command) (string, string, error) { return "", tc.stderr, tc.err }}
		rt := newFakeRuntime(t, tc.kind, f)
		got, err := rt.ImageExists(context.Background(), "a:1")
		if got != tc.want || (err != nil) != tc.wantErr {
			t.Errorf("%s ImageExists with %q = %v, %v; want %v, err %v", tc.kind, tc.stderr, got, err, tc.want, tc.wantErr)
		}
		if tc.argv != "" && f.argv(0) != tc.argv {
			t.Errorf("argv = %q, want %q", f.argv(0), tc.argv)
		}
	}
}

func TestNetworkCreate(t *testing.T) {
	const dockerInspect = `[{"Name":"n","IPAM":{"Driver":"default","Config":[{"Subnet":"fd00::/64","Gateway":"fd00::1"},{"Subnet":"172.18.0.0/16","Gateway":"172.18.0.1"}]}}]`
	const podmanInspect = `[{"name":"n","driver":"bridge","network_interface":"podman1","subnets":[{"subnet":"10.89.0.0/24","gateway":"10.89.0.1"}],"internal":true,"dns_enabled":false}]`
	tests := []struct {
		kind       Kind
		disableDNS bool
		inspect    string
		wantArgv   string
		want       Network
	}{
		{Docker, true, dockerInspect, "docker network create --internal --label dev.aileron.managed=true n", Network{"n", "172.18.0.0/16", "172.18.0.1"}},
		{Podman, false, podmanInspect, "podman network create --internal --label dev.aileron.managed=true n", Network{"n", "10.89.0.0/24", "10.89.0.1"}},
	}
	for _, tc := range tests {
		f := &fakeExec{respond: func(c Command) (string, string, error) {
			if c.Args[1] == "inspect" {
				return tc.inspect, "", nil
			}
			return "", "", nil
		}}
		rt := newFakeRuntime(t, tc.kind, f)
		n, err := rt.NetworkCreate(context.Background(), NetworkRequest{Name: "n", Internal: true, DisableDNS: tc.disableDNS, Labels: map[string]string{labelManaged: "true"}})
		if err != nil {
			t.Fatalf("%s NetworkCreate: %v", tc.kind, err)
		}
		if f.argv(0) != tc.wantArgv || n != tc.want {
			t.Errorf("%s NetworkCreate argv %q = %+v; want %q = %+v", tc.kind, f.argv(0), n, tc.wantArgv, tc.want)
		}
	}

	// Podman with DisableDNS gets an explicit subnet: its own allocation
	// would leave the network without a gateway on the host.
	f := &fakeExec{respond: func(c Command) (string, string, error) {
		switch {
		case c.Args[1] == "ls":
			return `[{"name":"podman","subnets":[{"subnet":"10.88.0.0/16","gateway":"10.88.0.1"}]},{"name":"x","subnets":[{"subnet":"10.89.1.0/24"}]}]`, "", nil
		case c.Args[1] == "inspect":
			return `[{"name":"n","subnets":[{"subnet":"10.89.3.0/24","gateway":"10.89.3.1"}]}]`, "", nil
		case indexOf(c.Args, "10.89.2.0/24") >= 0:
			return "", "Error: subnet 10.89.2.0/24 is already used on the host or by another config", &ExitError{Code: 125}
		}
		return "", "", nil
	}}
	rt := newFakeRuntime(t, Podman, f)
	n, err := rt.NetworkCreate(context.Background(), NetworkRequest{Name: "n", Internal: true, DisableDNS: true})
	if err != nil {
		t.Fatalf("podman NetworkCreate: %v", err)
	}
	wantCalls := []string{
		"podman network ls --format json",
		"podman network create --internal --disable-dns --subnet 10.89.2.0/24 --gateway 10.89.2.1 n",
		"podman network create --internal --disable-dns --subnet 10.89.3.0/24 --gateway 10.89.3.1 n",
		"podman network inspect n",
	}
	for i, w := range wantCalls {
		if i >= len(f.calls) || f.argv(i) != w {
			t.Fatalf("call %d = %q, want %q (calls %d)", i, f.argv(min(i, len(f.calls)-1)), w, len(f.calls))
		}
	}
	if n != (Network{"n", "10.89.3.0/24", "10.89.3.1"}) {
		t.Errorf("network = %+v", n)
	}
	if _, err := rt.NetworkCreate(context.Background(), NetworkRequest{Name: "n", Subnet: "10.0.0.0/31"}); err == nil {
		t.Errorf("NetworkCreate with a /31 succeeded")
	}

	// An unparsable inspect removes the network again.
	f = &fakeExec{respond: func(c Command) (string, string, error) {
		if c.Args[1] == "inspect" {
			return `[{"Name":"n","IPAM":{"Config":[]}}]`, "", nil
		}
		return "", "", nil
	}}
	rt = newFakeRuntime(t, Docker, f)
	if _, err := rt.NetworkCreate(context.Background(), NetworkRequest{Name: "n"}); err == nil {
		t.Fatal("NetworkCreate with no IPv4 gateway succeeded")
	}
	if last := f.argv(len(f.calls) - 1); last != "docker network rm n" {
		t.Errorf("last call = %q, want the network removed", last)
	}
}

func TestCLIErrorMessage(t *testing.T) {
	for _, tc := range []struct{ stderr, want string }{
		{"Error: permission denied\nmore\n", "docker rm: exit status 1: Error: permission denied"},
		{"", "docker rm: exit status 1"},
	} {
		err := &cliError{argv0: "docker rm", err: &ExitError{Code: 1}, stderr: tc.stderr}
		if got := err.Error(); got != tc.want {
			t.Errorf("cliError with stderr %q = %q, want %q", tc.stderr, got, tc.want)
		}
	}
}

func TestContainerRemoveIgnoresMissing(t *testing.T) {
	f := &fakeExec{respond: func(Command) (string, string, error) {
		return "", "Error: No such container: c1", &ExitError{Code: 1}
	}}
	rt := newFakeRuntime(t, Docker, f)
	if err := rt.ContainerRemove(context.Background(), "c1"); err != nil {
		t.Errorf("ContainerRemove(missing) = %v, want nil", err)
	}
	f.respond = func(Command) (string, string, error) { return "", "permission denied", &ExitError{Code: 1} }
	if err := rt.ContainerRemove(context.Background(), "c1"); err == nil || !strings.Contains(err.Error(), "permission denied") {
		t.Errorf("ContainerRemove error = %v, want the CLI's stderr", err)
	}
}

// containerMessages are what the runtimes print about a container that is
// gone or stopped. Observed with Docker 20.10.24 and Podman 4.3.1 (rm,
// exec and stop of a missing container, exec in a stopped one, an rm
// racing another), except the OCI runtime's exec race, taken from the
// containerd and runc binaries.
var containerWordings = []struct {
	name, stderr  string
	gone, stopped bool
}{
	{"docker missing", "Error response from daemon: No such container: nosuch", true, false},
	{"docker kill missing", "Error response from daemon: Cannot kill container: nosuch: No such container: nosuch", true, false},
	{"docker removal in progress", "Error response from daemon: removal of container aplx-rm is already in progress", true, false},
	{"podman missing", `Error: no container with name or ID "nosuch" found: no such container`, true, false},
	{"docker exec stopped", "Error response from daemon: Container c7d54f921204756f83c28d19f4e538c038036f302cad667b7d7960b131bdf4cf is not running", false, true},
	{"podman exec stopped", "Error: can only create exec sessions on running containers: container state improper", false, true},
	{"containerd exec race", "Error response from daemon: cannot exec in a stopped state: unknown", false, true},
	{"runc exec race", "OCI runtime exec failed: exec failed: cannot exec in a stopped container: unknown", false, true},
	{"docker rm racing the exit", "Error response from daemon: Could not kill running container c7d5, cannot remove - Container c7d5 is not running", false, true},
	{"permission", "permission denied while trying to connect to the Docker daemon socket", false, false},
	{"image", "Error: No such image: nosuch", false, false},
	{"empty", "", false, false},
}

// TestContainerGoneMessages pins the runtimes' wording for a container
// that is gone (removal succeeded, sandbox calls answer SANDBOX_GONE) or
// stopped (only the latter).
func TestContainerGoneMessages(t *testing.T) {
	for _, tc := range containerWordings {
		t.Run(tc.name, func(t *testing.T) {
			state := ContainerStateOf(tc.stderr)
			if got := state == ContainerGone; got != tc.gone {
				t.Errorf("ContainerStateOf(%q) = %s, want gone %v", tc.stderr, state, tc.gone)
			}
			if got := state == ContainerStopped; got != tc.stopped {
				t.Errorf("ContainerStateOf(%q) = %s, want stopped %v", tc.stderr, state, tc.stopped)
			}
		})
	}
}

// TestContainerRemoveGone: ContainerRemove succeeds exactly when the
// runtime says the container is gone, with either runtime's wording, and
// not when it is merely stopped (then it is still there).
func TestContainerRemoveGone(t *testing.T) {
	for _, tc := range containerWordings {
		if tc.stderr == "" {
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			for _, kind := range []Kind{Docker, Podman} {
				f := &fakeExec{respond: func(Command) (string, string, error) { return "", tc.stderr, &ExitError{Code: 1} }}
				err := newFakeRuntime(t, kind, f).ContainerRemove(context.Background(), "c1")
				if (err == nil) != tc.gone {
					t.Errorf("%s: ContainerRemove with stderr %q = %v, want success %v", kind, tc.stderr, err, tc.gone)
				}
			}
		})
	}
}

func TestExecCommandExitCode(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	err = ExecCommand(context.Background(), Command{Path: sh, Args: []string{"-c", "exit 7"}})
	if code, ok := ExitCode(err); !ok || code != 7 {
		t.Errorf("ExitCode(%v) = %d, %v; want 7", err, code, ok)
	}
	err = ExecCommand(context.Background(), Command{Path: "/nonexistent/bin"})
	if _, ok := ExitCode(err); ok || err == nil {
		t.Errorf("ExecCommand(missing binary) = %v, want a non-exit error", err)
	}
	if err := ExecCommand(context.Background(), Command{Path: sh, Args: []string{"-c", "exit 0"}}); err != nil {
		t.Errorf("exit 0 returned %v", err)
	}
}

func indexOf(list []string, s string) int {
	for i, x := range list {
		if x == s {
			return i
		}
	}
	return -1
}

func TestContainerRemoveDoesNotWaitOnPodman(t *testing.T) {
	for _, tc := range []struct {
		kind Kind
		want string
	}{
		{Docker, "rm --force c1"},
		{Podman, "rm --force --time 0 c1"},
	} {
		f := &fakeExec{}
		rt := newFakeRuntime(t, tc.kind, f)
		if err := rt.ContainerRemove(context.Background(), "c1"); err != nil {
			t.Fatalf("%s: ContainerRemove = %v", tc.kind, err)
		}
		if got := allArgv(f); !strings.Contains(got, tc.want) {
			t.Errorf("%s: argv = %q, want %q", tc.kind, got, tc.want)
		}
	}
}

// TestNetworkRemoveGone: removing a network that no longer exists succeeds
// on both runtimes (teardown would otherwise retry until its timeout);
// other failures still fail.
func TestNetworkRemoveGone(t *testing.T) {
	for kind, stderr := range map[Kind]string{
		Docker: "Error response from daemon: network aileron-x not found\n",
		Podman: "Error: unable to find network with name or ID aileron-x: network not found\n",
	} {
		f := &fakeExec{respond: func(Command) (string, string, error) { return "", stderr, &ExitError{Code: 1} }}
		if err := newFakeRuntime(t, kind, f).NetworkRemove(context.Background(), "aileron-x"); err != nil {
			t.Errorf("%s: NetworkRemove of a gone network = %v, want nil", kind, err)
		}
		f.respond = func(Command) (string, string, error) {
			return "", "Error response from daemon: error while removing network: network aileron-x has active endpoints\n", &ExitError{Code: 1}
		}
		if err := newFakeRuntime(t, kind, f).NetworkRemove(context.Background(), "aileron-x"); err == nil {
			t.Errorf("%s: NetworkRemove with active endpoints = nil, want the error", kind)
		}
	}
}

// labelManaged and workspacePath are the launcher's label and workspace
// path, as the requests it builds carry them.
const (
	labelManaged  = "dev.aileron.managed"
	workspacePath = "/home/agent/workspace"
)

// allArgv is every call's argv, one a line.
func allArgv(f *fakeExec) string {
	var b strings.Builder
	for i := range f.calls {
		b.WriteString(f.argv(i) + "\n")
	}
	return b.String()
}
