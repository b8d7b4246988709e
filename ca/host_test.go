package ca

import (
	"strings"
	"testing"
)

type normalizeHostCase struct {
	in      string
	want    string
	wantIP  bool
	wantErr string
}

func normalizeHostCases() []normalizeHostCase {
	return []normalizeHostCase{
		{in: "api.example.com", want: "api.example.com"},
		{in: "API.Example.COM", want: "api.example.com"},
		{in: "api.example.com.", want: "api.example.com"},
		{in: "api.example.com:443", want: "api.example.com"},
		{in: "API.example.com.:8443", want: "api.example.com"},
		{in: "localhost", want: "localhost"},
		{in: "under_score.example", want: "under_score.example"},
		{in: "xn--bcher-kva.example", want: "xn--bcher-kva.example"},
		{in: "Bücher.example", want: "xn--bcher-kva.example"},
		{in: "127.0.0.1", want: "127.0.0.1", wantIP: true},
		{in: "127.0.0.1:8443", want: "127.0.0.1", wantIP: true},
		{in: "::1", want: "::1", wantIP: true},
		{in: "[::1]", want: "::1", wantIP: true},
		{in: "[::1]:443", want: "::1", wantIP: true},
		{in: "2001:DB8::0:1", want: "2001:db8::1", wantIP: true},
		{in: "[2001:db8::1]:8443", want: "2001:db8::1", wantIP: true},
		{in: "::ffff:10.0.0.1", want: "10.0.0.1", wantIP: true},
		{in: "", wantErr: "must not be empty"},
		{in: ".", wantErr: "has an empty host"},
		{in: ":443", wantErr: "has an empty host"},
		{in: "a..example", wantErr: "has an empty label"},
		{in: ".example", wantErr: "empty label"},
		{in: "example..", wantErr: "empty label"},
		{in: "*.example.com", wantErr: "wildcards are not supported"},
		{in: "-a.example", wantErr: "must not start or end with '-'"},
		{in: "a b.example", wantErr: "must not contain whitespace"},
		{in: "a/b.example", wantErr: "without a scheme or path"},
		{in: "user@a.example", wantErr: "must not contain userinfo"},
		{in: "a.example:0", wantErr: "port 0 is out of range"},
		{in: "a.example:65536", wantErr: "port 65536 is out of range"},
		{in: "a.example:", wantErr: "has an empty port"},
		{in: "a.example:+1", wantErr: `port "+1" must be a decimal number`},
		{in: "[::1", wantErr: `unclosed "["`},
		{in: "[::1]x", wantErr: "after the IPv6 literal"},
		{in: "[127.0.0.1]", wantErr: "not a valid IPv6 address"},
		{in: "[a.example]:443", wantErr: "not a valid IPv6 address"},
		{in: "fe80::1%eth0", wantErr: "zones are not allowed"},
		{in: "1:2:3", wantErr: "is not a DNS name or IP literal"},
		{in: "127.1", wantErr: "the last label is all digits"},
		{in: "1.2.3.4.5", wantErr: "the last label is all digits"},
		{in: strings.Repeat("a", 64) + ".example", wantErr: "longer than 63"},
		{in: strings.Repeat("a.", 127) + "example", wantErr: "limit is 253"},
	}
}

func TestNormalizeHost(t *testing.T) {
	for _, tc := range normalizeHostCases() {
		t.Run(tc.in, func(t *testing.T) {
			h, err := normalizeHost(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("normalizeHost(%q) = %+v, %v; want error containing %q", tc.in, h, err, tc.wantErr)
				}
				return
			}
			if err != nil || h.name != tc.want || h.isIP() != tc.wantIP {
				t.Fatalf("normalizeHost(%q) = %q (ip %v), %v; want %q (ip %v)", tc.in, h.name, h.isIP(), err, tc.want, tc.wantIP)
			}
		})
	}
}

func FuzzNormalizeHost(f *testing.F) {
	for _, tc := range normalizeHostCases() {
		f.Add(tc.in)
	}
	f.Fuzz(func(t *testing.T, in string) {
		h, err := normalizeHost(in)
		if err != nil {
			return
		}
		again, err := normalizeHost(h.name)
		if err != nil || again != h {
			t.Fatalf("normalizeHost(%q) = %q, but normalizing that gives %q, %v", in, h.name, again.name, err)
		}
		if h.isIP() {
			return
		}
		for i := 0; i < len(h.name); i++ {
			if c := h.name[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
				t.Fatalf("normalizeHost(%q) = %q, which holds %q", in, h.name, c)
			}
		}
	})
}
