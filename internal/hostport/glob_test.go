package hostport

import "testing"

func TestParseHostGlob(t *testing.T) {
	tests := []struct {
		pattern string
		ok      bool
		matches []string // host:port
		misses  []string
	}{
		{"*.example.com", true, []string{"a.example.com:443", "a.b.example.com:80"}, []string{"example.com:443", "aexample.com:443", "a.example.co:443"}},
		{"registry.example.com", true, []string{"registry.example.com:443", "registry.example.com:80"}, []string{"x.registry.example.com:443"}},
		{"Registry.Example.com.", true, []string{"registry.example.com:443"}, nil},
		{"*.example.com:443", true, []string{"a.example.com:443"}, []string{"a.example.com:80"}},
		{"10.0.0.1", true, []string{"10.0.0.1:443"}, []string{"10.0.0.2:443"}},
		{"[::1]:8443", true, []string{"[::1]:8443"}, []string{"[::1]:443"}},
		// Underscores and internationalised names: the CONNECT target and the
		// pattern normalize with the same grammar, so these match (before
		// internal/hostport a "_" pattern could never match a CONNECT).
		{"*.my_corp.example", true, []string{"a.my_corp.example:443", "A.My_Corp.example.:443"}, []string{"my_corp.example:443"}},
		{"Bücher.example", true, []string{"xn--bcher-kva.example:443", "bücher.example:443"}, nil},
		{"*.10.0.0.1", false, nil, nil},
		{"*", false, nil, nil},
		{"*.com", false, nil, nil},
		{"a.*.example.com", false, nil, nil},
		{"*example.com", false, nil, nil},
		{"*.*.example.com", false, nil, nil},
		{"", false, nil, nil},
		{"ex ample.com", false, nil, nil},
		{"example.com:0", false, nil, nil},
		{"example.com:99999", false, nil, nil},
	}
	for _, tc := range tests {
		t.Run(tc.pattern, func(t *testing.T) {
			g, err := ParseGlob(tc.pattern, "passthrough pattern")
			if (err == nil) != tc.ok {
				t.Fatalf("ParseGlob(%q) error = %v, want ok=%v", tc.pattern, err, tc.ok)
			}
			for _, hp := range tc.matches {
				if !g.Match(target(t, hp)) {
					t.Errorf("%q does not match %s", tc.pattern, hp)
				}
			}
			for _, hp := range tc.misses {
				if g.Match(target(t, hp)) {
					t.Errorf("%q matches %s", tc.pattern, hp)
				}
			}
		})
	}
}

func target(t *testing.T, s string) (string, int) {
	t.Helper()
	hp, err := New(s)
	if err != nil {
		t.Fatalf("target %q: %v", s, err)
	}
	hp = hp.WithDefaultPort(443)
	return hp.Host, hp.Port
}

func TestParseGlobsString(t *testing.T) {
	gs, err := ParseGlobs([]string{"API.example.com, *.Example.org", "api.example.com", "[::1]:8443"}, "learn pattern")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, g := range gs {
		got = append(got, g.String())
	}
	want := "api.example.com *.example.org [::1]:8443"
	if s := join(got); s != want {
		t.Fatalf("ParseGlobs = %q, want %q", s, want)
	}
	if _, err := ParseGlobs([]string{"ok.example.com,*"}, "learn pattern"); err == nil {
		t.Fatal("ParseGlobs accepted \"*\"")
	}
}

func join(s []string) string {
	out := ""
	for i, v := range s {
		if i > 0 {
			out += " "
		}
		out += v
	}
	return out
}
