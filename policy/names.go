package policy

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/mod/semver"
)

// maxNameLen bounds tool, operation, input and audit names. Tool names become
// file names of shims, so they must stay well under the 255-byte limit.
const maxNameLen = 128

// fqnSchemes are the FQN schemes a connector may use, in the order messages
// list them.
var fqnSchemes = [...]string{"github", "gitlab", "hub", "local"}

// FQN is a parsed connector name: <scheme>://<owner>/<repo>[/<subpath>...].
type FQN struct {
	// Scheme is one of github, gitlab, hub or local, in lower case.
	Scheme string
	// Owner and Repo are non-empty and made of [A-Za-z0-9._-].
	Owner, Repo string
	// Subpath holds the segments after the repository; nil when there are none.
	Subpath []string
}

// String formats f as <scheme>://<owner>/<repo>[/<subpath>...]; it is the
// normalized form ParseSpec stores in connector.fqn.
func (f FQN) String() string {
	var b strings.Builder
	b.WriteString(f.Scheme)
	b.WriteString("://")
	b.WriteString(f.Owner)
	b.WriteByte('/')
	b.WriteString(f.Repo)
	for _, s := range f.Subpath {
		b.WriteByte('/')
		b.WriteString(s)
	}
	return b.String()
}

// ParseFQN parses a connector FQN such as github://acme/aileron-connector-google.
// The scheme is matched case-insensitively and returned in lower case; owner,
// repository and subpath segments are kept as written. A version suffix
// ("@1.2.3") is refused: the version belongs in connector.version. When s has
// several problems the error lists them all, separated by "; ".
func ParseFQN(s string) (FQN, error) {
	f, problems := parseFQN(s)
	if len(problems) > 0 {
		return FQN{}, errors.New(strings.Join(problems, "; "))
	}
	return f, nil
}

// parseFQN returns the parsed FQN and every problem with s, each a complete
// message that quotes the bad part and says how to fix it.
func parseFQN(s string) (FQN, []string) {
	const form = "<scheme>://<owner>/<repo>[/<subpath>...], e.g. \"github://acme/aileron-connector-google\""
	var problems []string
	if s == "" {
		return FQN{}, []string{"must not be empty; use " + form}
	}
	if strings.TrimSpace(s) != s || strings.ContainsAny(s, " \t\r\n") {
		return FQN{}, []string{fmt.Sprintf("%q must not contain whitespace; use %s", s, form)}
	}
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok {
		return FQN{}, []string{fmt.Sprintf("%q must be %s", s, form)}
	}
	var f FQN
	f.Scheme = strings.ToLower(scheme)
	version := ""
	if at := strings.IndexByte(rest, '@'); at >= 0 {
		rest, version = rest[:at], rest[at+1:]
	}
	if !slices.Contains(fqnSchemes[:], f.Scheme) {
		problems = append(problems, fmt.Sprintf("scheme %q is not supported; use github, gitlab, hub or local (e.g. \"github://%s\")", scheme, rest))
	}
	if strings.Contains(s, "@") {
		problems = append(problems, fmt.Sprintf("%q must not carry a version; remove %q and set connector.version to %q", s, "@"+version, strings.TrimPrefix(version, "v")))
	}
	if strings.ContainsAny(rest, "?#") {
		problems = append(problems, fmt.Sprintf("%q must not contain a query or fragment; use %s", s, form))
		return FQN{}, problems
	}
	segs := strings.Split(rest, "/")
	if len(segs) < 2 || segs[0] == "" || segs[1] == "" {
		problems = append(problems, fmt.Sprintf("%q must name an owner and a repository: %s", s, form))
		return FQN{}, problems
	}
	for i, seg := range segs {
		what := "subpath segment"
		switch i {
		case 0:
			what = "owner"
		case 1:
			what = "repository"
		}
		switch {
		case seg == "":
			problems = append(problems, fmt.Sprintf("%q has an empty %s; remove the extra \"/\"", s, what))
		case seg == "." || seg == "..":
			problems = append(problems, fmt.Sprintf("%s %q is not allowed; use a real name", what, seg))
		case !isFQNSegment(seg):
			problems = append(problems, fmt.Sprintf("%s %q may only contain letters, digits, '.', '_' and '-'", what, seg))
		}
	}
	if len(problems) > 0 {
		return FQN{}, problems
	}
	f.Owner, f.Repo = segs[0], segs[1]
	if len(segs) > 2 {
		f.Subpath = append([]string(nil), segs[2:]...)
	}
	return f, nil
}

