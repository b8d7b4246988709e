//go:build linux

package guard

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// GuardRuleset is the egress guard's nftables ruleset: one table whose
// base chains drop by default. Build it with GuardRules.
type Ruleset struct {
	Table  *nftables.Table
	Chains []Chain
}

// GuardChain is one base chain and its rules, in order. Chains are sorted
// by name.
type Chain struct {
	Chain *nftables.Chain
	Rules [][]expr.Any
}

// GuardRules returns the egress guard for a sandbox that may reach only
// allow (TCP, IPv4): in the namespace's output hook everything is dropped
// except loopback (but for Docker's embedded DNS server, 127.0.0.11), replies (conntrack established/related) and new TCP
// connections to exactly those endpoints; what is not allowed is rejected
// (so it fails fast) and the chain policy drops anything the reject cannot
// answer. The input hook admits only loopback and replies; forward drops
// everything. IPv6 matches none of the accept rules but loopback and
// replies, so it is blocked entirely. It is a pure function.
func Rules(allow []netip.AddrPort) (*Ruleset, error) {
	if len(allow) == 0 {
		return nil, errors.New("building the egress guard: no allowed endpoint (launch passes the proxy and API relays)")
	}
	eps := make([]netip.AddrPort, 0, len(allow))
	for _, ap := range allow {
		a := ap.Addr().Unmap()
		if !a.Is4() || a.IsUnspecified() || ap.Port() == 0 {
			return nil, fmt.Errorf("building the egress guard: allowed endpoint %q is not an IPv4 address and port (use the sandbox network's gateway, e.g. 10.89.1.1:41000)", ap.String())
		}
		ep := netip.AddrPortFrom(a, ap.Port())
		if !slices.Contains(eps, ep) {
			eps = append(eps, ep)
		}
	}
	t := &nftables.Table{Name: Table, Family: nftables.TableFamilyINet}
	drop := nftables.ChainPolicyDrop
	chain := func(name string, hook *nftables.ChainHook) *nftables.Chain {
		return &nftables.Chain{Name: name, Table: t, Type: nftables.ChainTypeFilter, Hooknum: hook, Priority: nftables.ChainPriorityFilter, Policy: &drop}
	}
	output := [][]expr.Any{append(ipv4To(dockerDNS), reject()), ifname(expr.MetaKeyOIFNAME, "lo"), ctEstablished()}
	for _, ep := range eps {
		output = append(output, tcpTo(ep))
	}
	output = append(output, []expr.Any{reject()})
	return &Ruleset{Table: t, Chains: []Chain{
		{Chain: chain("forward", nftables.ChainHookForward)},
		{Chain: chain("input", nftables.ChainHookInput), Rules: [][]expr.Any{ifname(expr.MetaKeyIIFNAME, "lo"), ctEstablished()}},
		{Chain: chain("output", nftables.ChainHookOutput), Rules: output},
	}}, nil
}

// dockerDNS is the address of Docker's embedded DNS server, which listens
// inside the container's own network namespace (reached through lo): the
// guard refuses it, so no resolver answers in the sandbox.
var dockerDNS = netip.AddrFrom4([4]byte{127, 0, 0, 11})

func accept() *expr.Verdict { return &expr.Verdict{Kind: expr.VerdictAccept} }

func reject() *expr.Reject {
	return &expr.Reject{Type: unix.NFT_REJECT_ICMPX_UNREACH, Code: unix.NFT_REJECT_ICMPX_ADMIN_PROHIBITED}
}

// ipv4To matches IPv4 packets to addr.
func ipv4To(addr netip.Addr) []expr.Any {
	ip := addr.As4()
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.NFPROTO_IPV4}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ip[:]},
	}
}

// ifname matches the input or output interface name, then accepts.
func ifname(key expr.MetaKey, name string) []expr.Any {
	b := make([]byte, unix.IFNAMSIZ)
	copy(b, name)
	return []expr.Any{&expr.Meta{Key: key, Register: 1}, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: b}, accept()}
}

// ctEstablished accepts packets of established or related connections.
func ctEstablished() []expr.Any {
	mask := binary.NativeEndian.AppendUint32(nil, expr.CtStateBitESTABLISHED|expr.CtStateBitRELATED)
	return []expr.Any{
		&expr.Ct{Key: expr.CtKeySTATE, Register: 1},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: mask, Xor: make([]byte, 4)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: make([]byte, 4)},
		accept(),
	}
}

// tcpTo accepts TCP to one IPv4 endpoint.
func tcpTo(ep netip.AddrPort) []expr.Any {
	port := binary.BigEndian.AppendUint16(nil, ep.Port())
	return append(ipv4To(ep.Addr()),
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_TCP}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: port},
		accept(),
	)
}

// Lines renders the ruleset in nft's syntax, one chain header or rule a
// line. The same rendering of the ruleset read back from the kernel
// (ReadGuard) must be equal: that is how an installed guard is verified.
func (rs *Ruleset) Lines() []string {
	lines := []string{fmt.Sprintf("table %s %s", familyName(rs.Table.Family), rs.Table.Name)}
	for _, c := range rs.Chains {
		lines = append(lines, chainHeader(c.Chain))
		for _, r := range c.Rules {
			lines = append(lines, "  "+FormatRule(r))
		}
	}
	return lines
}

func familyName(f nftables.TableFamily) string {
	switch f {
	case nftables.TableFamilyINet:
		return "inet"
	case nftables.TableFamilyIPv4:
		return "ip"
	case nftables.TableFamilyIPv6:
		return "ip6"
	}
	return fmt.Sprintf("family-%d", f)
}

