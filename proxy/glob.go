package proxy

import (
	"fmt"
	"strings"

	"github.com/aileron-dev/aileron-proxy/internal/hostport"
)

// hostGlob is one compiled passthrough pattern.
type hostGlob struct {
	// exact is the whole host for an exact pattern, empty for a wildcard.
	exact string
	// suffix is ".example.com" for "*.example.com"; it matches one or more
	// labels in front, never the bare domain.
	suffix string
	// port restricts the port; zero means any.
	port int
	// raw is the pattern as configured, for messages.
	raw string
}

// parseHostGlob validates a passthrough pattern: an exact host (DNS name or
// IP literal, IPv6 in brackets) or "*." followed by a domain of at least two
// labels, with an optional ":port". Hosts follow the one host grammar
// (internal/hostport), so a pattern matches exactly the CONNECT targets that
// normalize to it.
func parseHostGlob(s string) (hostGlob, error) {
	raw := s
	p := strings.TrimSpace(s)
	g := hostGlob{raw: raw}
	if p == "" {
		return g, fmt.Errorf("passthrough pattern is empty; use a host such as %q or %q", "registry.example.com", "*.example.com")
	}
	rest, wildcard := strings.CutPrefix(p, "*.")
	if strings.Contains(rest, "*") {
		return g, fmt.Errorf("passthrough pattern %q: a wildcard is allowed only as a single leading \"*.\" (e.g. %q)", raw, "*.example.com")
	}
	hp, err := hostport.New(rest)
	if err != nil {
		return g, fmt.Errorf("passthrough pattern %q: %w", raw, err)
	}
	g.port = hp.Port
	if !wildcard {
		g.exact = hp.Host
		return g, nil
	}
	if hp.IsIP() || !strings.Contains(hp.Host, ".") {
		return g, fmt.Errorf("passthrough pattern %q matches a whole top-level domain or an address range; name a domain such as %q", raw, "*.example.com")
	}
	g.suffix = "." + hp.Host
	return g, nil
}

// match reports whether host (lower-case, unbracketed, no trailing dot) and
// port match the pattern.
func (g hostGlob) match(host string, port int) bool {
	if g.port != 0 && g.port != port {
		return false
	}
	if g.exact != "" {
		return host == g.exact
	}
	return len(host) > len(g.suffix) && strings.HasSuffix(host, g.suffix)
}

// matchPassthrough reports whether any pattern matches.
func matchPassthrough(globs []hostGlob, host string, port int) bool {
	for _, g := range globs {
		if g.match(host, port) {
			return true
		}
	}
	return false
}
