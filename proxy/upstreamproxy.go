package proxy

import (
	"bufio"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/aileron-dev/aileron-proxy/internal/hostport"
)

// This file dials upstreams through a corporate proxy with CONNECT: every
// upstream connection (intercepted and passthrough) except the hosts its
// NoProxy list names and the operator's Resolve mappings. The
// private-address guard applies to the target, never to the corporate
// proxy's own address, which the operator chose.

// UpstreamProxy is a corporate HTTP proxy the proxy dials upstreams
// through.
type UpstreamProxy struct {
	// Addr is the corporate proxy's host:port (an http:// proxy; the
	// CONNECT tunnel carries the upstream's own TLS). Required.
	Addr string
	// Username and Password are its basic credentials; Password is read
	// for each connection (nil: none are sent). Neither is ever logged.
	Username string
	Password func(ctx context.Context) (string, error)
	// NoProxy lists hosts dialled directly, as NO_PROXY does: a host name
	// (matching itself and its subdomains; a leading "." or "*." means the
	// same), an IP address, a CIDR prefix, any of them with ":port", or
	// "*" for every host.
	NoProxy []string
}

// upstreamProxy is UpstreamProxy compiled.
type upstreamProxy struct {
	addr     string
	username string
	password func(context.Context) (string, error)
	all      bool
	names    []string // lower case, no leading dot
	prefixes []netip.Prefix
	ports    map[string]string // entry -> required port ("" any)
	log      *zap.Logger
}

// ParseUpstreamProxyURL returns the host:port of an http:// proxy URL, as
// HTTPS_PROXY or --upstream-proxy give it, and its userinfo when there is
// one.
func ParseUpstreamProxyURL(raw string) (addr string, user *url.Userinfo, err error) {
	if !strings.Contains(raw, "://") {
		raw = "http://" + raw // as curl reads a bare host:port
	}
	u, err := url.Parse(raw)
	if err != nil {
		// url's error repeats the URL, credentials included.
		return "", nil, errors.New("the upstream proxy URL is not a valid URL; use http://HOST:PORT")
	}
	// No error below repeats the URL or a part of it: an opaque URL or a
	// fragment keeps a password where Redacted does not look.
	if u.Scheme != "http" {
		scheme := "(not shown)"
		switch u.Scheme {
		case "https", "socks4", "socks5", "socks5h":
			scheme = strconv.Quote(u.Scheme)
		}
		return "", nil, fmt.Errorf("upstream proxy scheme %s is not supported; use an http:// proxy URL (the tunnel it opens carries the upstream's TLS)", scheme)
	}
	if u.Host == "" || u.Opaque != "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return "", nil, errors.New("the upstream proxy URL must be http://HOST[:PORT], with no path, query or fragment")
	}
	hp, err := hostport.New(u.Host)
	if err != nil {
		return "", nil, errors.New("the upstream proxy URL's HOST[:PORT] is not valid; use a host name or IP address and a port from 1 to 65535")
	}
	return hp.WithDefaultPort(80).String(), u.User, nil
}

func compileUpstreamProxy(c *UpstreamProxy, log *zap.Logger) (*upstreamProxy, error) {
	if c == nil {
		return nil, nil
	}
	hp, err := hostport.NewAddr(c.Addr)
	if err != nil {
		return nil, fmt.Errorf("upstream proxy address %q: %w", c.Addr, err)
	}
	p := &upstreamProxy{addr: hp.String(), username: c.Username, password: c.Password, ports: map[string]string{}, log: log.Named("upstream_proxy")}
	for _, e := range c.NoProxy {
		e = strings.ToLower(strings.TrimSpace(e))
		if e == "" {
			continue
		}
		if e == "*" {
			p.all = true
			continue
		}
		port := ""
		e = strings.TrimPrefix(strings.TrimPrefix(e, "*"), ".")
		if hp, err := hostport.New(e); err == nil {
			e = hp.Host
			if hp.Port != 0 {
				port = strconv.Itoa(hp.Port)
			}
		}
		e = strings.Trim(e, "[]")
		if pf, err := netip.ParsePrefix(e); err == nil {
			p.prefixes = append(p.prefixes, pf.Masked())
			p.ports[pf.Masked().String()] = port
			continue
		}
		if ip, err := netip.ParseAddr(e); err == nil {
			pf := netip.PrefixFrom(ip.Unmap(), ip.Unmap().BitLen())
			p.prefixes = append(p.prefixes, pf)
			p.ports[pf.String()] = port
			continue
		}
		p.names = append(p.names, e)
		p.ports[e] = port
	}
	return p, nil
}

// isDirect reports whether host:port is dialled without the corporate
// proxy (NoProxy).
func (p *upstreamProxy) isDirect(host, port string) bool {
	if p.all {
		return true
	}
	portOK := func(key string) bool { want := p.ports[key]; return want == "" || want == port }
	if ip, err := netip.ParseAddr(host); err == nil {
		for _, pf := range p.prefixes {
			if pf.Contains(ip.Unmap()) && portOK(pf.String()) {
				return true
			}
		}
		return false
	}
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	for _, n := range p.names {
		if (host == n || strings.HasSuffix(host, "."+n)) && portOK(n) {
			return true
		}
	}
	return false
}