func chainHeader(c *nftables.Chain) string {
	hook, prio, policy := "none", "none", "accept"
	if c.Hooknum != nil {
		switch *c.Hooknum {
		case *nftables.ChainHookInput:
			hook = "input"
		case *nftables.ChainHookOutput:
			hook = "output"
		case *nftables.ChainHookForward:
			hook = "forward"
		default:
			hook = fmt.Sprint(*c.Hooknum)
		}
	}
	if c.Priority != nil {
		prio = fmt.Sprint(*c.Priority)
	}
	if c.Policy != nil && *c.Policy == nftables.ChainPolicyDrop {
		policy = "drop"
	}
	return fmt.Sprintf("chain %s { type %s hook %s priority %s; policy %s; }", c.Name, c.Type, hook, prio, policy)
}

// FormatGuardRule renders one rule's expressions in nft's syntax; it knows
// the expressions GuardRules uses and marks any other as "?TYPE".
func FormatRule(exprs []expr.Any) string {
	var parts []string
	load := "" // what register 1 holds, in nft's words
	for _, e := range exprs {
		switch e := e.(type) {
		case *expr.Meta:
			switch e.Key {
			case expr.MetaKeyIIFNAME:
				load = "iifname"
			case expr.MetaKeyOIFNAME:
				load = "oifname"
			case expr.MetaKeyNFPROTO:
				load = "meta nfproto"
			case expr.MetaKeyL4PROTO:
				load = "meta l4proto"
			default:
				load = fmt.Sprintf("meta key %d", e.Key)
			}
		case *expr.Ct:
			load = fmt.Sprintf("ct key %d", e.Key)
			if e.Key == expr.CtKeySTATE {
				load = "ct state"
			}
		case *expr.Bitwise:
			if load == "ct state" && len(e.Mask) == 4 {
				load = "ct state&" + ctStates(binary.NativeEndian.Uint32(e.Mask))
			} else {
				load += fmt.Sprintf(" & %x ^ %x", e.Mask, e.Xor)
			}
		case *expr.Payload:
			load = fmt.Sprintf("payload base %d offset %d len %d", e.Base, e.Offset, e.Len)
			switch {
			case e.Base == expr.PayloadBaseNetworkHeader && e.Offset == 16 && e.Len == 4:
				load = "ip daddr"
			case e.Base == expr.PayloadBaseTransportHeader && e.Offset == 2 && e.Len == 2:
				load = "th dport"
			}
		case *expr.Cmp:
			parts = append(parts, formatCmp(load, e))
		case *expr.Verdict:
			switch e.Kind {
			case expr.VerdictAccept:
				parts = append(parts, "accept")
			case expr.VerdictDrop:
				parts = append(parts, "drop")
			default:
				parts = append(parts, fmt.Sprintf("verdict %d", e.Kind))
			}
		case *expr.Reject:
			if e.Type == unix.NFT_REJECT_ICMPX_UNREACH && e.Code == unix.NFT_REJECT_ICMPX_ADMIN_PROHIBITED {
				parts = append(parts, "reject with icmpx admin-prohibited")
			} else {
				parts = append(parts, fmt.Sprintf("reject type %d code %d", e.Type, e.Code))
			}
		default:
			parts = append(parts, fmt.Sprintf("?%T", e))
		}
	}
	return strings.Join(parts, " ")
}

func formatCmp(load string, c *expr.Cmp) string {
	op := ""
	if c.Op != expr.CmpOpEq {
		op = fmt.Sprintf("op%d ", c.Op)
		if c.Op == expr.CmpOpNeq {
			op = "!= "
		}
	}
	val := fmt.Sprintf("0x%x", c.Data)
	switch {
	case load == "iifname" || load == "oifname":
		val = fmt.Sprintf("%q", strings.TrimRight(string(c.Data), "\x00"))
	case load == "ip daddr" && len(c.Data) == 4:
		val = netip.AddrFrom4([4]byte(c.Data)).String()
	case load == "th dport" && len(c.Data) == 2:
		val = fmt.Sprint(binary.BigEndian.Uint16(c.Data))
	case load == "meta nfproto" && len(c.Data) == 1 && c.Data[0] == unix.NFPROTO_IPV4:
		val = "ipv4"
	case load == "meta l4proto" && len(c.Data) == 1 && c.Data[0] == unix.IPPROTO_TCP:
		val = "tcp"
	case strings.HasPrefix(load, "ct state&") && c.Op == expr.CmpOpNeq && len(c.Data) == 4 && binary.NativeEndian.Uint32(c.Data) == 0:
		// nft prints "ct state established,related" for state&mask != 0.
		return "ct state " + strings.TrimPrefix(load, "ct state&")
	}
	return load + " " + op + val
}

func ctStates(mask uint32) string {
	var s []string
	for _, b := range []struct {
		bit  uint32
		name string
	}{{expr.CtStateBitINVALID, "invalid"}, {expr.CtStateBitESTABLISHED, "established"}, {expr.CtStateBitRELATED, "related"}, {expr.CtStateBitNEW, "new"}, {expr.CtStateBitUNTRACKED, "untracked"}} {
		if mask&b.bit != 0 {
			s = append(s, b.name)
			mask &^= b.bit
		}
	}
	if mask != 0 {
		s = append(s, fmt.Sprintf("0x%x", mask))
	}
	return strings.Join(s, ",")
}
