package launcher

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"
)

// RuntimeKind names a container runtime. The zero value is invalid.
type RuntimeKind string

// Runtime kinds accepted by --runtime and --sandbox.
const (
	RuntimeAuto   RuntimeKind = "auto" // Docker when its engine answers, else Podman
	RuntimeDocker RuntimeKind = "docker"
	RuntimePodman RuntimeKind = "podman"
)

// String returns the flag spelling.
func (k RuntimeKind) String() string { return string(k) }

// ParseRuntimeKind parses "auto", "docker" or "podman".
func ParseRuntimeKind(s string) (RuntimeKind, error) {
	switch k := RuntimeKind(strings.ToLower(strings.TrimSpace(s))); k {
	case RuntimeAuto, RuntimeDocker, RuntimePodman:
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
	Kind() RuntimeKind
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
	// ContainerRemove force-removes a container; a missing one is not an error.
	ContainerRemove(ctx context.Context, name string) error
	// Exec runs a command in a running container and returns its exit
	// status, as Run does.
	Exec(ctx context.Context, req ExecRequest) (int, error)
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
	// EnvNames are passed with -e NAME: each takes its value from the
	// CLI's own environment (Command's), so values never enter argv.
	EnvNames []string
	// Stdin, when set, is connected with -i; TTY adds -t.
	Stdin io.Reader
	TTY   bool
	// Stdout and Stderr receive the output; nil discards.
	Stdout, Stderr io.Writer
}

// RuntimeConfig configures NewRuntime.
type RuntimeConfig struct {
	// Kind is required: RuntimeAuto probes `docker info`, else uses Podman.
	Kind RuntimeKind
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
func NewRuntime(ctx context.Context, cfg RuntimeConfig) (Runtime, error) {
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
	mk := func(kind RuntimeKind, why string) *cliRuntime {
		return &cliRuntime{kind: kind, bin: string(kind), why: why, exec: cfg.Exec, log: cfg.Logger.Named("runtime")}
	}
	switch cfg.Kind {
	case RuntimeDocker, RuntimePodman:
		if _, err := cfg.LookPath(string(cfg.Kind)); err != nil {
			return nil, fmt.Errorf("finding %s: %w (install it, or choose the other runtime with --runtime)", cfg.Kind, err)
		}
		return mk(cfg.Kind, "--runtime "+string(cfg.Kind)), nil
	case RuntimeAuto:
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
			return mk(RuntimeDocker, fmt.Sprintf("auto: the Docker engine answered (server %s)", strings.TrimSpace(out.String()))), nil
		}
		dockerWhy = "docker info failed: " + firstLine(errb.String(), err)
	}
	if _, err := cfg.LookPath("podman"); err == nil {
		return mk(RuntimePodman, "auto: "+dockerWhy+"; using Podman"), nil
	}
	return nil, fmt.Errorf("choosing a container runtime: %s, and podman is not installed (start Docker or install Podman)", dockerWhy)
}

func firstLine(s string, err error) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if s == "" && err != nil {
		return err.Error()
	}
	return s
}

type cliRuntime struct {
	kind RuntimeKind
	bin  string
	why  string
	exec Executor
	log  *zap.Logger
}

var _ Runtime = (*cliRuntime)(nil)

func (r *cliRuntime) Kind() RuntimeKind { return r.kind }
func (r *cliRuntime) Selection() string { return r.why }

func (r *cliRuntime) HostAlias() string {
	if r.kind == RuntimePodman {
		return "host.containers.internal"
	}
	return "host.docker.internal"
}

// debugExec logs a CLI invocation at debug level (argv never holds secrets).
func (r *cliRuntime) debugExec(args []string) {
	if ce := r.log.Check(zap.DebugLevel, "exec"); ce != nil {
		ce.Write(zap.String("bin", r.bin), zap.Strings("args", args))
	}
}

// run executes the CLI and returns stdout; on failure the error carries
// the first line of stderr.
func (r *cliRuntime) run(ctx context.Context, args ...string) (string, error) {
	var out, errb bytes.Buffer
	r.debugExec(args)
	err := r.exec(ctx, Command{Path: r.bin, Args: args, Stdout: &out, Stderr: &errb})
	if err != nil {
		return out.String(), &cliError{argv0: r.bin + " " + args[0], err: err, stderr: errb.String()}
	}
	return out.String(), nil
}

// cliError is a failed CLI call with its stderr.
type cliError struct {
	argv0  string
	err    error
	stderr string
}

func (e *cliError) Error() string {
	msg := fmt.Sprintf("%s: %s", e.argv0, e.err)
	if l := firstLine(e.stderr, nil); l != "" {
		msg += ": " + l
	}
	return msg
}
func (e *cliError) Unwrap() error { return e.err }

