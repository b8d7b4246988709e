package runtime

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"
)

// RuntimeKind names a container runtime. The zero value is invalid.
type Kind string

// Runtime kinds accepted by --runtime and --sandbox.
const (
	Auto   Kind = "auto" // Docker when its engine answers, else Podman
	Docker Kind = "docker"
	Podman Kind = "podman"
)

// String returns the flag spelling.
func (k Kind) String() string { return string(k) }

// ParseRuntimeKind parses "auto", "docker" or "podman".
func ParseKind(s string) (Kind, error) {
	switch k := Kind(strings.ToLower(strings.TrimSpace(s))); k {
	case Auto, Docker, Podman:
		return k, nil
	}
	return "", fmt.Errorf("unknown container runtime %q; use \"auto\", \"docker\" or \"podman\"", s)
}

// Command is one invocation of a runtime CLI.
type Command struct {
	// Path is the binary ("docker", "podman" or a path).
	Path string
	// Args excludes Path. Never carries secret values.
	Args []string
	// Env holds NAME=VALUE entries added to the CLI's own environment
	// for this command only; nil adds none.
	Env []string
	// Stdin, Stdout and Stderr are connected to the process; nil discards.
	Stdin          io.Reader
	Stdout, Stderr io.Writer
}

// ExitError is returned by an Executor when the command ran and exited
// non-zero.
type ExitError struct {
	// Code is the exit status.
	Code int
}

// Error is "exit status N".
func (e *ExitError) Error() string { return fmt.Sprintf("exit status %d", e.Code) }

// ExitCode returns the exit status carried by err (an *ExitError anywhere
// in its chain) and whether there was one.
func ExitCode(err error) (int, bool) {
	var ee *ExitError
	if errors.As(err, &ee) {
		return ee.Code, true
	}
	return 0, false
}

// Executor runs a Command to completion: nil for exit status 0, an
// *ExitError for another status, any other error when it could not run.
type Executor func(ctx context.Context, c Command) error

// ExecCommand is the default Executor: os/exec, no shell. When ctx ends the
// process gets SIGTERM (which the docker and podman CLIs forward to a
// running container), then SIGKILL 10s later.
func ExecCommand(ctx context.Context, c Command) error {
	return exitError(newCmd(ctx, c).Run())
}

