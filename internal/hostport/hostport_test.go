package hostport

import (
	"strings"
	"testing"
)

var validCases = []struct {
	in   string
	want HostPort
	norm string // Normalize(in, 443)
}{
	{"api.example.com", HostPort{"api.example.com", 0}, "api.example.com:443"},
	{"API.Example.COM:8443", HostPort{"api.example.com", 8443}, "api.example.com:8443"},
	{"api.example.com.", HostPort{"api.example.com", 0}, "api.example.com:443"},
	{"api.example.com.:80", HostPort{"api.example.com", 80}, "api.example.com:80"},
	{"localhost:1", HostPort{"localhost", 1}, "localhost:1"},
	{"127.0.0.1", HostPort{"127.0.0.1", 0}, "127.0.0.1:443"},
	{"[::1]:8443", HostPort{"::1", 8443}, "[::1]:8443"},
	{"[2001:DB8:0:0::1]", HostPort{"2001:db8::1", 0}, "[2001:db8::1]:443"},
	{"[::ffff:1.2.3.4]:80", HostPort{"1.2.3.4", 80}, "1.2.3.4:80"},
	{"xn--bcher-kva.example:65535", HostPort{"xn--bcher-kva.example", 65535}, "xn--bcher-kva.example:65535"},
	{"Bücher.example", HostPort{"xn--bcher-kva.example", 0}, "xn--bcher-kva.example:443"},
	{"bücher.example.:8443", HostPort{"xn--bcher-kva.example", 8443}, "xn--bcher-kva.example:8443"},
	{"under_score.example", HostPort{"under_score.example", 0}, "under_score.example:443"},
	{"a-b.c0", HostPort{"a-b.c0", 0}, "a-b.c0:443"},
}

func TestNew(t *testing.T) {
	for _, tc := range validCases {
		got, err := New(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("New(%q) = %+v, %v; want %+v, nil", tc.in, got, err, tc.want)
		}
		if n := Normalize(tc.in, 443); n != tc.norm {
			t.Errorf("Normalize(%q, 443) = %q, want %q", tc.in, n, tc.norm)
		}
		if n := Normalize(Normalize(tc.in, 443), 443); n != tc.norm {
			t.Errorf("Normalize twice (%q) = %q, want %q", tc.in, n, tc.norm)
		}
	}
	invalid := []struct{ in, msg string }{
		{"", "must not be empty"},
		{".", "has an empty host"},
		{":443", "has an empty host"},
		{"https://api.example.com", "without a scheme or path"},
		{"api.example.com/x", "without a scheme or path"},
		{"u@api.example.com", `must not contain userinfo ("u@")`},
		{"api.example.com?", "must not contain a query"},
		{"api.example.com#", "must not contain a fragment"},
		{"api example.com", "must not contain whitespace"},
		{"api.example.com\x00", "whitespace or control characters"},
		{"api.example.com:", "has an empty port"},
		{"api.example.com:0", "port 0 is out of range"},
		{"api.example.com:65536", "port 65536 is out of range"},
		{"api.example.com:+1", `port "+1" must be a decimal number`},
		{"api.example.com:0443", `port "0443" must be a decimal number`},
		{"api.example.com:123456", `port "123456" must be a decimal number`},
		{"a:1:2", "IPv6 literals must be in brackets"},
		{"::1", "IPv6 literals must be in brackets"},
		{"[::1", `unclosed "["`},
		{"[::1]]", `has "]" after the IPv6 literal`},
		{"a[b]", "brackets are only allowed"},
		{"[fe80::1%eth0]", "zones are not allowed"},
		{"[127.0.0.1]", "not a valid IPv6 address"},
		{"*.example.com", "wildcards are not supported"},
		{".example.com", "has an empty label"},
		{"a..example.com", "has an empty label"},
		{"-a.example.com", "must not start or end with '-'"},
		{"a!b.example.com", "may only contain letters, digits, '-' and '_'"},
		{"1.2.3.256", "is neither a valid IPv4 address nor a DNS name"},
		{"127.1", "is neither a valid IPv4 address nor a DNS name"},
		{"example.123", "is neither a valid IPv4 address nor a DNS name"},
		{strings.Repeat("a", 64) + ".example", "longer than 63"},
		{strings.Repeat("a.", 127) + "example", "the limit is 253"},
		{"a\u200db.example", "not a valid internationalised name"},
	}
	for _, tc := range invalid {
		got, err := New(tc.in)
		if err == nil || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("New(%q) = %+v, %v; want an error containing %q", tc.in, got, err, tc.msg)
		}
		if n := Normalize(tc.in, 443); n != "" {
			t.Errorf("Normalize(%q) = %q, want \"\" for invalid input", tc.in, n)
		}
	}
}