func (r *cliRuntime) Build(ctx context.Context, req BuildRequest) error {
	args := []string{"build", "--tag", req.Tag, "--file", req.Dockerfile}
	for _, k := range sortedKeys(req.Args) {
		args = append(args, "--build-arg", k+"="+req.Args[k])
	}
	for _, k := range sortedKeys(req.Labels) {
		args = append(args, "--label", k+"="+req.Labels[k])
	}
	if req.Network != "" {
		args = append(args, "--network", req.Network)
	}
	if req.Target != "" {
		args = append(args, "--target", req.Target)
	}
	for _, c := range req.CacheFrom {
		args = append(args, "--cache-from", c)
	}
	args = append(args, req.Options...)
	args = append(args, req.Context)
	r.debugExec(args)
	out := req.Output
	tail := &tailBuffer{max: 4096}
	if out == nil {
		out = tail
	} else {
		out = io.MultiWriter(out, tail)
	}
	if err := r.exec(ctx, Command{Path: r.bin, Args: args, Stdout: out, Stderr: out}); err != nil {
		return fmt.Errorf("building %s with %s: %w\n%s", req.Tag, r.bin, err, indent(lastLines(tail.String(), 15)))
	}
	return nil
}

func (r *cliRuntime) ImageExists(ctx context.Context, ref string) (bool, error) {
	if r.kind == RuntimePodman {
		_, err := r.run(ctx, "image", "exists", ref)
		if code, ok := ExitCode(err); ok && code == 1 {
			return false, nil
		}
		return err == nil, wrapf(err, "checking for image %s", ref)
	}
	_, err := r.run(ctx, "image", "inspect", "--format", "{{.Id}}", ref)
	var ce *cliError
	if errors.As(err, &ce) && strings.Contains(strings.ToLower(ce.stderr), "no such image") {
		return false, nil
	}
	return err == nil, wrapf(err, "checking for image %s", ref)
}

func (r *cliRuntime) ImageID(ctx context.Context, ref string) (string, error) {
	out, err := r.run(ctx, "image", "inspect", "--format", "{{.Id}}", ref)
	if err != nil {
		return "", fmt.Errorf("reading the ID of image %s: %w", ref, err)
	}
	id := strings.TrimPrefix(strings.TrimSpace(out), "sha256:")
	if id == "" || strings.Trim(id, "0123456789abcdef") != "" {
		return "", fmt.Errorf("reading the ID of image %s: %s image inspect printed %q, not a hex ID", ref, r.bin, out)
	}
	return id, nil
}

func (r *cliRuntime) Pull(ctx context.Context, ref string, out io.Writer) error {
	args := []string{"pull", ref}
	r.debugExec(args)
	tail := &tailBuffer{max: 2048}
	w := io.Writer(tail)
	if out != nil {
		w = io.MultiWriter(out, tail)
	}
	if err := r.exec(ctx, Command{Path: r.bin, Args: args, Stdout: w, Stderr: w}); err != nil {
		if l := lastLines(tail.String(), 1); l != "" {
			return fmt.Errorf("pulling %s with %s: %w: %s", ref, r.bin, err, l)
		}
		return fmt.Errorf("pulling %s with %s: %w", ref, r.bin, err)
	}
	return nil
}

func (r *cliRuntime) Run(ctx context.Context, req RunRequest) (int, error) {
	args, envFile, err := r.runArgs(req)
	if envFile != "" {
		defer os.Remove(envFile)
	}
	if err != nil {
		return 0, err
	}
	r.debugExec(args)
	err = r.exec(ctx, Command{Path: r.bin, Args: args, Stdin: req.Stdin, Stdout: req.Stdout, Stderr: req.Stderr})
	if code, ok := ExitCode(err); ok {
		return code, nil
	}
	if err != nil {
		return 0, fmt.Errorf("running %s run: %w", r.bin, err)
	}
	return 0, nil
}

func (r *cliRuntime) Exec(ctx context.Context, req ExecRequest) (int, error) {
	if req.Container == "" || len(req.Cmd) == 0 {
		return 0, errors.New("running a command in a container: no container or command given")
	}
	args := []string{"exec"}
	if req.User != "" {
		args = append(args, "--user", req.User)
	}
	if req.Workdir != "" {
		args = append(args, "--workdir", req.Workdir)
	}
	for _, n := range req.EnvNames {
		args = append(args, "-e", n)
	}
	if req.Stdin != nil {
		args = append(args, "-i")
	}
	if req.TTY {
		args = append(args, "-t")
	}
	args = append(append(args, req.Container), req.Cmd...)
	r.debugExec(args)
	err := r.exec(ctx, Command{Path: r.bin, Args: args, Stdin: req.Stdin, Stdout: req.Stdout, Stderr: req.Stderr})
	if code, ok := ExitCode(err); ok {
		return code, nil
	}
	if err != nil {
		return 0, fmt.Errorf("running %s exec in %s: %w", r.bin, req.Container, err)
	}
	return 0, nil
}

