package guard

import (
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"github.com/aileron-dev/aileron-proxy/launcher/runtime"
	"net/netip"
	"os"
	"slices"

	"strings"
)

// GuardTable is the nftables table (family inet: IPv4 and IPv6) the egress
// guard installs in the sandbox's network namespace.
const Table = "aileron_guard"

// GuardBinaryPath is where the guard helper (a static aileron-proxy) is
// mounted, read-only, in the holder container.
const BinaryPath = "/.aileron/aileron-proxy"

// guardHelperArgs are the hidden subcommand the holder runs: `hold` keeps
// the namespace alive, `apply` installs and verifies the rules, `show`
// prints them.
var guardHelperArgs = []string{"internal", "guard"}

// GuardRequest configures StartGuard.
type Request struct {
	// Name is the holder container's name; required.
	Name string
	// Image runs the holder; any image will do (the helper is static and
	// mounted), launch uses the sandbox image, which is present.
	Image string
	// Network is the (internal) network the namespace joins; required.
	Network string
	// Binary is the host path of a static aileron-proxy (GuardHelper).
	Binary string
	// Allow are the only endpoints the sandbox may connect to (TCP, IPv4).
	Allow []netip.AddrPort
	// AddHosts go into the namespace's /etc/hosts, which every container
	// joining it shares (the runtimes refuse --add-host there).
	AddHosts map[string]string
	Labels   map[string]string
}

// Guard is a running holder: a container that owns the sandbox's network
// namespace, with only CAP_NET_ADMIN, whose egress guard is installed.
type Guard struct {
	// Container is the holder's name.
	Container string
	// NetworkMode joins a container to the guarded namespace
	// ("container:NAME"); such a container must drop CAP_NET_ADMIN.
	NetworkMode string
	// Rules are the installed rules as read back (GuardRuleset.Lines).
	Rules []string
	// Summary says what the guard allows, for banners.
	Summary string
}

// StartGuard starts the holder container on req.Network and installs the
// egress guard in its namespace (GuardRules of req.Allow), verifying the
// rules the kernel then holds. It fails closed: on any error nothing may
// run in the namespace. stop removes the holder; it is non-nil whenever
// the holder may have been created, also on error, and the caller must
// call it then too.
func Start(ctx context.Context, rt runtime.Runtime, req Request) (g *Guard, stop func(context.Context) error, err error) {
	if req.Name == "" || req.Image == "" || req.Network == "" || req.Binary == "" {
		return nil, nil, errors.New("starting the egress guard: GuardRequest needs Name, Image, Network and Binary")
	}
	if _, err := Rules(req.Allow); err != nil {
		return nil, nil, err
	}
	hold := append(slices.Clone(guardHelperArgs), "hold")
	stop = func(ctx context.Context) error { return rt.ContainerRemove(ctx, req.Name) }
	var out bytes.Buffer
	code, err := rt.Run(ctx, runtime.RunRequest{
		Image: req.Image, Entrypoint: BinaryPath, Cmd: hold,
		Name: req.Name, Network: req.Network, AddHosts: req.AddHosts, User: "0:0",
		Mounts:      []runtime.Mount{{Source: req.Binary, Target: BinaryPath, ReadOnly: true}},
		Labels:      req.Labels,
		Detach:      true,
		DropAllCaps: true, CapAdd: []string{"NET_ADMIN"}, NoNewPrivileges: true, PidsLimit: 64,
		Stdout: &out, Stderr: &out,
	})
	if err == nil && code != 0 {
		err = fmt.Errorf("%s run exited %d: %s", rt.Kind(), code, runtime.LastLines(out.String(), 3))
	}
	if err != nil {
		return nil, stop, fmt.Errorf("starting the egress guard's holder container %s: %w; the agent was not started", req.Name, err)
	}
	applied, err := apply(ctx, rt, req.Name, req.Allow)
	if err != nil {
		return nil, stop, fmt.Errorf("installing the egress guard in %s: %w; the agent was not started (the runtime must grant CAP_NET_ADMIN to a container and the kernel must support nftables; see \"Egress guard\" in docs/launcher.md)", req.Name, err)
	}
	// apply verified, inside the namespace, that the kernel holds exactly
	// the rules; what it printed is that read-back.
	got := strings.Split(strings.TrimSpace(applied), "\n")
	return &Guard{Container: req.Name, NetworkMode: "container:" + req.Name, Rules: got, Summary: Summary(req.Allow)}, stop, nil
}

// helperCmd is the guard helper's command line in a holder container:
// sub is hold, apply or show.
func helperCmd(sub string, args ...string) []string {
	cmd := append([]string{BinaryPath}, guardHelperArgs...)
	return append(append(cmd, sub), args...)
}

// apply runs the helper's apply in the holder container: it installs the
// rules for allow, verifies them and prints what the kernel then holds
// (returned).
func apply(ctx context.Context, rt runtime.Runtime, holder string, allow []netip.AddrPort) (string, error) {
	var args []string
	for _, ap := range allow {
		args = append(args, "--allow", ap.String())
	}
	var out, errb bytes.Buffer
	code, err := rt.Exec(ctx, runtime.ExecRequest{Container: holder, Cmd: helperCmd("apply", args...), Stdout: &out, Stderr: &errb})
	if err == nil && code != 0 {
		err = fmt.Errorf("exit status %d: %s", code, strings.TrimSpace(errb.String()))
	}
	return out.String(), err
}

// EnvGuardBinary names a static aileron-proxy to run as the egress guard's
// helper instead of the running binary (needed when that one is dynamically
// linked).
const EnvBinary = "AILERON_GUARD_BINARY"

// GuardHelper returns the guard helper's path: override when set (the
// value of EnvGuardBinary), else the running binary. It must be a
// statically linked ELF file, which the holder container can run whatever
// its image; a dynamically linked build (cgo) is refused with the fix.
func Helper(override string) (string, error) {
	exe := override
	if exe == "" {
		var err error
		if exe, err = os.Executable(); err != nil {
			return "", fmt.Errorf("finding this binary for the egress guard: %w (set %s to a static aileron-proxy)", err, EnvBinary)
		}
	}
	return exe, IsStaticELF(exe)
}

// IsStaticELF returns nil when path is an ELF executable without a program
// interpreter (statically linked), else an error saying how to build one.
func IsStaticELF(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("checking %s for the egress guard: %w (the guard helper must be a static Linux build of aileron-proxy)", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%s is dynamically linked, and the egress guard runs it inside the sandbox's holder container: rebuild it static with CGO_ENABLED=0 go build ./cmd/aileron-proxy (make build does), or set %s to a static build", path, EnvBinary)
		}
	}
	return nil
}

// GuardSummary says in one line what the guard lets out, for the launch
// banner and `sandbox plan`.
func Summary(allow []netip.AddrPort) string {
	eps := make([]string, len(allow))
	for i, ap := range allow {
		eps[i] = ap.String()
	}
	if len(eps) == 0 {
		eps = []string{"the proxy relay and the API relay on the network's gateway"}
	}
	return "on: TCP to " + strings.Join(eps, " and ") + " only; everything else (other host ports and addresses, other containers, DNS, IPv6) is refused"
}
