// Package hostport is the one grammar for host and host:port strings:
// operation hosts in connector specs, CONNECT targets, Host headers,
// passthrough patterns, resolve entries and certificate names all parse
// here, into one normal form.
//
// The normal form of a host is a lower-case ASCII DNS name without a
// trailing dot, or an IP literal in canonical form (IPv4-mapped IPv6
// unmapped, IPv6 without brackets). Internationalised names are accepted
// and converted to punycode (IDNA 2008 lookup rules), so "Bücher.example"
// and "xn--bcher-kva.example" are the same host everywhere. Labels may hold
// letters, digits, '-' and '_' (real API hosts use underscores).
package hostport

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"golang.org/x/net/idna"
)

// maxNameLen is the longest DNS name in presentation form without the
// trailing dot (RFC 1035 section 2.3.4).
const maxNameLen = 253

const form = "host[:port], e.g. \"api.example.com\" or \"api.example.com:8443\""

// HostPort is a parsed host and optional port in normal form.
type HostPort struct {
	// Host is a lower-case ASCII DNS name without a trailing dot, or an IP
	// literal in canonical form without brackets.
	Host string
	// Port is 1-65535, or 0 when the input had none.
	Port int
}

// New parses s, a DNS name or an IP literal (IPv6 in brackets), optionally
// followed by ":port", into its normal form. Schemes, paths, queries,
// fragments, userinfo, whitespace, wildcards, zones, empty labels and
// ports outside 1-65535 are refused with a message that quotes s and says
// what to write instead.
func New(s string) (HostPort, error) {
	if err := checkShape(s); err != nil {
		return HostPort{}, err
	}
	hostPart, portPart, hasPort, err := split(s)
	if err != nil {
		return HostPort{}, err
	}
	var hp HostPort
	if hasPort {
		if hp.Port, err = parsePort(s, portPart); err != nil {
			return HostPort{}, err
		}
	}
	if strings.HasPrefix(hostPart, "[") {
		addr, err := netip.ParseAddr(hostPart[1 : len(hostPart)-1])
		if err != nil || !addr.Is6() || addr.Zone() != "" {
			return HostPort{}, fmt.Errorf("%q: %q is not a valid IPv6 address (zones are not allowed); use a literal like \"[2001:db8::1]:8443\"", s, hostPart)
		}
		hp.Host = addr.Unmap().String()
		return hp, nil
	}
	if hp.Host, err = normalizeName(s, hostPart); err != nil {
		return HostPort{}, err
	}
	return hp, nil
}

// NewAddr parses a dial or listen address: host:port as New parses it,
// with the port required.
func NewAddr(s string) (HostPort, error) {
	hp, err := New(s)
	if err != nil {
		return HostPort{}, err
	}
	if hp.Port == 0 {
		return HostPort{}, fmt.Errorf("%q has no port; use host:port, e.g. \"127.0.0.1:8443\"", s)
	}
	return hp, nil
}

// NewHost parses a host without a port: a DNS name or an IP literal, IPv6
// with or without brackets (certificate names and dialled hosts spell it
// both ways). It returns the normal form.
func NewHost(s string) (string, error) {
	if strings.Count(s, ":") > 1 && !strings.HasPrefix(s, "[") {
		if err := checkShape(s); err != nil {
			return "", err
		}
		addr, err := netip.ParseAddr(s)
		if err != nil || addr.Zone() != "" {
			return "", fmt.Errorf("%q is not a DNS name or IP literal (IPv6 zones are not allowed); use a name like \"api.example.com\" or a literal like \"2001:db8::1\"", s)
		}
		return addr.Unmap().String(), nil
	}
	hp, err := New(s)
	if err != nil {
		return "", err
	}
	if hp.Port != 0 {
		return "", fmt.Errorf("%q must be a host without a port; remove \":%d\"", s, hp.Port)
	}
	return hp.Host, nil
}

