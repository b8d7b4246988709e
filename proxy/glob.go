package proxy

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
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
// IP literal) or "*." followed by a domain of at least two labels, with an
// optional ":port".
func parseHostGlob(s string) (hostGlob, error) {
	raw := s
	p := strings.ToLower(strings.TrimSpace(s))
	g := hostGlob{raw: raw}
	if p == "" {
		return g, fmt.Errorf("passthrough pattern is empty; use a host such as %q or %q", "registry.example.com", "*.example.com")
	}
	host := p
	if strings.HasPrefix(p, "[") || strings.Count(p, ":") == 1 {
		h, port, err := net.SplitHostPort(p)
		if err != nil {
			return g, fmt.Errorf("passthrough pattern %q: %w; use host or host:port", raw, err)
		}
		n, err := strconv.Atoi(port)
		if err != nil || n < 1 || n > 65535 {
			return g, fmt.Errorf("passthrough pattern %q: port %q is not 1-65535", raw, port)
		}
		host, g.port = h, n
	}
	host = strings.TrimSuffix(host, ".")
	if addr, err := netip.ParseAddr(host); err == nil {
		g.exact = addr.Unmap().String()
		return g, nil
	}
	if strings.HasPrefix(host, "*.") {
		rest := host[2:]
		if strings.Contains(rest, "*") {
			return g, fmt.Errorf("passthrough pattern %q: only one leading \"*.\" wildcard is allowed", raw)
		}
		if err := checkDNSName(rest); err != nil {
			return g, fmt.Errorf("passthrough pattern %q: %w", raw, err)
		}
		if !strings.Contains(rest, ".") {
			return g, fmt.Errorf("passthrough pattern %q matches a whole top-level domain; name a domain such as %q", raw, "*.example.com")
		}
		g.suffix = "." + rest
		return g, nil
	}
	if strings.Contains(host, "*") {
		return g, fmt.Errorf("passthrough pattern %q: a wildcard is allowed only as a leading \"*.\" (e.g. %q)", raw, "*.example.com")
	}
	if err := checkDNSName(host); err != nil {
		return g, fmt.Errorf("passthrough pattern %q: %w", raw, err)
	}
	g.exact = host
	return g, nil
}

// checkDNSName accepts lower-case letters, digits, '-' and '_' in labels of
// 1 to 63 characters.
func checkDNSName(h string) error {
	if h == "" || len(h) > 253 {
		return fmt.Errorf("host %q is not a DNS name", h)
	}
	for label := range strings.SplitSeq(h, ".") {
		if label == "" || len(label) > 63 {
			return fmt.Errorf("host %q has an empty or over-long label", h)
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return fmt.Errorf("host %q has the character %q; use letters, digits and '-'", h, c)
			}
		}
	}
	return nil
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

// splitTarget splits a normalized host:port into the unbracketed lower-case
// host without a trailing dot and the port.
func splitTarget(hostport string) (string, int, error) {
	h, p, err := net.SplitHostPort(hostport)
	if err != nil {
		return "", 0, fmt.Errorf("splitting %q: %w", hostport, err)
	}
	n, err := strconv.Atoi(p)
	if err != nil || n < 1 || n > 65535 {
		return "", 0, fmt.Errorf("splitting %q: port %q is not 1-65535", hostport, p)
	}
	return strings.TrimSuffix(strings.ToLower(h), "."), n, nil
}
