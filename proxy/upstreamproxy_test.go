package proxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/aileron-dev/aileron-proxy/internal/hostport"
)

func TestUpstreamProxyNoProxy(t *testing.T) {
	p, err := compileUpstreamProxy(&UpstreamProxy{Addr: "proxy.corp:3128",
		NoProxy: []string{"internal.example", ".corp.example", "*.svc.example", "10.0.0.0/8", "192.0.2.7", "only.example:8443", " "}}, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		host, port string
		want       bool
	}{
		{"internal.example", "443", true},
		{"api.internal.example", "443", true},
		{"xinternal.example", "443", false},
		{"corp.example", "443", true},
		{"a.b.corp.example", "443", true},
		{"svc.example", "443", true},
		{"10.1.2.3", "443", true},
		{"11.1.2.3", "443", false},
		{"192.0.2.7", "443", true},
		{"only.example", "8443", true},
		{"only.example", "443", false},
		{"api.github.com", "443", false},
	}
	for _, tc := range tests {
		if got := p.isDirect(tc.host, tc.port); got != tc.want {
			t.Errorf("isDirect(%q, %q) = %v, want %v", tc.host, tc.port, got, tc.want)
		}
	}
	all, _ := compileUpstreamProxy(&UpstreamProxy{Addr: "p:1", NoProxy: []string{"*"}}, zap.NewNop())
	if !all.isDirect("anything.example", "443") {
		t.Error(`NoProxy "*" does not dial everything directly`)
	}
}

func TestParseUpstreamProxyURL(t *testing.T) {
	tests := []struct{ in, addr, user, err string }{
		{in: "http://proxy.corp:3128", addr: "proxy.corp:3128"},
		{in: "proxy.corp:3128", addr: "proxy.corp:3128"},
		{in: "http://proxy.corp", addr: "proxy.corp:80"},
		{in: "http://me:pw@proxy.corp:8080/", addr: "proxy.corp:8080", user: "me"},
		{in: "https://proxy.corp:443", err: `scheme "https" is not supported`},
		{in: "socks5://proxy.corp:1080", err: `scheme "socks5" is not supported`},
		{in: "http://proxy.corp:3128/path", err: "must be http://HOST[:PORT]"},
	}
	for _, tc := range tests {
		addr, user, err := ParseUpstreamProxyURL(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseUpstreamProxyURL(%q) error = %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || addr != tc.addr || (user == nil) != (tc.user == "") || (user != nil && user.Username() != tc.user) {
			t.Errorf("ParseUpstreamProxyURL(%q) = %q, %v, %v; want %q, %q", tc.in, addr, user, err, tc.addr, tc.user)
		}
		if err != nil && strings.Contains(err.Error(), "pw") {
			t.Errorf("error shows the password: %v", err)
		}
	}
}

// fakeCorpProxy answers every CONNECT with status and records the
// Proxy-Authorization it got.
func fakeCorpProxy(t *testing.T, status int) (string, <-chan string) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	auth := make(chan string, 8)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				req, err := http.ReadRequest(bufio.NewReader(c))
				if err != nil {
					return
				}
				auth <- req.Method + " " + req.Host + " " + req.Header.Get("Proxy-Authorization")
				_, _ = fmt.Fprintf(c, "HTTP/1.1 %d %s\r\nContent-Length: 0\r\n\r\n", status, http.StatusText(status))
				time.Sleep(100 * time.Millisecond)
			}()
		}
	}()
	return ln.Addr().String(), auth
}

func TestDialViaProxy(t *testing.T) {
	for _, tc := range []struct {
		status int
		pw     bool
		want   string
	}{
		{200, true, ""},
		{407, false, "requires authentication for CONNECT api.example.com:443 (407); set --upstream-proxy-user"},
		{407, true, "refused its credentials for CONNECT api.example.com:443 (407)"},
		{403, true, "refused CONNECT api.example.com:443 (403)"},
		{502, true, "could not reach api.example.com:443 (502)"},
	} {
		addr, seen := fakeCorpProxy(t, tc.status)
		cfg := &UpstreamProxy{Addr: addr, Username: "me"}
		if tc.pw {
			cfg.Password = func(context.Context) (string, error) { return "s3cret-pw", nil }
		}
		up, err := compileUpstreamProxy(cfg, zap.NewNop())
		if err != nil {
			t.Fatal(err)
		}
		d := newDialer(nil, 5*time.Second)
		d.upstream = up
		hp, _ := hostport.NewAddr("api.example.com:443")
		c, err := d.dialViaProxy(context.Background(), "tcp", hp)
		got := <-seen
		if tc.pw && !strings.HasSuffix(got, "Basic bWU6czNjcmV0LXB3") || !strings.HasPrefix(got, "CONNECT api.example.com:443") {
			t.Errorf("the corporate proxy got %q", got)
		}
		if tc.want == "" {
			if err != nil {
				t.Fatalf("dialViaProxy with 200: %v", err)
			}
			c.Close()
			continue
		}
		var pe *UpstreamProxyError
		if !errors.As(err, &pe) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), addr) || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("status %d: error %v, want one naming %s with %q", tc.status, err, addr, tc.want)
		}
		if status, _, msg := classifyUpstreamError(err, "api.example.com:443"); status != http.StatusBadGateway || msg != err.Error() {
			t.Errorf("classifyUpstreamError = %d %q", status, msg)
		}
	}
}

// TestDialViaProxyGuardsTheTarget checks that the private-address guard
// refuses a private target before the corporate proxy is asked, while the
// corporate proxy itself may be on loopback.
func TestDialViaProxyGuardsTheTarget(t *testing.T) {
	addr, seen := fakeCorpProxy(t, 200)
	up, _ := compileUpstreamProxy(&UpstreamProxy{Addr: addr}, zap.NewNop())
	d := newDialer(nil, 5*time.Second)
	d.upstream = up
	for _, target := range []string{"169.254.169.254:80", "10.0.0.1:443", "localhost:443"} {
		_, err := d.DialContext(context.Background(), "tcp", target)
		if !isAddressRefused(err) {
			t.Errorf("DialContext(%q) through the corporate proxy = %v, want the private-address refusal", target, err)
		}
	}
	select {
	case got := <-seen:
		t.Fatalf("the corporate proxy was asked for a refused target: %q", got)
	default:
	}
}

// FuzzParseUpstreamProxyURL checks that no URL panics the parser, an
// accepted one is host:port, and a refusal never repeats a password.
func FuzzParseUpstreamProxyURL(f *testing.F) {
	for _, s := range []string{"http://proxy:3128", "proxy:3128", "http://u:pw-secret@proxy", "https://x", "http://[::1]:8080", "http://%zz"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		addr, _, err := ParseUpstreamProxyURL(raw)
		if err != nil {
			if strings.Contains(raw, ":pw-secret@") && strings.Contains(err.Error(), "pw-secret") {
				t.Fatalf("error repeats the password: %v", err)
			}
			return
		}
		if _, err := hostport.NewAddr(addr); err != nil {
			t.Fatalf("ParseUpstreamProxyURL(%q) = %q, not host:port: %v", raw, addr, err)
		}
	})
}
