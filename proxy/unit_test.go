package proxy

import (
	"context"
	"encoding/json"
	"net/http"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/aileron-dev/aileron-proxy/audit"
	"github.com/aileron-dev/aileron-proxy/internal/hostport"
	"github.com/aileron-dev/aileron-proxy/policy"
)

// connectTarget parses a CONNECT target as the proxy does.
func connectTarget(t *testing.T, target string) (string, int) {
	t.Helper()
	hp, err := hostport.New(target)
	if err != nil {
		t.Fatalf("CONNECT target %q: %v", target, err)
	}
	hp = hp.WithDefaultPort(443)
	return hp.Host, hp.Port
}

func TestIsRefusedAddr(t *testing.T) {
	refused := []string{"127.0.0.1", "127.8.8.8", "10.1.2.3", "172.16.0.1", "172.31.255.255", "192.168.1.1",
		"169.254.169.254", "169.254.1.1", "100.64.0.1", "100.127.255.255", "0.0.0.0", "0.1.2.3", "224.0.0.1",
		"255.255.255.255", "::1", "::", "fe80::1", "fc00::1", "fd00:ec2::254", "ff02::1", "::ffff:127.0.0.1",
		"::ffff:169.254.169.254", "64:ff9b::a9fe:a9fe", "2002:7f00:1::1", "198.18.0.1", "::7f00:1", "::a00:1", "64:ff9b:1::a00:1"}
	allowed := []string{"1.1.1.1", "8.8.8.8", "100.63.255.255", "100.128.0.1", "172.32.0.1", "2606:4700::1111", "64:ff9b::808:808"}
	for _, s := range refused {
		if !isRefusedAddr(netip.MustParseAddr(s)) {
			t.Errorf("isRefusedAddr(%s) = false, want true", s)
		}
	}
	for _, s := range allowed {
		if isRefusedAddr(netip.MustParseAddr(s)) {
			t.Errorf("isRefusedAddr(%s) = true, want false", s)
		}
	}
}

func TestDialerRefusesPrivateAddressesUnlessResolved(t *testing.T) {
	d := newDialer(map[string]netip.AddrPort{"mapped.example.test:443": netip.MustParseAddrPort("127.0.0.1:9")}, time.Second)
	ctx := context.Background()
	for _, addr := range []string{"127.0.0.1:443", "[::1]:443", "localhost:443", "169.254.169.254:80", "[fd00:ec2::254]:80"} {
		if _, err := d.DialContext(ctx, "tcp", addr); !isAddressRefused(err) {
			t.Errorf("DialContext(%s) error = %v, want the address guard", addr, err)
		}
	}
	// The mapped address is dialled (and refused by the closed port), not guarded.
	if _, err := d.DialContext(ctx, "tcp", "mapped.example.test:443"); err == nil || isAddressRefused(err) {
		t.Errorf("mapped host: error = %v, want a dial error that is not the guard", err)
	}
}

func TestParseProxyAuth(t *testing.T) {
	tests := []struct {
		h          string
		id, secret string
		ok         bool
	}{
		{"Basic c2VzX2FiYzpzM2NyM3Q=", "ses_abc", "s3cr3t", true},
		{"basic c2VzX2FiYzpzM2NyM3Q=", "ses_abc", "s3cr3t", true},
		{"Basic c2VzX2FiYzpzM2M6cjN0", "ses_abc", "s3c:r3t", true},
		{"Basic", "", "", false},
		{"Bearer c2VzX2FiYzpzM2NyM3Q=", "", "", false},
		{"Basic bm9jb2xvbg==", "", "", false},
		{"Basic OnNlY3JldA==", "", "", false},
	}
	for _, tc := range tests {
		id, secret, ok := parseProxyAuth(tc.h)
		if id != tc.id || secret != tc.secret || ok != tc.ok {
			t.Errorf("parseProxyAuth(%q) = %q, %q, %v; want %q, %q, %v", tc.h, id, secret, ok, tc.id, tc.secret, tc.ok)
		}
	}
}

func TestTunnelNames(t *testing.T) {
	v4 := &tunnel{target: "api.example.test:443", host: "api.example.test", port: 443, hostHeader: "api.example.test"}
	v6 := &tunnel{target: "[2001:db8::1]:8443", host: "2001:db8::1", port: 8443, hostHeader: "[2001:db8::1]:8443"}
	tests := []struct {
		t    *tunnel
		auth string
		want bool
	}{
		{v4, "", true},
		{v4, "api.example.test", true},
		{v4, "API.EXAMPLE.TEST:443", true},
		{v4, "api.example.test:8443", false},
		{v4, "api.example.test.", true}, // the same host in normal form (internal/hostport)
		{v4, "Api.Example.Test.:443", true},
		{v4, "api.example.test..", false},
		{v4, "api.example.test.", true}, // the same host in normal form (internal/hostport)
		{v4, "Api.Example.Test.:443", true},
		{v4, "api.example.test..", false},
		{v4, "evil.test", false},
		{v4, "api.example.test@evil.test", false},
		{v6, "[2001:db8::1]:8443", true},
		{v6, "[2001:DB8::1]:8443", true},
		{v6, "[2001:db8::1]", false},
		{v6, "2001:db8::1", false},
	}
	for _, tc := range tests {
		if got := tc.t.names(tc.auth); got != tc.want {
			t.Errorf("tunnel %s names(%q) = %v, want %v", tc.t.target, tc.auth, got, tc.want)
		}
	}
}

