//go:build linux

package launcher

import (
	"bytes"
	"context"
	"fmt"
	"github.com/aileron-dev/aileron-proxy/launcher/runtime"
	"net"
	"strings"
	"testing"
	"time"
)

// listenFreebind listens on addr even before the address exists on the
// host: Podman creates an internal network's bridge (and gateway address)
// only when the first container joins it.
func listenFreebind(addr string) (net.Listener, error) {
	lc := net.ListenConfig{Control: freebindControl}
	return lc.Listen(context.Background(), "tcp4", addr)
}

// TestSandboxInternalNetwork checks the egress lock launch relies on: a
// container on an internal network reaches a listener on the network's
// gateway and nothing off its network (a container on the default
// bridge), and cannot resolve names.
func TestSandboxInternalNetwork(t *testing.T) {
	for _, kind := range []runtime.Kind{runtime.Docker, runtime.Podman} {
		t.Run(string(kind), func(t *testing.T) {
			rt := realRuntime(t, kind)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			base := testBase(ctx, t, rt)
			name := fmt.Sprintf("aileron-test-%d", time.Now().UnixNano())
			n := internalNetwork(ctx, t, rt, name)
			ln, err := listenFreebind(net.JoinHostPort(n.Gateway, "0"))
			if err != nil {
				t.Fatalf("listening on the gateway %s: %v", n.Gateway, err)
			}
			serveText(t, ln, "gateway-ok")
			// Through the runtime's host alias, pinned to the gateway, as launch does.
			_, port, _ := net.SplitHostPort(ln.Addr().String())
			gwURL := "http://" + net.JoinHostPort(rt.HostAlias(), port) + "/"

			// Off the internal network: a container this test starts on the
			// runtime's default bridge (never an outside address).
			_, netprobe := buildStaticBins(t)
			peer := name + "-peer"
			if code, err := rt.Run(ctx, runtime.RunRequest{
				Image: base, Name: peer, Detach: true, Entrypoint: "/netprobe", Cmd: []string{"serve", "8080", "peer-reached"},
				Mounts: []runtime.Mount{{Source: netprobe, Target: "/netprobe", ReadOnly: true}}, Labels: map[string]string{LabelManaged: "true"},
			}); err != nil || code != 0 {
				t.Fatalf("starting the peer container: %d, %v", code, err)
			}
			t.Cleanup(func() { _ = rt.ContainerRemove(context.Background(), peer) })
			offHost := "http://" + net.JoinHostPort(inspectIP(t, kind, peer), "8080") + "/"
			script := `curl -sS --max-time 5 "$1"; echo " rc=$?"
curl -sS -o /dev/null --connect-timeout 3 --max-time 4 "$2"; echo "offhost rc=$?"
timeout 4 getent hosts deb.debian.org >/dev/null; echo "dns rc=$?"`
			var out bytes.Buffer
			start := time.Now()
			code, err := rt.Run(ctx, runtime.RunRequest{
				Image: base, Cmd: []string{"sh", "-c", script, "net-check", gwURL, offHost},
				Network: name, AddHosts: map[string]string{rt.HostAlias(): n.Gateway},
				Stdout: &out, Stderr: &out,
			})
			if err != nil || code != 0 {
				t.Fatalf("Run = %d, %v\n%s", code, err, out.String())
			}
			t.Logf("%s internal network %s (gateway %s): checks took %s\n%s", kind, n.Subnet, n.Gateway, time.Since(start).Round(time.Millisecond), out.String())
			got := out.String()
			if !strings.Contains(got, "gateway-ok rc=0") {
				t.Errorf("the gateway listener %s was not reachable:\n%s", gwURL, got)
			}
			if !strings.Contains(got, "offhost rc=") || strings.Contains(got, "offhost rc=0") {
				t.Errorf("%s reached %s off the host:\n%s", kind, offHost, got)
			}
			if strings.Contains(got, "dns rc=0") {
				t.Errorf("%s resolved an external name on the internal network:\n%s", kind, got)
			}
		})
	}
}