// newCmd prepares c as ExecCommand runs it: SIGTERM when ctx ends, SIGKILL
// 10s later.
func newCmd(ctx context.Context, c Command) *exec.Cmd {
	cmd := exec.CommandContext(ctx, c.Path, c.Args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = c.Stdin, c.Stdout, c.Stderr
	if len(c.Env) > 0 {
		cmd.Env = append(os.Environ(), c.Env...)
	}
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 10 * time.Second
	return cmd
}

// exitError turns the error of a process that exited into an *ExitError.
func exitError(err error) error {
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.Exited() {
		return &ExitError{Code: ee.ExitCode()}
	}
	return err
}

// Mount is a bind mount of a host path into the container.
type Mount struct {
	Source   string `json:"source,omitempty"`
	Target   string `json:"target"`
	ReadOnly bool   `json:"readonly,omitempty"`
	// Volume makes Source a named volume (empty: anonymous), not a host
	// path.
	Volume bool `json:"volume,omitempty"`
}

// BuildRequest is one image build.
type BuildRequest struct {
	// Tag names the image; Dockerfile is a file path; Context a directory.
	Tag, Dockerfile, Context string
	// Args become --build-arg NAME=VALUE (build args are not secret).
	Args map[string]string
	// Labels are set on the image.
	Labels map[string]string
	// Network is the build containers' network ("" = the runtime default,
	// which must reach the package mirrors the Dockerfile uses).
	Network string
	// Target is the stage to build (--target); empty means the last.
	Target string
	// CacheFrom are --cache-from images; Options are extra flags from an
	// allow-list (devcontainer build.options), placed before the context.
	CacheFrom, Options []string
	// Output receives the build log; nil keeps the tail for the error.
	Output io.Writer
}

// RunRequest is one foreground container run.
type RunRequest struct {
	Image string
	// Entrypoint overrides the image's; empty keeps it.
	Entrypoint string
	// Cmd is the command (after the image), passed as argv.
	Cmd []string
	// Name is the container name; empty lets the runtime pick.
	Name string
	// Network is "none", a network name, or empty for the default.
	Network string
	// AddHosts maps host names to IPs in the container's /etc/hosts.
	AddHosts map[string]string
	// User and Workdir override the image's when set.
	User, Workdir string
	// Env is the container environment. Values travel in a 0600 env file
	// that is removed when Run returns, never in argv.
	Env map[string]string
	// Mounts are bind mounts; paths may not contain ',' or newlines.
	Mounts []Mount
	// Labels are set on the container.
	Labels map[string]string
	// Interactive keeps stdin open (-i); TTY allocates a terminal (-t).
	Interactive, TTY bool
	// Keep, when true, leaves the container after it exits (no --rm).
	Keep bool
	// Detach starts the container in the background (-d): Run returns once
	// it started, with status 0.
	Detach bool
	// DropAllCaps drops every capability (--cap-drop ALL); CapAdd then
	// adds back these, e.g. "NET_ADMIN".
	DropAllCaps bool
	CapAdd      []string
	// NoNewPrivileges sets no-new-privileges: setuid binaries and file
	// capabilities grant nothing.
	NoNewPrivileges bool
	// PidsLimit caps the container's processes and threads; zero means
	// the runtime's default.
	PidsLimit int
	// ExtraArgs are appended to the run flags (the devcontainer's
	// allow-listed runArgs, see AllowedRunArgs).
	ExtraArgs []string
	// Stdin, Stdout and Stderr connect to the container; nil discards.
	Stdin          io.Reader
	Stdout, Stderr io.Writer
}

// NetworkRequest creates a network.
type NetworkRequest struct {
	Name string
	// Internal networks have no route out of the host.
	Internal bool
	// DisableDNS turns off the network's DNS server (Podman's forwards
	// queries to the host's resolvers even on internal networks; Docker's
	// does not forward on internal networks, so Docker ignores this).
	DisableDNS bool
	// Subnet is an IPv4 CIDR whose first address becomes the gateway;
	// empty lets the runtime pick, except for Podman with DisableDNS, whose
	// automatic allocation then assigns no gateway, so the first free
	// 10.89.N.0/24 is used.
	Subnet string
	Labels map[string]string
}

// Network is a created network.
type Network struct {
	Name, Subnet, Gateway string
}

// Runtime drives one container runtime through its CLI.
type Runtime interface {
	// Kind is RuntimeDocker or RuntimePodman.
	Kind() Kind
	// Selection says how the runtime was chosen, for banners and plan.
	Selection() string
	// HostAlias is the name the runtime resolves to the host
	// (host.docker.internal, host.containers.internal).
	HostAlias() string
	Build(ctx context.Context, req BuildRequest) error
	// ImageExists reports whether ref is present locally.
	ImageExists(ctx context.Context, ref string) (bool, error)
	// ImageID returns the local image's ID (hex, without "sha256:").
	ImageID(ctx context.Context, ref string) (string, error)
	Pull(ctx context.Context, ref string, out io.Writer) error
	// Run runs a container in the foreground and returns its exit status.
	// err is non-nil only when the CLI could not be run at all; statuses
	// 125-127 may come from the runtime itself (bad image, no such command).
	Run(ctx context.Context, req RunRequest) (int, error)
	NetworkCreate(ctx context.Context, req NetworkRequest) (Network, error)
	NetworkRemove(ctx context.Context, name string) error
	// ContainerRemove force-removes a container; a missing one, or one
	// already being removed, is not an error.
	ContainerRemove(ctx context.Context, name string) error
	// Exec runs a command in a running container and returns its exit
	// status, as Run does.
	Exec(ctx context.Context, req ExecRequest) (int, error)
	// Containers lists the containers carrying label (key or key=value),
	// stopped ones included.
	Containers(ctx context.Context, label string) ([]Container, error)
}

// ExecRequest is one command run in a running container.
type ExecRequest struct {
	// Container is the container's name; Cmd is argv (no shell).
	Container string
	Cmd       []string
	// User overrides the container's user when set.
	User string
	// Workdir overrides the container's working directory when set.
	Workdir string
	// Env is set for the command: each name goes on argv as -e NAME and
	// its value only in the CLI's environment (Command.Env), so values
	// never enter argv. Names must pass envname.Valid.
	Env map[string]string
	// Stdin, when set, is connected with -i; TTY adds -t.
	Stdin io.Reader
	TTY   bool
	// Stdout and Stderr receive the output; nil discards.
	Stdout, Stderr io.Writer
}

// RuntimeConfig configures NewRuntime.
type Config struct {
	// Kind is required: RuntimeAuto probes `docker info`, else uses Podman.
	Kind Kind
	// Logger is required; commands are logged at debug level.
	Logger *zap.Logger
	// Exec runs the CLI; nil means ExecCommand.
	Exec Executor
	// LookPath finds binaries; nil means exec.LookPath.
	LookPath func(string) (string, error)
	// ProbeTimeout bounds `docker info` under RuntimeAuto; zero means 15s.
	ProbeTimeout time.Duration
}

// NewRuntime returns the runtime cfg selects. Under RuntimeAuto it runs
// `docker info` and picks Docker when it succeeds, else Podman when the
// podman binary exists; Selection says which and why.
func New(ctx context.Context, cfg Config) (Runtime, error) {
	if cfg.Logger == nil {
		return nil, errors.New("creating the container runtime: RuntimeConfig.Logger is required")
	}
	if cfg.Exec == nil {
		cfg.Exec = ExecCommand
	}
	if cfg.LookPath == nil {
		cfg.LookPath = exec.LookPath
	}
	if cfg.ProbeTimeout <= 0 {
		cfg.ProbeTimeout = 15 * time.Second
	}
	mk := func(kind Kind, why string) *cliRuntime {
		return &cliRuntime{kind: kind, bin: string(kind), why: why, exec: cfg.Exec, log: cfg.Logger.Named("runtime")}
	}
	switch cfg.Kind {
	case Docker, Podman:
		if _, err := cfg.LookPath(string(cfg.Kind)); err != nil {
			return nil, fmt.Errorf("finding %s: %w (install it, or choose the other runtime with --runtime)", cfg.Kind, err)
		}
		return mk(cfg.Kind, "--runtime "+string(cfg.Kind)), nil
	case Auto:
	default:
		return nil, fmt.Errorf("creating the container runtime: unknown kind %q; use \"auto\", \"docker\" or \"podman\"", cfg.Kind)
	}
	dockerWhy := "docker not found on PATH"
	if _, err := cfg.LookPath("docker"); err == nil {
		pctx, cancel := context.WithTimeout(ctx, cfg.ProbeTimeout)
		var out, errb bytes.Buffer
		err := cfg.Exec(pctx, Command{Path: "docker", Args: []string{"info", "--format", "{{.ServerVersion}}"}, Stdout: &out, Stderr: &errb})
		cancel()
		if err == nil {
			return mk(Docker, fmt.Sprintf("auto: the Docker engine answered (server %s)", strings.TrimSpace(out.String()))), nil
		}
		dockerWhy = "docker info failed: " + firstLine(errb.String(), err)
	}
	if _, err := cfg.LookPath("podman"); err == nil {
		return mk(Podman, "auto: "+dockerWhy+"; using Podman"), nil
	}
	return nil, fmt.Errorf("choosing a container runtime: %s, and podman is not installed (start Docker or install Podman)", dockerWhy)
}
