package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"time"

	"github.com/aileron-dev/aileron-proxy/internal/hostport"
)

// refusedPrefixes are the ranges the proxy never dials unless the operator
// mapped the host with Config.Resolve. Addresses are unmapped (::ffff:a.b.c.d
// is checked as a.b.c.d) and NAT64/6to4 embeddings are checked as IPv4 too.
var refusedPrefixes = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),          // "this network", unspecified
	netip.MustParsePrefix("10.0.0.0/8"),         // private
	netip.MustParsePrefix("100.64.0.0/10"),      // CGNAT
	netip.MustParsePrefix("127.0.0.0/8"),        // loopback
	netip.MustParsePrefix("169.254.0.0/16"),     // link-local, incl. 169.254.169.254 metadata
	netip.MustParsePrefix("172.16.0.0/12"),      // private
	netip.MustParsePrefix("192.0.0.0/24"),       // IETF protocol assignments
	netip.MustParsePrefix("192.168.0.0/16"),     // private
	netip.MustParsePrefix("198.18.0.0/15"),      // benchmarking
	netip.MustParsePrefix("224.0.0.0/4"),        // multicast
	netip.MustParsePrefix("240.0.0.0/4"),        // reserved, broadcast
	netip.MustParsePrefix("::/96"),              // unspecified, loopback, IPv4-compatible (deprecated)
	netip.MustParsePrefix("64:ff9b:1::/48"),     // local-use NAT64 (RFC 8215): may translate to private IPv4
	netip.MustParsePrefix("::1/128"),            // loopback
	netip.MustParsePrefix("fc00::/7"),           // ULA, incl. fd00:ec2::254 metadata
	netip.MustParsePrefix("fe80::/10"),          // link-local
	netip.MustParsePrefix("fec0::/10"),          // site-local (deprecated)
	netip.MustParsePrefix("ff00::/8"),           // multicast
	netip.MustParsePrefix("fd00:ec2::254/128"),  // AWS metadata (IPv6)
	netip.MustParsePrefix("100::/64"),           // discard-only
	netip.MustParsePrefix("2001:db8::/32"),      // documentation
	netip.MustParsePrefix("169.254.169.254/32"), // cloud metadata (named for clarity)
}

var (
	nat64Prefix = netip.MustParsePrefix("64:ff9b::/96")
	sixToFour   = netip.MustParsePrefix("2002::/16")
)

// isRefusedAddr reports whether the proxy refuses to dial a.
func isRefusedAddr(a netip.Addr) bool {
	if !a.IsValid() {
		return true
	}
	a = a.Unmap()
	if a.Is6() {
		b := a.As16()
		switch {
		case nat64Prefix.Contains(a):
			return isRefusedAddr(netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]}))
		case sixToFour.Contains(a):
			if isRefusedAddr(netip.AddrFrom4([4]byte{b[2], b[3], b[4], b[5]})) {
				return true
			}
		}
	}
	if a.IsLoopback() || a.IsPrivate() || a.IsUnspecified() || a.IsMulticast() ||
		a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast() || a.IsInterfaceLocalMulticast() {
		return true
	}
	for _, p := range refusedPrefixes {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// addressRefusedError says every address of a host is in a refused range.
type addressRefusedError struct {
	host string
}

func (e *addressRefusedError) Error() string {
	return fmt.Sprintf("dialing %s: every address is private, loopback, link-local or otherwise refused; "+
		"map it with --resolve %s=IP:PORT if it is meant to be reachable", e.host, e.host)
}

// dialer resolves names itself, refuses private ranges, and dials exactly
// the address it checked.
type dialer struct {
	resolve  map[string]netip.AddrPort // normalized host:port -> operator address
	resolver *net.Resolver
	net      net.Dialer
	// upstream, when set, is the corporate proxy (upstreamproxy.go).
	upstream *upstreamProxy
}

func newDialer(resolve map[string]netip.AddrPort, timeout time.Duration) *dialer {
	return &dialer{
		resolve:  resolve,
		resolver: &net.Resolver{},
		net:      net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second},
	}
}

// DialContext dials addr ("host:port"). An operator mapping wins and is not
// checked; otherwise every resolved address is checked and the first
// permitted one that answers is used.
func (d *dialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	hp, err := hostport.NewAddr(addr)
	if err != nil {
		return nil, fmt.Errorf("dialing: %w", err)
	}
	if ap, ok := d.resolve[hp.String()]; ok {
		return d.net.DialContext(ctx, network, ap.String())
	}
	if d.upstream != nil && !d.upstream.isDirect(hp.Host, strconv.Itoa(int(hp.Port))) {
		return d.dialViaProxy(ctx, network, hp)
	}
	host, port := hp.Host, hp.Port
	var addrs []netip.Addr
	if ip, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{ip}
	} else {
		addrs, err = d.resolver.LookupNetIP(ctx, "ip", host)
		if err != nil {
			return nil, fmt.Errorf("resolving %s: %w", host, err)
		}
	}
	var firstErr error
	permitted := 0
	for _, ip := range addrs {
		if isRefusedAddr(ip) {
			continue
		}
		permitted++
		c, err := d.net.DialContext(ctx, network, hostport.Join(ip.Unmap().String(), port))
		if err == nil {
			return c, nil
		}
		if firstErr == nil {
			firstErr = err
		}
		if ctx.Err() != nil {
			break
		}
	}
	if permitted == 0 {
		return nil, &addressRefusedError{host: addr}
	}
	return nil, firstErr
}

// isAddressRefused reports whether err comes from the private-address guard.
func isAddressRefused(err error) bool {
	var re *addressRefusedError
	return errors.As(err, &re)
}