// Normalize returns s in normal form with a port, defaultPort when s has
// none ("API.x.com." → "api.x.com:443"). It returns "" for input New
// refuses, which never equals a normalized host, so comparisons fail
// closed. A DNS name already in normal form with a port is returned as is,
// without allocating (the matcher calls this per request).
func Normalize(s string, defaultPort int) string {
	if isNormalName(s) {
		return s
	}
	hp, err := New(s)
	if err != nil {
		return ""
	}
	return hp.WithDefaultPort(defaultPort).String()
}

// WithDefaultPort returns hp with Port set to port when it has none.
func (hp HostPort) WithDefaultPort(port int) HostPort {
	if hp.Port == 0 {
		hp.Port = port
	}
	return hp
}

// IsIP reports whether the host is an IP literal.
func (hp HostPort) IsIP() bool {
	_, err := netip.ParseAddr(hp.Host)
	return err == nil
}

// String formats hp as host[:port], IPv6 in brackets; port 0 is omitted.
// New(hp.String()) returns hp for every hp New returned.
func (hp HostPort) String() string { return Join(hp.Host, hp.Port) }

// Join renders a host in normal form and a port; port 0 is omitted.
func Join(host string, port int) string {
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	if port == 0 {
		return host
	}
	return host + ":" + strconv.Itoa(port)
}

// checkShape refuses the things that make s something other than
// host[:port]: emptiness, schemes, paths, userinfo, queries, fragments,
// whitespace and control characters.
func checkShape(s string) error {
	switch {
	case s == "":
		return fmt.Errorf("must not be empty; use %s", form)
	case strings.Contains(s, "://"):
		return fmt.Errorf("%q must be host[:port] without a scheme or path", s)
	case strings.ContainsFunc(s, isSpaceOrControl):
		return fmt.Errorf("%q must not contain whitespace or control characters; use %s", s, form)
	case strings.Contains(s, "@"):
		return fmt.Errorf("%q must not contain userinfo (%q); use %s", s, s[:strings.LastIndexByte(s, '@')+1], form)
	case strings.Contains(s, "/"):
		return fmt.Errorf("%q must be host[:port] without a scheme or path", s)
	case strings.Contains(s, "?"):
		return fmt.Errorf("%q must not contain a query (\"?\"); use %s", s, form)
	case strings.Contains(s, "#"):
		return fmt.Errorf("%q must not contain a fragment (\"#\"); use %s", s, form)
	}
	return nil
}

func isSpaceOrControl(r rune) bool {
	return r <= ' ' || r == 0x7f || r == 0x85 || r == 0xa0 || r == 0x2028 || r == 0x2029 || r == 0xfeff
}

// split splits s into its host and port parts, requiring brackets around
// IPv6 literals.
func split(s string) (hostPart, portPart string, hasPort bool, err error) {
	if strings.HasPrefix(s, "[") {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return "", "", false, fmt.Errorf("%q has an unclosed \"[\"; write IPv6 literals as \"[2001:db8::1]\" or \"[2001:db8::1]:8443\"", s)
		}
		hostPart, rest := s[:end+1], s[end+1:]
		if rest == "" {
			return hostPart, "", false, nil
		}
		if rest[0] != ':' {
			return "", "", false, fmt.Errorf("%q has %q after the IPv6 literal; only \":port\" may follow", s, rest)
		}
		return hostPart, rest[1:], true, nil
	}
	if strings.ContainsAny(s, "[]") {
		return "", "", false, fmt.Errorf("%q: brackets are only allowed around a whole IPv6 literal, e.g. \"[2001:db8::1]:8443\"", s)
	}
	switch strings.Count(s, ":") {
	case 0:
		return s, "", false, nil
	case 1:
		h, p, _ := strings.Cut(s, ":")
		return h, p, true, nil
	default:
		return "", "", false, fmt.Errorf("%q: IPv6 literals must be in brackets, e.g. \"[2001:db8::1]\" or \"[2001:db8::1]:8443\"", s)
	}
}