func TestNewHost(t *testing.T) {
	for _, tc := range []struct{ in, want, err string }{
		{in: "API.example.com.", want: "api.example.com"},
		{in: "::1", want: "::1"},
		{in: "[::1]", want: "::1"},
		{in: "2001:DB8::0:1", want: "2001:db8::1"},
		{in: "::ffff:10.0.0.1", want: "10.0.0.1"},
		{in: "Bücher.example", want: "xn--bcher-kva.example"},
		{in: "api.example.com:443", err: `remove ":443"`},
		{in: "fe80::1%eth0", err: "zones are not allowed"},
		{in: "1:2:3", err: "is not a DNS name or IP literal"},
		{in: ":: 1", err: "whitespace"},
	} {
		got, err := NewHost(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("NewHost(%q) = %q, %v; want an error containing %q", tc.in, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("NewHost(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

func TestNewAddr(t *testing.T) {
	if hp, err := NewAddr("[::1]:8443"); err != nil || hp != (HostPort{"::1", 8443}) {
		t.Errorf("NewAddr([::1]:8443) = %+v, %v", hp, err)
	}
	if _, err := NewAddr("api.example.com"); err == nil || !strings.Contains(err.Error(), "has no port") {
		t.Errorf("NewAddr without a port: error = %v, want one saying it has no port", err)
	}
}

func TestIsIPAndJoin(t *testing.T) {
	for _, tc := range []struct {
		hp   HostPort
		ip   bool
		text string
	}{
		{HostPort{"api.example.com", 0}, false, "api.example.com"},
		{HostPort{"10.0.0.1", 80}, true, "10.0.0.1:80"},
		{HostPort{"::1", 443}, true, "[::1]:443"},
	} {
		if tc.hp.IsIP() != tc.ip || tc.hp.String() != tc.text {
			t.Errorf("%+v: IsIP = %v, String = %q; want %v, %q", tc.hp, tc.hp.IsIP(), tc.hp.String(), tc.ip, tc.text)
		}
	}
}

// FuzzNew checks both directions of the grammar: whatever New accepts
// formats to a string New parses back to the same value (and that string
// is its own normal form), and whatever New refuses Normalize maps to "",
// so callers comparing normalized hosts fail closed.
func FuzzNew(f *testing.F) {
	for _, tc := range validCases {
		f.Add(tc.in)
	}
	for _, s := range []string{"", "*.x.com", "[::1", "a:b:c", "x.com:0", "Ⅸ.example", "a_b.c", "[::ffff:1.2.3.4]:1", "xn--.a", "1.2.3.4.", "ａｐｉ．example",
		"https://x/y", "u@h", "h:", "h:0443", "[fe80::1%eth0]", "a..b", "-a.b", "1.2.3", " ", "h\x00", "[::1]:", "[]", "[::1]x",
		"a-.b:1", "1.2:3", "x.1a:80", "a.b.:1", "A.b:1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		hp, err := New(s)
		if err != nil {
			if isNormalName(s) {
				t.Fatalf("fast path accepts %q, New refuses it: %v", s, err)
			}
			if n := Normalize(s, 443); n != "" {
				t.Fatalf("New(%q) failed (%v) but Normalize = %q", s, err, n)
			}
			return
		}
		if hp.Host == "" || hp.Port < 0 || hp.Port > 65535 {
			t.Fatalf("New(%q) = %+v: out of range", s, hp)
		}
		text := hp.String()
		again, err := New(text)
		if err != nil || again != hp {
			t.Fatalf("New(%q) = %+v; New(%q) = %+v, %v: not a round trip", s, hp, text, again, err)
		}
		if again.String() != text {
			t.Fatalf("String not stable: %q then %q", text, again.String())
		}
		if hp.Host != strings.ToLower(hp.Host) || !isASCII(hp.Host) || strings.HasSuffix(hp.Host, ".") {
			t.Fatalf("New(%q).Host = %q is not in normal form", s, hp.Host)
		}
		if isNormalName(s) && (hp.Port == 0 || hp.String() != s) {
			t.Fatalf("fast path accepts %q but New gives %+v", s, hp)
		}
		if h, err := NewHost(hp.Host); err != nil || h != hp.Host {
			t.Fatalf("NewHost(%q) = %q, %v; want the host back", hp.Host, h, err)
		}
	})
}

// FuzzJoin goes the other way: from a host and port to text and back.
func FuzzJoin(f *testing.F) {
	f.Add("api.example.com", 443)
	f.Add("::1", 0)
	f.Add("10.0.0.1", 65535)
	f.Add("Bücher.example", 1)
	f.Fuzz(func(t *testing.T, host string, port int) {
		h, err := NewHost(host)
		if err != nil || port < 0 || port > 65535 {
			return
		}
		hp, err := New(Join(h, port))
		if err != nil || hp.Host != h || hp.Port != port {
			t.Fatalf("New(Join(%q, %d)) = %+v, %v; want {%q %d}", h, port, hp, err, h, port)
		}
	})
}
