//go:build linux

package launcher

import (
	"bytes"
	"context"
	"fmt"
	"github.com/aileron-dev/aileron-proxy/launcher/guard"
	"github.com/aileron-dev/aileron-proxy/launcher/runtime"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// staticBins are the static binaries the real-container tests mount: the
// guard helper (aileron-proxy) and netprobe. Built once per test binary.
var staticBins struct {
	once            sync.Once
	dir             string
	guard, netprobe string
	err             error
}

// buildStaticBins builds aileron-proxy and testdata/netprobe with
// CGO_ENABLED=0 into a directory removed when the test binary's TestMain
// (or, without one, the OS) cleans the temp dir.
func buildStaticBins(t *testing.T) (guard, netprobe string) {
	t.Helper()
	staticBins.once.Do(func() {
		staticBins.dir, staticBins.err = os.MkdirTemp("", "aileron-launcher-bins-")
		if staticBins.err != nil {
			return
		}
		for _, b := range []struct{ out, pkg string }{{"aileron-proxy", "../cmd/aileron-proxy"}, {"netprobe", "./testdata/netprobe"}} {
			cmd := exec.Command("go", "build", "-o", filepath.Join(staticBins.dir, b.out), b.pkg)
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
			if out, err := cmd.CombinedOutput(); err != nil {
				staticBins.err = fmt.Errorf("building %s static: %w\n%s", b.pkg, err, out)
				return
			}
		}
		staticBins.guard = filepath.Join(staticBins.dir, "aileron-proxy")
		staticBins.netprobe = filepath.Join(staticBins.dir, "netprobe")
	})
	if staticBins.err != nil {
		t.Fatal(staticBins.err)
	}
	return staticBins.guard, staticBins.netprobe
}

// testBase is the sandbox base image, built unless present.
func testBase(ctx context.Context, t *testing.T, rt runtime.Runtime) string {
	t.Helper()
	base := BaseImage("")
	if _, err := ensureBase(ctx, rt, base, PrepareOptions{Policy: BuildAuto}); err != nil {
		t.Fatal(err)
	}
	return base
}

// internalNetwork creates an internal network without DNS, as launch
// does, removed when the test ends.
func internalNetwork(ctx context.Context, t *testing.T, rt runtime.Runtime, name string) runtime.Network {
	t.Helper()
	n, err := rt.NetworkCreate(ctx, runtime.NetworkRequest{Name: name, Internal: true, DisableDNS: true, Labels: map[string]string{LabelManaged: "true"}})
	if err != nil {
		t.Fatalf("NetworkCreate: %v", err)
	}
	t.Cleanup(func() {
		if err := rt.NetworkRemove(context.Background(), name); err != nil {
			t.Errorf("NetworkRemove: %v", err)
		}
	})
	return n
}

// serveText serves text over HTTP on ln until the test ends.
func serveText(t *testing.T, ln net.Listener, text string) {
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, text) }), ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
}

// guardProbeScript runs in the guarded container as `sh -c SCRIPT probe
// ALLOWED GW_HOST_SERVICE OTHER_BRIDGE_HOST_SERVICE PEER HOLDER`, one line
// per check (HOLDER is a name only the runtime's DNS server knows).
const guardProbeScript = `probe() { out=$(curl -sS --noproxy '*' --connect-timeout 3 --max-time 5 "http://$2/" 2>&1); echo "$1 rc=$? $out"; }
probe allowed "$1"
probe gateway-host-service "$2"
probe bridge-host-service "$3"
probe peer-container "$4"
out=$(curl -sS -6 --connect-timeout 3 --max-time 5 "http://[fd00:dead::1]:80/" 2>&1); echo "ipv6 rc=$? $out"
grep -E '^(CapBnd|CapEff|NoNewPrivs):' /proc/self/status
/netprobe dns "$5"; echo "dns rc=$?"
/netprobe ifdown lo; echo "ifdown rc=$?"
/guard internal guard apply --allow 10.1.2.3:80 >/dev/null 2>&1; echo "rules rc=$?"
/guard internal guard show >/dev/null 2>&1; echo "show rc=$?"
echo probe-done
`

