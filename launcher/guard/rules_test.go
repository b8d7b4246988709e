//go:build linux

package guard

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

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
	rs, err := Rules([]netip.AddrPort{ep("10.89.1.1:41000"), ep("[::ffff:10.89.1.1]:41001"), ep("10.89.1.1:41000")})
	if err != nil {
		t.Fatalf("GuardRules: %v", err)
	}
	if got := rs.Lines(); !slices.Equal(got, wantGuard) {
		t.Errorf("GuardRules(relays) =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(wantGuard, "\n"))
	}
	// Every base chain drops by default, in the inet family (IPv4 and IPv6).
	if rs.Table.Family != 1 && rs.Table.Name != Table {
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
			if _, err := Rules(tc.allow); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("GuardRules(%v) err = %v, want %q", tc.allow, err, tc.want)
			}
		})
	}
}

func TestFormatGuardRuleUnknown(t *testing.T) {
	got := FormatRule([]expr.Any{&expr.Counter{}, &expr.Verdict{Kind: expr.VerdictDrop}})
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
		rs, err := Rules(allow)
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
