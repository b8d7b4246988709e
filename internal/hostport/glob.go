package hostport

import (
	"fmt"
	"strings"
)

// Glob is one compiled host pattern: an exact host, or "*." followed by a
// domain, matching one or more labels in front of it (never the bare
// domain), with an optional port. Passthrough hosts and learn hosts use it.
type Glob struct {
	// exact is the whole host for an exact pattern, empty for a wildcard.
	exact string
	// suffix is ".example.com" for "*.example.com".
	suffix string
	// port restricts the port; zero means any.
	port int
	// raw is the pattern as written, for messages.
	raw string
}

// ParseGlob validates a pattern: an exact host (DNS name or IP literal,
// IPv6 in brackets) or "*." followed by a domain of at least two labels,
// with an optional ":port". what names the pattern in errors ("passthrough
// pattern", "learn pattern"). Hosts follow the one host grammar, so a
// pattern matches exactly the CONNECT targets that normalize to it.
func ParseGlob(s, what string) (Glob, error) {
	raw := s
	p := strings.TrimSpace(s)
	g := Glob{raw: raw}
	if p == "" {
		return g, fmt.Errorf("%s is empty; use a host such as %q or %q", what, "registry.example.com", "*.example.com")
	}
	rest, wildcard := strings.CutPrefix(p, "*.")
	if strings.Contains(rest, "*") {
		return g, fmt.Errorf("%s %q: a wildcard is allowed only as a single leading \"*.\" (e.g. %q)", what, raw, "*.example.com")
	}
	hp, err := New(rest)
	if err != nil {
		return g, fmt.Errorf("%s %q: %w", what, raw, err)
	}
	g.port = hp.Port
	if !wildcard {
		g.exact = hp.Host
		return g, nil
	}
	if hp.IsIP() || !strings.Contains(hp.Host, ".") {
		return g, fmt.Errorf("%s %q matches a whole top-level domain or an address range; name a domain such as %q", what, raw, "*.example.com")
	}
	g.suffix = "." + hp.Host
	return g, nil
}

// ParseGlobs parses every pattern of list, each also split at commas, and
// returns them with their normal spelling (String), de-duplicated in order.
func ParseGlobs(list []string, what string) ([]Glob, error) {
	var out []Glob
	seen := map[string]bool{}
	for _, item := range list {
		for _, p := range strings.Split(item, ",") {
			g, err := ParseGlob(p, what)
			if err != nil {
				return nil, err
			}
			if k := g.String(); !seen[k] {
				seen[k] = true
				out = append(out, g)
			}
		}
	}
	return out, nil
}

// Match reports whether host (normal form, as New returns it) and port
// match the pattern.
func (g Glob) Match(host string, port int) bool {
	if g.port != 0 && g.port != port {
		return false
	}
	if g.exact != "" {
		return host == g.exact
	}
	return len(host) > len(g.suffix) && strings.HasSuffix(host, g.suffix)
}

// Domain returns the host of an exact pattern (wildcard false) or the
// domain below which a wildcard pattern matches (wildcard true).
func (g Glob) Domain() (name string, wildcard bool) {
	if g.exact != "" {
		return g.exact, false
	}
	return strings.TrimPrefix(g.suffix, "."), true
}

// String returns the pattern in normal form: "*.example.com", "api.example.com:8443".
func (g Glob) String() string {
	name, wildcard := g.Domain()
	if wildcard {
		name = "*." + name
	} else if strings.Contains(name, ":") {
		name = "[" + name + "]"
	}
	if g.port != 0 {
		return fmt.Sprintf("%s:%d", name, g.port)
	}
	return name
}

// MatchAny reports whether any pattern matches host and port.
func MatchAny(globs []Glob, host string, port int) bool {
	for _, g := range globs {
		if g.Match(host, port) {
			return true
		}
	}
	return false
}
