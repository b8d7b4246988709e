package ca

import (
	"net/netip"
	"strings"

	"github.com/aileron-dev/aileron-proxy/internal/hostport"
)

// hostName is a normalized host: a lower-case ASCII DNS name without a
// trailing dot, or an IP literal in canonical form. ip is valid iff the host
// is an IP literal.
type hostName struct {
	name string
	ip   netip.Addr
}

// isIP reports whether the host is an IP literal.
func (h hostName) isIP() bool { return h.ip.IsValid() }

// normalizeHost turns a host as a caller may spell it ("API.Example.com.",
// "api.example.com:443", "[::1]:8443", "::1", "Bücher.example") into its
// normal form with the one host grammar (internal/hostport). A port, when
// present, is checked and dropped; unbracketed IPv6 literals are accepted.
func normalizeHost(s string) (hostName, error) {
	var name string
	var err error
	if strings.Count(s, ":") > 1 && !strings.HasPrefix(s, "[") {
		name, err = hostport.NewHost(s)
	} else {
		var hp hostport.HostPort
		hp, err = hostport.New(s)
		name = hp.Host
	}
	if err != nil {
		return hostName{}, err
	}
	h := hostName{name: name}
	if ip, err := netip.ParseAddr(name); err == nil {
		h.ip = ip
	}
	return h, nil
}
