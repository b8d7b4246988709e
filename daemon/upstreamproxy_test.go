package daemon

import (
	"context"
	"strings"
	"testing"

	"github.com/aileron-dev/aileron-proxy/credentials"
)

func TestUpstreamProxyConfig(t *testing.T) {
	env := map[string]string{"HTTPS_PROXY": "http://envuser:env-pass-1234@proxy.env:3128", "NO_PROXY": "internal.example,10.0.0.0/8", "PROXY_PW": "from-env-5678"}
	getenv := func(k string) string { return env[k] }
	tests := []struct {
		name           string
		cfg            Config
		addr, user, pw string
		noProxy        int
		err            string
		none           bool
	}{
		{name: "none", none: true},
		{name: "url with a password source", cfg: Config{UpstreamProxy: "http://proxy.corp:3128", UpstreamProxyUser: "me",
			UpstreamProxyPassword: credentials.Source{Type: credentials.SourceEnv, Ref: "PROXY_PW"}, UpstreamNoProxy: []string{"a.example"}},
			addr: "proxy.corp:3128", user: "me", pw: "from-env-5678", noProxy: 1},
		{name: "env", cfg: Config{UpstreamProxy: "env"}, addr: "proxy.env:3128", user: "envuser", pw: "env-pass-1234", noProxy: 2},
		{name: "credentials in the URL flag", cfg: Config{UpstreamProxy: "http://me:pw@proxy.corp:3128"}, err: "must never be in argv"},
		{name: "password without user", cfg: Config{UpstreamProxy: "http://proxy.corp:3128",
			UpstreamProxyPassword: credentials.Source{Type: credentials.SourceEnv, Ref: "PROXY_PW"}}, err: "without --upstream-proxy-user"},
		{name: "credentials without proxy", cfg: Config{UpstreamProxyUser: "me"}, err: "no upstream proxy"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			up, err := upstreamProxyConfig(tc.cfg, getenv)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || strings.Contains(err.Error(), "pw@") {
					t.Fatalf("upstreamProxyConfig error = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.none {
				if up != nil {
					t.Fatalf("upstreamProxyConfig = %+v, want none", up)
				}
				return
			}
			pw := ""
			if up.Password != nil {
				pw, _ = up.Password(context.Background())
			}
			if up.Addr != tc.addr || up.Username != tc.user || pw != tc.pw || len(up.NoProxy) != tc.noProxy {
				t.Fatalf("upstreamProxyConfig = %q %q %q %v, want %q %q %q (%d no-proxy)", up.Addr, up.Username, pw, up.NoProxy, tc.addr, tc.user, tc.pw, tc.noProxy)
			}
		})
	}
}