// isFQNSegment reports whether s is made of [A-Za-z0-9._-] only.
func isFQNSegment(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !isAlnum(c) && c != '.' && c != '_' && c != '-' {
			return false
		}
	}
	return s != ""
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// IsValidName reports whether s is a valid tool, operation, input or audit
// field name: 1 to 128 characters matching ^[A-Za-z0-9._:-]+$.
func IsValidName(s string) bool {
	if s == "" || len(s) > maxNameLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !isAlnum(c) && c != '.' && c != '_' && c != ':' && c != '-' {
			return false
		}
	}
	return true
}

// ToolCommand returns the command name a tool is exposed as in the sandbox
// (the shim file name and the word in tools.txt): the tool name in lower case.
// Conflicts between connectors are detected on this form.
func ToolCommand(toolName string) string { return strings.ToLower(toolName) }

// IsSafeCommandName reports whether cmd can be used as a shim file name and a
// shell command word: it matches ^[a-z0-9][a-z0-9._-]*$ (so it is never "."
// or "..", never starts with '-', and holds no ':' or '/') and is at most 128
// bytes long. Validation requires it of ToolCommand(name) for every tool.
func IsSafeCommandName(cmd string) bool {
	if cmd == "" || len(cmd) > maxNameLen || cmd == "." || cmd == ".." {
		return false
	}
	for i := 0; i < len(cmd); i++ {
		c := cmd[i]
		lowerAlnum := c >= 'a' && c <= 'z' || c >= '0' && c <= '9'
		if i == 0 && !lowerAlnum {
			return false
		}
		if !lowerAlnum && c != '.' && c != '_' && c != '-' {
			return false
		}
	}
	return true
}

// IsValidVersion reports whether v is a strict semantic version 2.0.0:
// MAJOR.MINOR.PATCH with optional -prerelease and +build parts, no leading
// "v" and no leading zeros in numeric identifiers.
func IsValidVersion(v string) bool {
	rest, build, hasBuild := strings.Cut(v, "+")
	if hasBuild && !dotIdents(build, false) {
		return false
	}
	core, pre, hasPre := strings.Cut(rest, "-")
	if hasPre && !dotIdents(pre, true) {
		return false
	}
	parts := strings.Split(core, ".")
	if len(parts) != 3 {
		return false
	}
	for _, p := range parts {
		if !isNumericIdent(p) {
			return false
		}
	}
	return true
}

// dotIdents checks dot-separated prerelease or build identifiers; numeric
// prerelease identifiers must not have leading zeros.
func dotIdents(s string, prerelease bool) bool {
	for _, id := range strings.Split(s, ".") {
		if id == "" {
			return false
		}
		allDigits := true
		for i := 0; i < len(id); i++ {
			c := id[i]
			if !isAlnum(c) && c != '-' {
				return false
			}
			if c < '0' || c > '9' {
				allDigits = false
			}
		}
		if prerelease && allDigits && !isNumericIdent(id) {
			return false
		}
	}
	return true
}