// UpstreamProxyError is a corporate proxy's refusal of a CONNECT, or a
// failure to reach it.
type UpstreamProxyError struct {
	Proxy  string
	Target string
	// Status is the proxy's answer; zero when it could not be reached.
	Status int
	// WithCredentials reports that basic credentials were sent.
	WithCredentials bool
	cause           error
}

func (e *UpstreamProxyError) Unwrap() error { return e.cause }

func (e *UpstreamProxyError) Error() string {
	switch {
	case e.Status == 0:
		return fmt.Sprintf("the upstream proxy %s could not be reached for %s", e.Proxy, e.Target)
	case e.Status == http.StatusProxyAuthRequired && e.WithCredentials:
		return fmt.Sprintf("the upstream proxy %s refused its credentials for CONNECT %s (407); check the upstream proxy user and password source", e.Proxy, e.Target)
	case e.Status == http.StatusProxyAuthRequired:
		return fmt.Sprintf("the upstream proxy %s requires authentication for CONNECT %s (407); set --upstream-proxy-user and a password source", e.Proxy, e.Target)
	case e.Status == http.StatusForbidden:
		return fmt.Sprintf("the upstream proxy %s refused CONNECT %s (403); its policy does not allow this host", e.Proxy, e.Target)
	case e.Status == http.StatusBadGateway || e.Status == http.StatusServiceUnavailable || e.Status == http.StatusGatewayTimeout:
		return fmt.Sprintf("the upstream proxy %s could not reach %s (%d)", e.Proxy, e.Target, e.Status)
	}
	return fmt.Sprintf("the upstream proxy %s answered CONNECT %s with %d", e.Proxy, e.Target, e.Status)
}

// dialViaProxy opens a CONNECT tunnel to hp through the corporate proxy.
// The target is checked against the private-address guard first when it is
// an address or resolves here; a name only the corporate proxy can resolve
// is left to it.
func (d *dialer) dialViaProxy(ctx context.Context, network string, hp hostport.HostPort) (net.Conn, error) {
	target := hp.String()
	if ip, err := netip.ParseAddr(hp.Host); err == nil {
		if isRefusedAddr(ip) {
			return nil, &addressRefusedError{host: target}
		}
	} else if addrs, err := d.resolver.LookupNetIP(ctx, "ip", hp.Host); err == nil && len(addrs) > 0 {
		refused := true
		for _, a := range addrs {
			refused = refused && isRefusedAddr(a)
		}
		if refused {
			return nil, &addressRefusedError{host: target}
		}
	}
	p := d.upstream
	c, err := p.connect(ctx, d, network, target)
	if err != nil {
		var pe *UpstreamProxyError
		if errors.As(err, &pe) {
			p.log.Warn("upstream proxy failed", zap.String("upstream_proxy", p.addr), zap.String("host", target),
				zap.Int("status", pe.Status), zap.String("reason", pe.Error()))
		}
		return nil, err
	}
	return c, nil
}

// connect opens the CONNECT tunnel to target.
func (p *upstreamProxy) connect(ctx context.Context, d *dialer, network, target string) (net.Conn, error) {
	perr := &UpstreamProxyError{Proxy: p.addr, Target: target}
	c, err := d.net.DialContext(ctx, network, p.addr)
	if err != nil {
		perr.cause = err
		return nil, perr
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	} else {
		_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	}
	req := &http.Request{Method: http.MethodConnect, URL: &url.URL{Opaque: target}, Host: target, Header: http.Header{}}
	if p.password != nil {
		pw, err := p.password(ctx)
		if err != nil {
			_ = c.Close()
			return nil, fmt.Errorf("reading the upstream proxy password: %w", err)
		}
		req.Header.Set("Proxy-Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(p.username+":"+pw)))
		perr.WithCredentials = true
	}
	if err := req.Write(c); err != nil {
		_ = c.Close()
		perr.cause = err
		return nil, perr
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		_ = c.Close()
		perr.cause = err
		return nil, perr
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_ = c.Close()
		perr.Status = resp.StatusCode
		return nil, perr
	}
	_ = c.SetDeadline(time.Time{})
	if br.Buffered() > 0 {
		// Nothing may follow a 200 before the client speaks; a proxy that
		// sends bytes anyway is not a tunnel this proxy can use.
		_ = c.Close()
		perr.cause = errors.New("data after the CONNECT answer")
		return nil, perr
	}
	return c, nil
}

// isUpstreamProxyError reports whether err is the corporate proxy's.
func isUpstreamProxyError(err error) (*UpstreamProxyError, bool) {
	var pe *UpstreamProxyError
	ok := errors.As(err, &pe)
	return pe, ok
}
