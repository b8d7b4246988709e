//go:build linux

package launcher

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/aileron-dev/aileron-proxy/launcher/guard"
	"github.com/aileron-dev/aileron-proxy/launcher/runtime"
	"github.com/google/nftables/expr"
)

// wantGuard is the guard for the relays 10.89.1.1:41000 and :41001.
var wantGuard = []string{
	"table inet aileron_guard",
	"chain forward { type filter hook forward priority 0; policy drop; }",
	"chain input { type filter hook input priority 0; policy drop; }",
	`  iifname "lo" accept`,
	"  ct state established,related accept",
	"chain output { type filter hook output priority 0; policy drop; }",
	"  meta nfproto ipv4 ip daddr 127.0.0.11 reject with icmpx admin-prohibited",
	`  oifname "lo" accept`,
	"  ct state established,related accept",
	"  meta nfproto ipv4 ip daddr 10.89.1.1 meta l4proto tcp th dport 41000 accept",
	"  meta nfproto ipv4 ip daddr 10.89.1.1 meta l4proto tcp th dport 41001 accept",
	"  reject with icmpx admin-prohibited",
}

func TestGuardRules(t *testing.T) {
	ep := func(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }
	rs, err := guard.Rules([]netip.AddrPort{ep("10.89.1.1:41000"), ep("[::ffff:10.89.1.1]:41001"), ep("10.89.1.1:41000")})
	if err != nil {
		t.Fatalf("GuardRules: %v", err)
	}
	if got := rs.Lines(); !slices.Equal(got, wantGuard) {
		t.Errorf("GuardRules(relays) =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(wantGuard, "\n"))
	}
	// Every base chain drops by default, in the inet family (IPv4 and IPv6).
	if rs.Table.Family != 1 && rs.Table.Name != guard.Table {
		t.Errorf("table = %+v", rs.Table)
	}
	for _, c := range rs.Chains {
		if c.Chain.Policy == nil || *c.Chain.Policy != 0 /* NF_DROP */ {
			t.Errorf("chain %s policy = %v, want drop", c.Chain.Name, c.Chain.Policy)
		}
	}

	for _, tc := range []struct {
		name  string
		allow []netip.AddrPort
		want  string
	}{
		{"none", nil, "no allowed endpoint"},
		{"ipv6", []netip.AddrPort{ep("[fd00::1]:80")}, `allowed endpoint "[fd00::1]:80" is not an IPv4 address and port`},
		{"unspecified", []netip.AddrPort{ep("0.0.0.0:80")}, `"0.0.0.0:80"`},
		{"port zero", []netip.AddrPort{ep("10.0.0.1:0")}, `"10.0.0.1:0"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := guard.Rules(tc.allow); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("GuardRules(%v) err = %v, want %q", tc.allow, err, tc.want)
			}
		})
	}
}

func TestFormatGuardRuleUnknown(t *testing.T) {
	got := guard.FormatRule([]expr.Any{&expr.Counter{}, &expr.Verdict{Kind: expr.VerdictDrop}})
	if got != "?*expr.Counter drop" {
		t.Errorf("FormatGuardRule(counter, drop) = %q", got)
	}
}

// FuzzGuardRules: whatever endpoints come in, the guard either refuses
// them or accepts exactly those IPv4 TCP endpoints beyond loopback and
// replies, ends in a reject, and every chain drops by default.
func FuzzGuardRules(f *testing.F) {
	for _, s := range []string{"10.89.1.1:41000,10.89.1.1:41001", "[::1]:80", "0.0.0.0:1", "10.0.0.1:0", "[::ffff:1.2.3.4]:5"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		var allow []netip.AddrPort
		for _, s := range strings.Split(in, ",") {
			if ap, err := netip.ParseAddrPort(s); err == nil {
				allow = append(allow, ap)
			}
		}
		rs, err := guard.Rules(allow)
		if err != nil {
			return
		}
		lines := rs.Lines()
		accepts := 0
		for _, l := range lines {
			switch {
			case strings.HasPrefix(l, "chain ") && !strings.Contains(l, "policy drop;"):
				t.Fatalf("chain without drop policy: %q", l)
			case strings.Contains(l, " th dport "):
				accepts++
				if !strings.Contains(l, "meta nfproto ipv4 ip daddr ") {
					t.Fatalf("TCP accept not bound to an IPv4 address: %q", l)
				}
			case strings.HasPrefix(l, "  ") && strings.HasSuffix(l, "accept") && !strings.Contains(l, `"lo"`) && !strings.Contains(l, "established,related"):
				t.Fatalf("unexpected accept rule %q", l)
			}
		}
		uniq := map[netip.AddrPort]bool{}
		for _, ap := range allow {
			uniq[netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())] = true
		}
		if accepts != len(uniq) || lines[len(lines)-1] != "  reject with icmpx admin-prohibited" {
			t.Fatalf("%d TCP accepts for %d endpoints:\n%s", accepts, len(uniq), strings.Join(lines, "\n"))
		}
	})
}

// TestLaunchGuardFailsClosed: when the guard cannot be installed, launch
// stops with the reason and the fix, the agent never runs, and the holder
// is removed.
func TestLaunchGuardFailsClosed(t *testing.T) {
	d := fakeDaemon(t)
	sessions := &fakeSessions{proxyAddr: d.ProxyAddr}
	conn, store := testConnector(t, "testapi")
	agentRan := false
	respond := respondLikeDocker(func(runtime.Command) error { agentRan = true; return nil })
	f := &fakeExec{respond: func(c runtime.Command) (string, string, error) {
		if c.Args[0] == "exec" {
			return "", "installing the egress guard: the kernel refused the nftables ruleset: operation not permitted", &runtime.ExitError{Code: 1}
		}
		return respond(c)
	}}
	cfg := launchTestConfig(t, newFakeRuntime(t, runtime.Docker, f), sessions, d, conn, store)
	_, err := Launch(context.Background(), cfg)
	for _, want := range []string{"installing the egress guard in aileron-" + launchTestID + "-guard", "operation not permitted", "the agent was not started", "CAP_NET_ADMIN", "docs/launcher.md"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Launch err = %v, want it to contain %q", err, want)
		}
	}
	if agentRan {
		t.Error("the agent ran without its guard")
	}
	if !strings.Contains(allArgv(f), "rm --force aileron-"+launchTestID+"-guard") {
		t.Errorf("the holder was not removed; calls:\n%s", allArgv(f))
	}
}

func TestIsStaticELF(t *testing.T) {
	notELF := filepath.Join(t.TempDir(), "x")
	if err := os.WriteFile(notELF, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := guard.IsStaticELF(notELF); err == nil {
		t.Error("IsStaticELF(shell script) = nil")
	}
	// /bin/sh is dynamically linked on every distribution CI uses.
	if err := guard.IsStaticELF("/bin/sh"); err == nil || !strings.Contains(err.Error(), "CGO_ENABLED=0") {
		t.Errorf("IsStaticELF(/bin/sh) = %v, want the rebuild fix", err)
	}
}