// TestGuardRealRuntimes checks the egress guard in real Docker and Podman
// namespaces: a container joined to the holder reaches the allowed
// endpoint only, not a host service bound to 0.0.0.0 (through the gateway
// or another bridge of the runtime), nor a container on the default
// bridge; the kernel holds the expected rules; and inside, the bounding
// capability set is empty, no-new-privileges is set, and neither links nor
// rules can be changed. Only loopback, bridges and containers this test
// creates are contacted.
func TestGuardRealRuntimes(t *testing.T) {
	for _, kind := range []runtime.Kind{runtime.Docker, runtime.Podman} {
		t.Run(string(kind), func(t *testing.T) {
			rt := realRuntime(t, kind)
			guardBin, netprobe := buildStaticBins(t)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			base := testBase(ctx, t, rt)
			id := fmt.Sprintf("aileron-guardtest-%d", time.Now().UnixNano())
			labels := map[string]string{LabelManaged: "true"}

			// A host service on every address, as a developer's database would be.
			hostSvc, err := net.Listen("tcp4", "0.0.0.0:0")
			if err != nil {
				t.Fatal(err)
			}
			serveText(t, hostSvc, "host-service-reached")
			_, hostPort, _ := net.SplitHostPort(hostSvc.Addr().String())

			// A container on the runtime's default bridge.
			peer := id + "-peer"
			if code, err := rt.Run(ctx, runtime.RunRequest{
				Image: base, Name: peer, Detach: true, Entrypoint: "/netprobe", Cmd: []string{"serve", "8080", "peer-reached"},
				Mounts: []runtime.Mount{{Source: netprobe, Target: "/netprobe", ReadOnly: true}}, Labels: labels,
			}); err != nil || code != 0 {
				t.Fatalf("starting the peer container: %d, %v", code, err)
			}
			t.Cleanup(func() { _ = rt.ContainerRemove(context.Background(), peer) })
			peerIP := inspectIP(t, kind, peer)
			bridgeIP := defaultBridgeIP(t, kind)

			n := internalNetwork(ctx, t, rt, id)
			relay, err := listenFreebind(net.JoinHostPort(n.Gateway, "0"))
			if err != nil {
				t.Fatal(err)
			}
			serveText(t, relay, "relay-ok")
			allow := []netip.AddrPort{netip.MustParseAddrPort(relay.Addr().String())}

			g, stop, err := guard.Start(ctx, rt, guard.Request{
				Name: id + "-guard", Image: base, Network: n.Name, Binary: guardBin, Allow: allow,
				AddHosts: map[string]string{rt.HostAlias(): n.Gateway}, Labels: labels,
			})
			if stop != nil {
				t.Cleanup(func() {
					if err := stop(context.Background()); err != nil {
						t.Errorf("removing the holder: %v", err)
					}
				})
			}
			if err != nil {
				t.Fatalf("StartGuard: %v", err)
			}

			// The kernel holds the expected rules: read back from the namespace.
			rs, err := guard.Rules(allow)
			if err != nil {
				t.Fatal(err)
			}
			var show, showErr bytes.Buffer
			code, err := rt.Exec(ctx, runtime.ExecRequest{Container: g.Container, Cmd: []string{guard.BinaryPath, "internal", "guard", "show"}, Stdout: &show, Stderr: &showErr})
			if got := strings.Split(strings.TrimSpace(show.String()), "\n"); err != nil || code != 0 || !slices.Equal(got, rs.Lines()) {
				t.Errorf("rules read back = %d, %v:\n%s%s\nwant\n%s", code, err, show.String(), showErr.String(), strings.Join(rs.Lines(), "\n"))
			}

			var probe bytes.Buffer
			code, err = rt.Run(ctx, runtime.RunRequest{
				Image: base, Name: id + "-agent", Network: g.NetworkMode, User: "0:0",
				DropAllCaps: true, NoNewPrivileges: true, PidsLimit: DefaultPidsLimit,
				Mounts: []runtime.Mount{{Source: netprobe, Target: "/netprobe", ReadOnly: true}, {Source: guardBin, Target: "/guard", ReadOnly: true}},
				Labels: labels, Entrypoint: "/bin/sh",
				Cmd: []string{"-c", guardProbeScript, "probe", relay.Addr().String(),
					net.JoinHostPort(n.Gateway, hostPort), net.JoinHostPort(bridgeIP, hostPort), net.JoinHostPort(peerIP, "8080"), g.Container},
				Stdout: &probe, Stderr: &probe,
			})
			got := probe.String()
			t.Logf("%s guarded probe (gateway %s, bridge %s, peer %s):\n%s", kind, n.Gateway, bridgeIP, peerIP, got)
			if err != nil || code != 0 || !strings.Contains(got, "probe-done") {
				t.Fatalf("probe container = %d, %v", code, err)
			}
			for _, want := range []string{"allowed rc=0 relay-ok", "CapBnd:\t0000000000000000", "CapEff:\t0000000000000000", "NoNewPrivs:\t1"} {
				if !strings.Contains(got, want) {
					t.Errorf("probe output lacks %q", want)
				}
			}
			for _, denied := range []string{"gateway-host-service", "bridge-host-service", "peer-container", "ipv6", "dns", "ifdown", "rules", "show"} {
				if strings.Contains(got, denied+" rc=0") {
					t.Errorf("%s succeeded inside the guarded sandbox", denied)
				}
			}
			for _, leak := range []string{"host-service-reached", "peer-reached"} {
				if strings.Contains(got, leak) {
					t.Errorf("the sandbox got an answer %q", leak)
				}
			}
		})
	}
}

// defaultBridgeIP is the host's address on the runtime's default bridge:
// docker0's, or the gateway of Podman's "podman" network.
func defaultBridgeIP(t *testing.T, kind runtime.Kind) string {
	t.Helper()
	if kind == runtime.Docker {
		ifc, err := net.InterfaceByName("docker0")
		if err != nil {
			t.Fatalf("finding docker0: %v", err)
		}
		addrs, _ := ifc.Addrs()
		for _, a := range addrs {
			if p, err := netip.ParsePrefix(a.String()); err == nil && p.Addr().Is4() {
				return p.Addr().String()
			}
		}
		t.Fatalf("docker0 has no IPv4 address: %v", addrs)
	}
	out, err := exec.Command("podman", "network", "inspect", "podman", "--format", "{{range .Subnets}}{{if .Gateway.To4}}{{.Gateway}} {{end}}{{end}}").Output()
	if err != nil {
		t.Fatal(err)
	}
	gw, _, _ := strings.Cut(strings.TrimSpace(string(out)), " ")
	if _, err := netip.ParseAddr(gw); err != nil {
		t.Fatalf("podman network inspect podman: no IPv4 gateway in %q", out)
	}
	return gw
}

// inspectIP returns a running container's IPv4 address.
func inspectIP(t *testing.T, kind runtime.Kind, name string) string {
	t.Helper()
	out, err := exec.Command(string(kind), "inspect", "--format", "{{range .NetworkSettings.Networks}}{{.IPAddress}} {{end}}", name).Output()
	if err != nil {
		t.Fatalf("inspecting %s: %v", name, err)
	}
	for _, f := range strings.Fields(string(out)) {
		if a, err := netip.ParseAddr(f); err == nil && a.Is4() {
			return f
		}
	}
	t.Fatalf("%s has no IPv4 address: %q", name, out)
	return ""
}