// runArgs builds the argv of `run`; envFile, when set, must be removed by
// the caller even on error.
func (r *cliRuntime) runArgs(req RunRequest) (args []string, envFile string, err error) {
	if req.Image == "" {
		return nil, "", errors.New("running a container: no image given")
	}
	args = []string{"run"}
	if !req.Keep {
		args = append(args, "--rm")
	}
	if req.Name != "" {
		args = append(args, "--name", req.Name)
	}
	for _, k := range sortedKeys(req.Labels) {
		args = append(args, "--label", k+"="+req.Labels[k])
	}
	if req.Detach {
		args = append(args, "--detach")
	}
	if req.Network != "" {
		args = append(args, "--network", req.Network)
	}
	if req.DropAllCaps {
		args = append(args, "--cap-drop", "ALL")
	}
	for _, c := range req.CapAdd {
		args = append(args, "--cap-add", c)
	}
	if req.NoNewPrivileges {
		args = append(args, "--security-opt", "no-new-privileges")
	}
	if req.PidsLimit > 0 {
		args = append(args, "--pids-limit", strconv.Itoa(req.PidsLimit))
	}
	for _, h := range sortedKeys(req.AddHosts) {
		args = append(args, "--add-host", h+":"+req.AddHosts[h])
	}
	if req.User != "" {
		args = append(args, "--user", req.User)
	}
	if req.Workdir != "" {
		args = append(args, "--workdir", req.Workdir)
	}
	if req.Entrypoint != "" {
		args = append(args, "--entrypoint", req.Entrypoint)
	}
	for _, m := range req.Mounts {
		for _, p := range []string{m.Source, m.Target} {
			if (p == "" && !m.Volume) || strings.ContainsAny(p, ",\n\"") {
				return nil, "", fmt.Errorf("mounting %q at %q: paths must be non-empty and contain no comma, quote or newline (move or rename it)", m.Source, m.Target)
			}
		}
		spec := "type=bind,source=" + m.Source + ",target=" + m.Target
		if m.Volume {
			spec = "type=volume,target=" + m.Target
			if m.Source != "" {
				spec = "type=volume,source=" + m.Source + ",target=" + m.Target
			}
		}
		if m.ReadOnly {
			spec += ",readonly"
		}
		args = append(args, "--mount", spec)
	}
	if len(req.Env) > 0 {
		envFile, err = writeEnvFile(req.Env)
		if err != nil {
			return nil, envFile, err
		}
		args = append(args, "--env-file", envFile)
	}
	if req.Interactive {
		args = append(args, "--interactive")
	}
	if req.TTY {
		args = append(args, "--tty")
	}
	args = append(args, req.ExtraArgs...)
	args = append(args, req.Image)
	args = append(args, req.Cmd...)
	return args, envFile, nil
}

// writeEnvFile writes env as a 0600 KEY=VALUE file (values are literal in
// both runtimes' env-file format, so newlines are refused).
func writeEnvFile(env map[string]string) (string, error) {
	var b strings.Builder
	for _, k := range sortedKeys(env) {
		if !isEnvName(k) {
			return "", fmt.Errorf("setting container environment: %q is not a variable name (use letters, digits and _)", k)
		}
		v := env[k]
		if strings.ContainsAny(v, "\n\r\x00") {
			return "", fmt.Errorf("setting container environment %s: value contains a newline or NUL, which env files cannot carry", k)
		}
		b.WriteString(k + "=" + v + "\n")
	}
	f, err := os.CreateTemp("", "aileron-env-*") // mode 0600
	if err != nil {
		return "", fmt.Errorf("writing the container env file: %w", err)
	}
	name := f.Name()
	if _, err := f.WriteString(b.String()); err != nil {
		f.Close()
		return name, fmt.Errorf("writing the container env file: %w", err)
	}
	if err := f.Close(); err != nil {
		return name, fmt.Errorf("writing the container env file: %w", err)
	}
	return name, nil
}

func isEnvName(s string) bool {
	if s == "" || (s[0] >= '0' && s[0] <= '9') {
		return false
	}
	for _, c := range s {
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

func wrapf(err error, format string, args ...any) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf(format+": %w", append(args, err)...)
}
