package ca

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"

	"golang.org/x/net/idna"
)

// maxDNSNameLen is the longest DNS name in presentation form without the
// trailing dot (RFC 1035 section 2.3.4).
const maxDNSNameLen = 253

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
// canonical form. A port, when present, is dropped after checking it is a
// number in 1-65535. Wildcards, IPv6 zones, empty labels and characters that
// cannot appear in a hostname are refused.
func normalizeHost(s string) (hostName, error) {
	h, err := stripPort(strings.TrimSpace(s))
	if err != nil {
		return hostName{}, err
	}
	if h == "" {
		return hostName{}, errors.New("empty host; give a hostname or an IP literal")
	}
	if ip, err := netip.ParseAddr(h); err == nil {
		if ip.Zone() != "" {
			return hostName{}, fmt.Errorf("IPv6 zone %q not allowed; drop the %%zone suffix", ip.Zone())
		}
		ip = ip.Unmap()
		return hostName{name: ip.String(), ip: ip}, nil
	}
	if strings.Contains(h, ":") {
		return hostName{}, errors.New("not a hostname or IP literal; write IPv6 literals as ::1 or [::1]")
	}
	name, err := normalizeDNSName(h)
	if err != nil {
		return hostName{}, err
	}
	return hostName{name: name}, nil
}

// stripPort removes an optional ":port" and IPv6 brackets.
func stripPort(s string) (string, error) {
	if strings.HasPrefix(s, "[") {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return "", errors.New("missing ']' after IPv6 literal; use [::1] or [::1]:443")
		}
		host, rest := s[1:end], s[end+1:]
		if rest != "" {
			if !strings.HasPrefix(rest, ":") {
				return "", fmt.Errorf("unexpected %q after IPv6 literal; use [::1]:443", rest)
			}
			if err := checkPort(rest[1:]); err != nil {
				return "", err
			}
		}
		if _, err := netip.ParseAddr(host); err != nil || !strings.Contains(host, ":") {
			return "", fmt.Errorf("%q inside brackets is not an IPv6 literal", host)
		}
		return host, nil
	}
	if strings.Count(s, ":") != 1 {
		// No port, or an unbracketed IPv6 literal (checked by the caller).
		return s, nil
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return "", fmt.Errorf("splitting host and port: %w", err)
	}
	if err := checkPort(port); err != nil {
		return "", err
	}
	return host, nil
}

func checkPort(p string) error {
	n, err := strconv.Atoi(p)
	if err != nil || n < 1 || n > 65535 || strings.HasPrefix(p, "+") {
		return fmt.Errorf("invalid port %q; use a number in 1-65535 or no port", p)
	}
	return nil
}

// normalizeDNSName lower-cases name, converts internationalized names to
// their punycode form, strips one trailing dot and checks the result is a
// plausible hostname. Underscores are accepted because real API hosts use them.
func normalizeDNSName(name string) (string, error) {
	name = strings.TrimSuffix(name, ".")
	if !isASCII(name) {
		a, err := idna.Lookup.ToASCII(name)
		if err != nil {
			return "", fmt.Errorf("converting internationalized name to punycode: %w", err)
		}
		name = a
	}
	name = strings.ToLower(name)
	if name == "" {
		return "", errors.New("empty host; give a hostname or an IP literal")
	}
	if len(name) > maxDNSNameLen {
		return "", fmt.Errorf("hostname is %d characters long; the limit is %d", len(name), maxDNSNameLen)
	}
	if strings.Contains(name, "*") {
		return "", errors.New("wildcards are not supported; list each host the session intercepts")
	}
	for label := range strings.SplitSeq(name, ".") {
		if label == "" {
			return "", errors.New("empty label in hostname; remove the doubled or leading dot")
		}
		if len(label) > 63 {
			return "", fmt.Errorf("label %q is longer than 63 characters", label)
		}
		if label[0] == '-' || label[len(label)-1] == '-' {
			return "", fmt.Errorf("label %q starts or ends with '-'", label)
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' && c != '_' {
				return "", fmt.Errorf("character %q not allowed in a hostname", c)
			}
		}
	}
	if last := name[strings.LastIndexByte(name, '.')+1:]; isDigits(last) {
		// Clients parse names like "127.1" or "1.2.3.4.5" as (invalid) IPv4
		// addresses, and no top-level domain is numeric.
		return "", errors.New("numeric top-level label: not a hostname and not an IP literal; write IPv4 addresses in dotted-quad form")
	}
	return name, nil
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}
