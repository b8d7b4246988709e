package policy

import (
	"reflect"
	"strings"
	"testing"
)

func TestParseFQN(t *testing.T) {
	valid := []struct {
		in   string
		want FQN
		str  string
	}{
		{"github://acme/aileron-connector-google", FQN{Scheme: "github", Owner: "acme", Repo: "aileron-connector-google"}, "github://acme/aileron-connector-google"},
		{"GitLab://Group/Project.v2/sub/dir", FQN{Scheme: "gitlab", Owner: "Group", Repo: "Project.v2", Subpath: []string{"sub", "dir"}}, "gitlab://Group/Project.v2/sub/dir"},
		{"hub://a_b/c-d", FQN{Scheme: "hub", Owner: "a_b", Repo: "c-d"}, "hub://a_b/c-d"},
		{"local://aileron/demo", FQN{Scheme: "local", Owner: "aileron", Repo: "demo"}, "local://aileron/demo"},
	}
	for _, tc := range valid {
		got, err := ParseFQN(tc.in)
		if err != nil {
			t.Errorf("ParseFQN(%q) error: %v", tc.in, err)
			continue
		}
		if !reflect.DeepEqual(got, tc.want) || got.String() != tc.str {
			t.Errorf("ParseFQN(%q) = %#v (%q), want %#v (%q)", tc.in, got, got.String(), tc.want, tc.str)
		}
	}
	invalid := []struct{ in, msg string }{
		{"", "must not be empty"},
		{"acme/repo", `"acme/repo" must be <scheme>://<owner>/<repo>`},
		{"https://acme/repo", `scheme "https" is not supported`},
		{"github://acme/repo@1.2.3", `remove "@1.2.3" and set connector.version to "1.2.3"`},
		{"ftp://acme/repo@1", `scheme "ftp" is not supported; use github, gitlab, hub or local (e.g. "github://acme/repo"); "ftp://acme/repo@1" must not carry a version`},
		{"github://acme", "must name an owner and a repository"},
		{"github://acme/", "must name an owner and a repository"},
		{"github://acme/repo//x", "has an empty subpath segment"},
		{"github://acme/./x", `repository "." is not allowed`},
		{"github://ac%me/repo", `owner "ac%me" may only contain`},
		{"github://acme/repo#x", "must not contain a query or fragment"},
		{" github://acme/repo", "must not contain whitespace"},
	}
	for _, tc := range invalid {
		_, err := ParseFQN(tc.in)
		if err == nil || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("ParseFQN(%q) error = %v, want it to contain %q", tc.in, err, tc.msg)
		}
	}
}

// TestParseHostPort checks policy's wrappers delegate to the one host
// grammar (internal/hostport, which has the full table and the fuzzers).
func TestParseHostPort(t *testing.T) {
	for _, tc := range []struct {
		in   string
		host string
		port int
		norm string
	}{
		{"API.Example.COM.:8443", "api.example.com", 8443, "api.example.com:8443"},
		{"[::1]", "::1", 0, "[::1]:443"},
		{"Bücher.example", "xn--bcher-kva.example", 0, "xn--bcher-kva.example:443"},
	} {
		host, port, err := ParseHostPort(tc.in)
		if err != nil || host != tc.host || port != tc.port {
			t.Errorf("ParseHostPort(%q) = %q, %d, %v; want %q, %d, nil", tc.in, host, port, err, tc.host, tc.port)
		}
		if got := NormalizeHost(tc.in); got != tc.norm {
			t.Errorf("NormalizeHost(%q) = %q, want %q", tc.in, got, tc.norm)
		}
	}
	if _, _, err := ParseHostPort("*.example.com"); err == nil || !strings.Contains(err.Error(), "wildcards are not supported") {
		t.Errorf("ParseHostPort(wildcard) error = %v, want a wildcard refusal", err)
	}
	if got := NormalizeHost("::1"); got != "" {
		t.Errorf("NormalizeHost(%q) = %q, want \"\" for an invalid host", "::1", got)
	}
}

func TestNames(t *testing.T) {
	for _, tc := range []struct {
		name  string
		valid bool
	}{
		{"gmail.messages.search", true}, {"repo:read", true}, {"A-b_c.1", true}, {strings.Repeat("x", 128), true},
		{"", false}, {"a b", false}, {"a/b", false}, {"é", false}, {strings.Repeat("x", 129), false}, {"a@b", false},
	} {
		if got := IsValidName(tc.name); got != tc.valid {
			t.Errorf("IsValidName(%q) = %v, want %v", tc.name, got, tc.valid)
		}
	}
	for _, tc := range []struct {
		cmd  string
		safe bool
	}{
		{"gh-api", true}, {"google", true}, {"0x", true}, {"a.b_c-d", true},
		{"", false}, {".", false}, {"..", false}, {"-rf", false}, {".hidden", false}, {"_x", false},
		{"a:b", false}, {"Gh", false}, {"a/b", false}, {"a b", false}, {strings.Repeat("a", 129), false},
	} {
		if got := IsSafeCommandName(tc.cmd); got != tc.safe {
			t.Errorf("IsSafeCommandName(%q) = %v, want %v", tc.cmd, got, tc.safe)
		}
	}
	if got := ToolCommand("GH-Api"); got != "gh-api" {
		t.Errorf("ToolCommand(%q) = %q, want %q", "GH-Api", got, "gh-api")
	}
}

func TestVersions(t *testing.T) {
	for _, tc := range []struct {
		v     string
		valid bool
	}{
		{"1.2.3", true}, {"0.0.0", true}, {"1.0.0-alpha", true}, {"1.0.0-alpha.1", true}, {"1.0.0-0.3.7", true},
		{"1.0.0-x.7.z.92", true}, {"1.0.0+20130313144700", true}, {"1.0.0-beta+exp.sha.5114f85", true}, {"1.0.0+001", true},
		{"", false}, {"1", false}, {"1.2", false}, {"v1.2.3", false}, {"01.2.3", false}, {"1.02.3", false},
		{"1.2.3-", false}, {"1.2.3-01", false}, {"1.2.3+", false}, {"1.2.3-a..b", false}, {"1.2.3.4", false},
		{"1.2.3-a_b", false}, {"1.2.x", false}, {" 1.2.3", false},
	} {
		if got := IsValidVersion(tc.v); got != tc.valid {
			t.Errorf("IsValidVersion(%q) = %v, want %v", tc.v, got, tc.valid)
		}
	}
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"", "", 0}, {"", "0.0.1", -1}, {"0.0.1", "", 1},
		{"1.2.3", "1.10.0", -1}, {"2.0.0", "1.99.99", 1}, {"1.0.0-rc.1", "1.0.0", -1},
		{"1.0.0-alpha", "1.0.0-alpha.1", -1}, {"1.0.0-2", "1.0.0-10", -1}, {"1.0.0+a", "1.0.0+b", 0},
	} {
		if got := compareVersions(tc.a, tc.b); got != tc.want {
			t.Errorf("compareVersions(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}