func TestStripHeader(t *testing.T) {
	in := http.Header{
		"Authorization":       {"Bearer mine"},
		"Proxy-Authorization": {"Basic x"},
		"Proxy-Anything":      {"x"},
		"Connection":          {"keep-alive, X-Listed"},
		"X-Listed":            {"x"},
		"Keep-Alive":          {"timeout=5"},
		"Te":                  {"trailers, deflate"},
		"Upgrade":             {"websocket"},
		"X-Aileron-Internal":  {"k"},
		"Accept":              {"application/json"},
	}
	keep := in.Clone()
	stripHeader(in, true)
	want := http.Header{"Accept": {"application/json"}, "Te": {"trailers"}}
	if len(in) != len(want) || in.Get("Accept") != "application/json" || in.Get("Te") != "trailers" {
		t.Errorf("stripHeader(dropAuth) = %v, want %v", in, want)
	}
	stripHeader(keep, false)
	if got := keep.Get("Authorization"); got != "Bearer mine" || keep.Get("X-Listed") != "" {
		t.Errorf("stripHeader(keep auth) = %v", keep)
	}
}

type nopRecorder struct{}

func (nopRecorder) Record(audit.Event) {}

type nopSessions struct{}

func (nopSessions) AuthenticateProxy(string, string) (Session, error) {
	return Session{}, errNoProxyCredential
}

func TestNewValidatesConfig(t *testing.T) {
	base := func() Config {
		return Config{Logger: zap.NewNop(), Sessions: nopSessions{}, Audit: nopRecorder{},
			Policy: func() *policy.Snapshot { return nil }}
	}
	tests := []struct {
		name   string
		mutate func(*Config)
		want   string
	}{
		{"no logger", func(c *Config) { c.Logger = nil }, "logger is required"},
		{"no sessions", func(c *Config) { c.Sessions = nil }, "sessions is required"},
		{"no policy", func(c *Config) { c.Policy = nil }, "policy is required"},
		{"no audit", func(c *Config) { c.Audit = nil }, "audit is required"},
		{"match-all passthrough", func(c *Config) { c.Passthrough = []string{"*"} }, "passthrough[0]"},
		{"tld passthrough", func(c *Config) { c.Passthrough = []string{"ok.example.com", "*.com"} }, "passthrough[1]"},
		{"resolve to a name", func(c *Config) { c.Resolve = map[string]string{"a.example.com:443": "b.example.com:443"} }, "IP:PORT"},
		{"resolve bad key", func(c *Config) { c.Resolve = map[string]string{"http://a/": "127.0.0.1:1"} }, "HOST:PORT"},
		{"negative limit", func(c *Config) { c.Limits.IdleTimeout = -time.Second }, "idle_timeout"},
		{"negative tunnels", func(c *Config) { c.Limits.MaxTunnelsPerSession = -1 }, "max_tunnels_per_session"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := base()
			tc.mutate(&cfg)
			_, err := New(cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New() error = %v, want one mentioning %q", err, tc.want)
			}
		})
	}
	cfg := base()
	if _, err := New(cfg); err != nil {
		t.Errorf("New(minimal) = %v", err)
	}
}

// TestAuditFields evaluates each kind of compiled audit source against a
// matched request: path from the match, query from the URL (repeats joined),
// args from the audit-args header, redaction, and a source of unknown kind
// that yields nothing.
func TestAuditFields(t *testing.T) {
	spec := &policy.Spec{SchemaVersion: policy.SchemaVersion, Connector: policy.ConnectorMeta{FQN: "local://t/audit"},
		Tools: []policy.Tool{{Name: "t", Operations: []policy.Operation{{
			Name: "get", Method: "GET", Path: "/items/{id}", Hosts: []string{"api.example"},
			Inputs: []policy.Input{{Name: "id", Type: policy.InputString}, {Name: "q", Type: policy.InputString}},
			Audit: []policy.AuditField{
				{Name: "item", Source: "path.id"},
				{Name: "tag", Source: "query.tag"},
				{Name: "absent", Source: "query.none"},
				{Name: "q", Source: "args.q", Redact: true},
				{Name: "n", Source: "args.n"},
				{Name: "odd", Source: "header.x"},
			},
		}}}}}
	snap, err := policy.Compile([]policy.Connector{{Spec: spec}})
	if err != nil {
		t.Fatal(err)
	}
	d := snap.Decide(policy.NewScope([]string{"local://t/audit"}), policy.Request{Method: "GET", Host: "api.example", Path: "/items/a%20b"})
	if !d.Allow {
		t.Fatalf("Decide = %+v, want allow", d)
	}
	r, err := http.NewRequest(http.MethodGet, "https://api.example/items/a%20b?tag=x&tag=y", nil)
	if err != nil {
		t.Fatal(err)
	}
	got := auditFields(d.Match, r, map[string]json.RawMessage{"q": json.RawMessage(`"secret"`), "n": json.RawMessage(` 7 `)})
	want := map[string]string{"item": "a b", "tag": "x,y", "q": audit.RedactValue("secret"), "n": "7"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("auditFields = %v, want %v", got, want)
	}
}