// isNumericIdent reports whether s is 0 or a decimal number without a
// leading zero.
func isNumericIdent(s string) bool {
	if s == "" || len(s) > 1 && s[0] == '0' {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// compareVersions orders connector versions: an empty (unversioned) version
// sorts below every version, others by semantic-version precedence (build
// metadata ignored). It returns -1, 0 or +1.
func compareVersions(a, b string) int {
	switch {
	case a == "" && b == "":
		return 0
	case a == "":
		return -1
	case b == "":
		return 1
	}
	return semver.Compare("v"+a, "v"+b)
}

// ParseHostPort parses an operation host entry or a CONNECT target: a DNS
// name or an IP literal (IPv6 in brackets), optionally followed by ":port".
// The host is returned in lower case without a trailing dot, IPv6 without
// brackets and in canonical form; port is 0 when absent. Schemes, paths,
// queries, fragments, userinfo, whitespace, wildcards, zones and non-ASCII
// names are refused with a message that quotes s and says what to use.
func ParseHostPort(s string) (host string, port int, err error) {
	const form = "host[:port], e.g. \"api.example.com\" or \"api.example.com:8443\""
	switch {
	case s == "":
		return "", 0, fmt.Errorf("must not be empty; use %s", form)
	case strings.Contains(s, "://"):
		return "", 0, fmt.Errorf("%q must be host[:port] without a scheme or path", s)
	case strings.ContainsFunc(s, isSpaceOrControl):
		return "", 0, fmt.Errorf("%q must not contain whitespace or control characters; use %s", s, form)
	case strings.Contains(s, "@"):
		return "", 0, fmt.Errorf("%q must not contain userinfo (%q); use %s, and declare credentials with the operation's credential field", s, s[:strings.LastIndexByte(s, '@')+1], form)
	case strings.Contains(s, "/"):
		return "", 0, fmt.Errorf("%q must be host[:port] without a scheme or path", s)
	case strings.Contains(s, "?"):
		return "", 0, fmt.Errorf("%q must not contain a query (\"?\"); use %s", s, form)
	case strings.Contains(s, "#"):
		return "", 0, fmt.Errorf("%q must not contain a fragment (\"#\"); use %s", s, form)
	}
	hostPart, portPart, hasPort, err := splitHostPort(s)
	if err != nil {
		return "", 0, err
	}
	if hasPort {
		if port, err = parsePort(s, portPart); err != nil {
			return "", 0, err
		}
	}
	if strings.HasPrefix(hostPart, "[") {
		addr, err := netip.ParseAddr(hostPart[1 : len(hostPart)-1])
		if err != nil || !addr.Is6() || addr.Zone() != "" {
			return "", 0, fmt.Errorf("%q: %q is not a valid IPv6 address (zones are not allowed); use a literal like \"[2001:db8::1]:8443\"", s, hostPart)
		}
		return addr.String(), port, nil
	}
	host, err = normalizeHostName(s, hostPart)
	if err != nil {
		return "", 0, err
	}
	return host, port, nil
}

func isSpaceOrControl(r rune) bool {
	return r <= ' ' || r == 0x7f || r == 0x85 || r == 0xa0 || r == 0x2028 || r == 0x2029 || r == 0xfeff
}

// splitHostPort splits s into its host and port parts, requiring brackets
// around IPv6 literals.
func splitHostPort(s string) (hostPart, portPart string, hasPort bool, err error) {
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
	if !isNumericIdent(p) || len(p) > 5 {
		return 0, fmt.Errorf("%q: port %q must be a decimal number 1-65535 without leading zeros", s, p)
	}
	n, _ := strconv.Atoi(p)
	if n < 1 || n > 65535 {
		return 0, fmt.Errorf("%q: port %d is out of range; use 1-65535", s, n)
	}
	return n, nil
}

// normalizeHostName checks a DNS name or IPv4 literal and returns it in
// lower case without a trailing dot.
func normalizeHostName(s, h string) (string, error) {
	if h == "" {
		return "", fmt.Errorf("%q has an empty host; use host[:port], e.g. \"api.example.com\"", s)
	}
	if strings.HasPrefix(h, "*") {
		return "", fmt.Errorf("%q: wildcards are not supported; list each host the operation calls", s)
	}
	for _, r := range h {
		if r >= 0x80 {
			return "", fmt.Errorf("%q must be ASCII; write internationalized names in their punycode form (\"xn--...\")", s)
		}
	}
	h = strings.ToLower(strings.TrimSuffix(h, "."))
	if addr, err := netip.ParseAddr(h); err == nil {
		if !addr.Is4() {
			return "", fmt.Errorf("%q: IPv6 literals must be in brackets, e.g. \"[2001:db8::1]\"", s)
		}
		return addr.String(), nil
	}
	if len(h) > 253 {
		return "", fmt.Errorf("%q: host name is longer than 253 characters", s)
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
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
				return "", fmt.Errorf("%q: label %q may only contain letters, digits and '-'", s, l)
			}
		}
	}
	if strings.Trim(labels[len(labels)-1], "0123456789") == "" {
		return "", fmt.Errorf("%q is neither a valid IPv4 address nor a DNS name (the last label is all digits)", s)
	}
	return h, nil
}

// formatHostPort renders a host (as ParseHostPort returns it) and port;
// port 0 is omitted.
func formatHostPort(host string, port int) string {
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	if port == 0 {
		return host
	}
	return host + ":" + strconv.Itoa(port)
}

// NormalizeHost returns hostport in the form the matcher compares: lower
// case, no trailing dot, canonical IPv6 in brackets, and always a port (443
// when absent): "API.x.com" → "api.x.com:443", "[::1]:8443" → "[::1]:8443".
// It returns "" for input ParseHostPort refuses, which never equals a
// normalized host, so callers comparing against spec hosts fail closed.
func NormalizeHost(hostport string) string {
	host, port, err := ParseHostPort(hostport)
	if err != nil {
		return ""
	}
	if port == 0 {
		port = 443
	}
	return formatHostPort(host, port)
}