func parsePort(s, p string) (int, error) {
	if p == "" {
		return 0, fmt.Errorf("%q has an empty port; remove the \":\" or add a port 1-65535", s)
	}
	if len(p) > 5 || len(p) > 1 && p[0] == '0' || strings.Trim(p, "0123456789") != "" {
		return 0, fmt.Errorf("%q: port %q must be a decimal number 1-65535 without leading zeros", s, p)
	}
	n, _ := strconv.Atoi(p)
	if n < 1 || n > 65535 {
		return 0, fmt.Errorf("%q: port %d is out of range; use 1-65535", s, n)
	}
	return n, nil
}

// normalizeName checks a DNS name or IPv4 literal h (the host part of s)
// and returns it in normal form.
func normalizeName(s, h string) (string, error) {
	if h == "" || h == "." {
		return "", fmt.Errorf("%q has an empty host; use %s", s, form)
	}
	if strings.Contains(h, "*") {
		return "", fmt.Errorf("%q: wildcards are not supported; list each host by name", s)
	}
	if !isASCII(h) {
		a, err := idna.Lookup.ToASCII(h)
		if err != nil {
			return "", fmt.Errorf("%q is not a valid internationalised name (%w); write it in its punycode form (\"xn--...\")", s, err)
		}
		h = a
	}
	h = strings.ToLower(strings.TrimSuffix(h, "."))
	if addr, err := netip.ParseAddr(h); err == nil {
		if !addr.Is4() {
			return "", fmt.Errorf("%q: IPv6 literals must be in brackets, e.g. \"[2001:db8::1]\"", s)
		}
		return addr.String(), nil
	}
	if len(h) > maxNameLen {
		return "", fmt.Errorf("%q: host name is %d characters long; the limit is %d", s, len(h), maxNameLen)
	}
	labels := strings.Split(h, ".")
	for _, l := range labels {
		if l == "" {
			return "", fmt.Errorf("%q has an empty label (\"..\" or a leading \".\"); use a name like \"api.example.com\"", s)
		}
		if len(l) > 63 {
			return "", fmt.Errorf("%q: label %q is longer than 63 characters", s, l)
		}
		if l[0] == '-' || l[len(l)-1] == '-' {
			return "", fmt.Errorf("%q: label %q must not start or end with '-'", s, l)
		}
		for i := 0; i < len(l); i++ {
			c := l[i]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return "", fmt.Errorf("%q: label %q may only contain letters, digits, '-' and '_'", s, l)
			}
		}
	}
	if strings.Trim(labels[len(labels)-1], "0123456789") == "" {
		// Clients parse names like "127.1" or "1.2.3.4.5" as (invalid) IPv4
		// addresses, and no top-level domain is numeric.
		return "", fmt.Errorf("%q is neither a valid IPv4 address nor a DNS name (the last label is all digits); write IPv4 addresses in dotted-quad form", s)
	}
	return h, nil
}

// isNormalName reports whether s is "name:port" with name a DNS name New
// accepts unchanged and port in normal form. It only decides the fast
// path of Normalize; FuzzNew checks it agrees with New.
func isNormalName(s string) bool {
	i := strings.LastIndexByte(s, ':')
	if i <= 0 || len(s) > maxNameLen+6 {
		return false
	}
	host, port := s[:i], s[i+1:]
	if port == "" || len(port) > 5 || port[0] == '0' {
		return false
	}
	n := 0
	for j := 0; j < len(port); j++ {
		if port[j] < '0' || port[j] > '9' {
			return false
		}
		n = n*10 + int(port[j]-'0')
	}
	if n > 65535 || len(host) > maxNameLen {
		return false
	}
	start, digitsOnly := 0, true
	for j := 0; j <= len(host); j++ {
		if j < len(host) && host[j] != '.' {
			c := host[j]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return false
			}
			if c < '0' || c > '9' {
				digitsOnly = false
			}
			continue
		}
		l := host[start:j]
		if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return false
		}
		if j < len(host) {
			start, digitsOnly = j+1, true
		}
	}
	return !digitsOnly
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}
