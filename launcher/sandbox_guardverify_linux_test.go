//go:build linux

package launcher

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aileron-dev/aileron-proxy/launcher/guard"
	"github.com/aileron-dev/aileron-proxy/launcher/runtime"
)

// TestGuardVerifyRealRuntimes is what a restarted daemon does with a
// sandbox's holder, in real Docker and Podman namespaces: the holder is
// found by label (runtime.Containers), an intact guard is left alone, and
// a guard whose rules changed while no daemon watched is installed again,
// after which the kernel holds exactly the rules for the relays.
func TestGuardVerifyRealRuntimes(t *testing.T) {
	for _, kind := range []runtime.Kind{runtime.Docker, runtime.Podman} {
		t.Run(string(kind), func(t *testing.T) {
			rt := realRuntime(t, kind)
			guardBin, _ := buildStaticBins(t)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			base := testBase(ctx, t, rt)
			id := fmt.Sprintf("aileron-verifytest-%d", time.Now().UnixNano())
			labels := map[string]string{LabelManaged: "true", LabelSession: id}
			n := internalNetwork(ctx, t, rt, id)
			allow := []netip.AddrPort{
				netip.AddrPortFrom(netip.MustParseAddr(n.Gateway), 41000),
				netip.AddrPortFrom(netip.MustParseAddr(n.Gateway), 41001),
			}
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
				t.Fatalf("guard.Start: %v", err)
			}

			cs, err := rt.Containers(ctx, LabelSession+"="+id)
			if err != nil || len(cs) != 1 || cs[0].Name != g.Container || !cs[0].IsRunning() || cs[0].Labels[LabelManaged] != "true" {
				t.Fatalf("Containers(%s) = %+v, %v; want the running holder %s with its labels", id, cs, err, g.Container)
			}

			if reapplied, err := guard.Verify(ctx, rt, g.Container, allow); err != nil || reapplied {
				t.Fatalf("Verify of an intact guard = %v, %v; want it left alone", reapplied, err)
			}
			// The rules change while no daemon watches: a wider endpoint.
			var out bytes.Buffer
			code, err := rt.Exec(ctx, runtime.ExecRequest{Container: g.Container, Cmd: []string{guard.BinaryPath, "internal", "guard", "apply", "--allow", net.JoinHostPort(n.Gateway, "22")}, Stdout: &out, Stderr: &out})
			if err != nil || code != 0 {
				t.Fatalf("changing the rules: %d, %v: %s", code, err, out.String())
			}
			if reapplied, err := guard.Verify(ctx, rt, g.Container, allow); err != nil || !reapplied {
				t.Fatalf("Verify of a changed guard = %v, %v; want it installed again", reapplied, err)
			}
			rs, err := guard.Rules(allow)
			if err != nil {
				t.Fatal(err)
			}
			out.Reset()
			code, err = rt.Exec(ctx, runtime.ExecRequest{Container: g.Container, Cmd: []string{guard.BinaryPath, "internal", "guard", "show"}, Stdout: &out, Stderr: &out})
			if got := strings.Split(strings.TrimSpace(out.String()), "\n"); err != nil || code != 0 || !slices.Equal(got, rs.Lines()) {
				t.Errorf("the rules after Verify = %d, %v:\n%s\nwant\n%s", code, err, out.String(), strings.Join(rs.Lines(), "\n"))
			}
			if _, err := guard.Verify(ctx, rt, id+"-missing", allow); err == nil {
				t.Error("Verify in a missing holder = nil, want an error")
			}
		})
	}
}
