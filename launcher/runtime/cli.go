package runtime

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"

	"go.uber.org/zap"

	"github.com/aileron-dev/aileron-proxy/internal/envname"
)

type cliRuntime struct {
	kind Kind
	bin  string
	why  string
	exec Executor
	log  *zap.Logger
}

var _ Runtime = (*cliRuntime)(nil)

func (r *cliRuntime) Kind() Kind        { return r.kind }
func (r *cliRuntime) Selection() string { return r.why }

func (r *cliRuntime) HostAlias() string {
	if r.kind == Podman {
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
	for _, k := range slices.Sorted(maps.Keys(req.Args)) {
		args = append(args, "--build-arg", k+"="+req.Args[k])
	}
	for _, k := range slices.Sorted(maps.Keys(req.Labels)) {
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
	tail := NewTailBuffer(4096)
	if out == nil {
		out = tail
	} else {
		out = io.MultiWriter(out, tail)
	}
	if err := r.exec(ctx, Command{Path: r.bin, Args: args, Stdout: out, Stderr: out}); err != nil {
		return fmt.Errorf("building %s with %s: %w\n%s", req.Tag, r.bin, err, indent(LastLines(tail.String(), 15)))
	}
	return nil
}

func (r *cliRuntime) ImageExists(ctx context.Context, ref string) (bool, error) {
	if r.kind == Podman {
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
	tail := NewTailBuffer(2048)
	w := io.Writer(tail)
	if out != nil {
		w = io.MultiWriter(out, tail)
	}
	if err := r.exec(ctx, Command{Path: r.bin, Args: args, Stdout: w, Stderr: w}); err != nil {
		if l := LastLines(tail.String(), 1); l != "" {
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
	var env []string
	for _, k := range slices.Sorted(maps.Keys(req.Env)) {
		if !envname.Valid(k) {
			return 0, fmt.Errorf("running a command in a container: %q is not a variable name (use letters, digits and _)", k)
		}
		args = append(args, "-e", k)
		env = append(env, k+"="+req.Env[k])
	}
	if req.Stdin != nil {
		args = append(args, "-i")
	}
	if req.TTY {
		args = append(args, "-t")
	}
	args = append(append(args, req.Container), req.Cmd...)
	r.debugExec(args)
	err := r.exec(ctx, Command{Path: r.bin, Args: args, Env: env, Stdin: req.Stdin, Stdout: req.Stdout, Stderr: req.Stderr})
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
//
// It is long on purpose: one flat list of the flags in the order the CLI
// receives them (runArgs last but for the image), read top to bottom.
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
	for _, k := range slices.Sorted(maps.Keys(req.Labels)) {
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
	for _, h := range slices.Sorted(maps.Keys(req.AddHosts)) {
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
	for _, k := range slices.Sorted(maps.Keys(env)) {
		if !envname.Valid(k) {
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

func wrapf(err error, format string, args ...any) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf(format+": %w", append(args, err)...)
}

func (r *cliRuntime) NetworkCreate(ctx context.Context, req NetworkRequest) (Network, error) {
	if req.Name == "" {
		return Network{}, fmt.Errorf("creating a network: no name given")
	}
	if req.Subnet == "" && req.DisableDNS && r.kind == Podman {
		return r.podmanCreatePicked(ctx, req)
	}
	if err := r.networkCreate(ctx, req); err != nil {
		return Network{}, err
	}
	return r.networkInspect(ctx, req.Name)
}

// networkCreate runs `network create` for req.
func (r *cliRuntime) networkCreate(ctx context.Context, req NetworkRequest) error {
	args := []string{"network", "create"}
	if req.Internal {
		args = append(args, "--internal")
	}
	if req.DisableDNS && r.kind == Podman {
		// Docker's embedded DNS does not forward for internal networks;
		// Podman's aardvark-dns does unless disabled.
		args = append(args, "--disable-dns")
	}
	if req.Subnet != "" {
		pfx, err := netip.ParsePrefix(req.Subnet)
		if err != nil || !pfx.Addr().Is4() || pfx.Bits() > 30 {
			return fmt.Errorf("creating network %s: subnet %q is not an IPv4 CIDR of /30 or wider", req.Name, req.Subnet)
		}
		pfx = pfx.Masked()
		args = append(args, "--subnet", pfx.String(), "--gateway", pfx.Addr().Next().String())
	}
	for _, k := range slices.Sorted(maps.Keys(req.Labels)) {
		args = append(args, "--label", k+"="+req.Labels[k])
	}
	args = append(args, req.Name)
	if _, err := r.run(ctx, args...); err != nil {
		return fmt.Errorf("creating network %s: %w", req.Name, err)
	}
	return nil
}

// networkInspect reads the created network's subnet and gateway, removing
// the network when that fails.
func (r *cliRuntime) networkInspect(ctx context.Context, name string) (Network, error) {
	out, err := r.run(ctx, "network", "inspect", name)
	if err == nil {
		var n Network
		n, err = parseNetworkInspect(name, out)
		if err == nil {
			return n, nil
		}
	}
	if rmErr := r.NetworkRemove(ctx, name); rmErr != nil {
		r.log.Warn("removing network after a failed inspect", zap.String("network", name), zap.Error(rmErr))
	}
	return Network{}, fmt.Errorf("inspecting network %s: %w", name, err)
}

// podmanCreatePicked creates a Podman network on the first free
// 10.89.N.0/24 (N from 1): subnets of existing Podman networks are
// skipped, and a subnet Podman reports as used on the host is passed over.
func (r *cliRuntime) podmanCreatePicked(ctx context.Context, req NetworkRequest) (Network, error) {
	used := map[netip.Prefix]bool{}
	if out, err := r.run(ctx, "network", "ls", "--format", "json"); err == nil {
		var nets []struct{ Subnets []struct{ Subnet string } }
		if json.Unmarshal([]byte(out), &nets) == nil {
			for _, n := range nets {
				for _, s := range n.Subnets {
					if p, err := netip.ParsePrefix(s.Subnet); err == nil {
						used[p.Masked()] = true
					}
				}
			}
		}
	}
	const maxTries = 16
	tries := 0
	for i := 1; i < 255 && tries < maxTries; i++ {
		cand := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 89, byte(i), 0}), 24)
		if overlapsAny(used, cand) {
			continue
		}
		tries++
		req.Subnet = cand.String()
		err := r.networkCreate(ctx, req)
		var ce *cliError
		if errors.As(err, &ce) && strings.Contains(ce.stderr, "already used") {
			continue
		}
		if err != nil {
			return Network{}, err
		}
		return r.networkInspect(ctx, req.Name)
	}
	return Network{}, fmt.Errorf("creating network %s: no free subnet in 10.89.0.0/16 after %d tries (remove unused networks: podman network prune)", req.Name, tries)
}

func overlapsAny(used map[netip.Prefix]bool, p netip.Prefix) bool {
	for u := range used {
		if u.Overlaps(p) {
			return true
		}
	}
	return false
}

func (r *cliRuntime) NetworkRemove(ctx context.Context, name string) error {
	_, err := r.run(ctx, "network", "rm", name)
	if isNetworkGone(err) {
		return nil // already removed (by hand, or by an earlier teardown)
	}
	return wrapf(err, "removing network %s", name)
}

// isNetworkGone reports whether err is `network rm` saying the network does
// not exist: Docker's "network NAME not found", Podman's "unable to find
// network ...: network not found". Teardown must not retry those (it did,
// for its whole timeout, stalling serve's shutdown).
func isNetworkGone(err error) bool {
	var ce *cliError
	return errors.As(err, &ce) && strings.Contains(ce.stderr, "not found")
}

func (r *cliRuntime) ContainerRemove(ctx context.Context, name string) error {
	args := []string{"rm", "--force"}
	if r.kind == Podman {
		// Podman's rm --force still waits its default 10s stop timeout;
		// the container is being discarded, so do not wait.
		args = append(args, "--time", "0")
	}
	_, err := r.run(ctx, append(args, name)...)
	var ce *cliError
	if errors.As(err, &ce) && ContainerStateOf(ce.stderr) == ContainerGone {
		return nil
	}
	return wrapf(err, "removing container %s", name)
}

// ContainerState is what a runtime CLI's error output says about the
// container it was asked to use. Its zero value says nothing.
type ContainerState int

const (
	// ContainerUnknown: the output says nothing about the container
	// (another error, or none).
	ContainerUnknown ContainerState = iota
	// ContainerGone: the container no longer exists or is being removed
	// (by --rm, or a concurrent rm).
	ContainerGone
	// ContainerStopped: the container exists but no longer runs, so
	// nothing can be exec'd in it.
	ContainerStopped
)

func (s ContainerState) String() string {
	switch s {
	case ContainerGone:
		return "gone"
	case ContainerStopped:
		return "stopped"
	}
	return "unknown"
}

// IsUnusable reports whether no command can run in the container any
// more: it is gone or stopped.
func (s ContainerState) IsUnusable() bool { return s == ContainerGone || s == ContainerStopped }

// containerMessages are the runtimes' wordings, lowercased: Docker
// 20.10's "No such container: NAME" and "removal of container NAME is
// already in progress", Podman 4.3's "no container with name or ID "NAME"
// found: no such container" (gone); Docker's "Container ID is not
// running", Podman's "can only create exec sessions on running
// containers: container state improper", and the OCI runtime's "cannot
// exec in a stopped state|container" when it stops while an exec starts
// (stopped). `docker rm --force` says "is not running" too when the
// container stops under it, and it is then still there, so "stopped" is
// never taken as removed.
var containerMessages = []struct {
	text  string
	state ContainerState
}{
	{"no such container", ContainerGone},
	{"is already in progress", ContainerGone},
	{"is not running", ContainerStopped},
	{"container state improper", ContainerStopped},
	{"cannot exec in a stopped", ContainerStopped},
}

// ContainerStateOf reads a runtime CLI's stderr for what it says about the
// container. It is the one home of that rule: ContainerRemove takes
// ContainerGone as success, a sandbox call takes an unusable container as
// the sandbox gone.
func ContainerStateOf(stderr string) ContainerState {
	s := strings.ToLower(stderr)
	for _, m := range containerMessages {
		if strings.Contains(s, m.text) {
			return m.state
		}
	}
	return ContainerUnknown
}

// parseNetworkInspect reads the first IPv4 subnet and gateway from
// `docker network inspect` (IPAM.Config) or `podman network inspect`
// (subnets) output.
func parseNetworkInspect(name, out string) (Network, error) {
	type subnet struct {
		Subnet, Gateway string
	}
	var nets []struct {
		IPAM struct {
			Config []subnet
		}
		Subnets []subnet
	}
	if err := json.Unmarshal([]byte(out), &nets); err != nil {
		return Network{}, fmt.Errorf("parsing network inspect output: %w", err)
	}
	if len(nets) != 1 {
		return Network{}, fmt.Errorf("network inspect returned %d networks, want 1", len(nets))
	}
	cands := append(nets[0].IPAM.Config, nets[0].Subnets...)
	for _, s := range cands {
		pfx, err := netip.ParsePrefix(s.Subnet)
		if err != nil || !pfx.Addr().Is4() {
			continue
		}
		gw, err := netip.ParseAddr(s.Gateway)
		if err != nil || !pfx.Contains(gw) {
			continue
		}
		return Network{Name: name, Subnet: pfx.String(), Gateway: gw.String()}, nil
	}
	return Network{}, fmt.Errorf("no IPv4 subnet with a gateway in the network inspect output")
}
