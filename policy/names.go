package policy

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"golang.org/x/mod/semver"

	"github.com/aileron-dev/aileron-proxy/internal/hostport"
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

// ParseHostPort parses an operation host entry or a CONNECT target with
// the one host grammar (internal/hostport): host in normal form (lower
// case, punycode, no trailing dot, IPv6 unbracketed), port 0 when absent.
func ParseHostPort(s string) (host string, port int, err error) {
	hp, err := hostport.New(s)
	return hp.Host, hp.Port, err
}

// NormalizeHost returns hostport in the form the matcher compares: normal
// form with a port, 443 when absent ("API.x.com" → "api.x.com:443"). It
// returns "" for input ParseHostPort refuses, so comparisons fail closed.
func NormalizeHost(hostport string) string { return normalizeHost(hostport) }

func normalizeHost(s string) string { return hostport.Normalize(s, 443) }
