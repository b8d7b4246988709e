package proxy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/elazarl/goproxy"
	"go.uber.org/zap"

	"github.com/aileron-dev/aileron-proxy/audit"
	"github.com/aileron-dev/aileron-proxy/internal/hostport"
)

// copyBufSize is the size of the pooled buffers that passthrough tunnels
// and response bodies start with.
const copyBufSize = 32 << 10

// bigCopyBufSize is the buffer a body switches to when a read fills a
// copyBufSize one: larger reads mean fewer system calls and, from an HTTP/2
// upstream, fewer flow-control updates.
const bigCopyBufSize = 256 << 10

// Server is the proxy. Build it with New, run it with Serve, stop it with
// Shutdown.
type Server struct {
	cfg         Config
	log         *zap.Logger
	limits      Limits
	now         func() time.Time
	globs       []hostport.Glob
	internalKey []byte
	metrics     *metrics
	authBackoff *AuthBackoff
	// auditOK reports whether the audit log can take a line now
	// (audit.Health); always true for a Recorder that cannot tell.
	auditOK func() bool

	dialer    *dialer
	transport *http.Transport
	// h1Pool and h1TLS serve HTTP/1.1 clients' bodiless requests
	// (upstream_h1.go).
	h1Pool    h1Pool
	h1TLS     *tls.Config
	tlsConfig *tls.Config
	bufPool   sync.Pool // *[]byte of copyBufSize
	// bigBufPool holds bigCopyBufSize buffers for bodies that arrive faster
	// than they are sent.
	bigBufPool sync.Pool

	gp           *goproxy.ProxyHttpServer
	rejectAction *goproxy.ConnectAction
	hijackAction *goproxy.ConnectAction
	outer        *http.Server
	inner        *http.Server
	innerLn      *connListener
	innerOnce    sync.Once
	ws           wsRegistry // open WebSocket relays

	mu           sync.Mutex
	tunnels      map[*tunnel]struct{}
	perSession   map[string]int
	shuttingDown bool
	// closing is shuttingDown for HTTP/1.1 loops, which read it per request.
	closing     atomic.Bool
	drained     chan struct{}
	drainedOnce sync.Once

	// peakTunnels is the most tunnels open at once since the last burst
	// (under mu); lastRelease and memoryReleases track returnMemory.
	peakTunnels    int
	lastRelease    atomic.Int64
	memoryReleases atomic.Int64
	// h1BufsReleased counts the HTTP/1.1 connections whose buffers are
	// back in h1BufPool while they wait for a request (serve_h1.go).
	h1BufsReleased atomic.Int64
}

// New validates cfg and builds a Server. It starts nothing.
func New(cfg Config) (*Server, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	limits, err := cfg.Limits.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("configuring the proxy: %w", err)
	}
	s := &Server{
		cfg:        cfg,
		log:        cfg.Logger.Named("proxy"),
		limits:     limits,
		now:        cfg.Now,
		tunnels:    make(map[*tunnel]struct{}),
		perSession: make(map[string]int),
		drained:    make(chan struct{}),
	}
	if s.now == nil {
		s.now = time.Now
	}
	s.authBackoff = NewAuthBackoff(0, 0, s.now)
	s.auditOK = func() bool { return true }
	if h, ok := cfg.Audit.(audit.Health); ok {
		s.auditOK = h.Available
	}
	if cfg.InternalKey != "" {
		s.internalKey = []byte(cfg.InternalKey)
	}
	for i, p := range cfg.Passthrough {
		g, err := hostport.ParseGlob(p, "passthrough pattern")
		if err != nil {
			return nil, fmt.Errorf("configuring the proxy: passthrough[%d]: %w", i, err)
		}
		s.globs = append(s.globs, g)
	}
	resolve := make(map[string]netip.AddrPort, len(cfg.Resolve))
	for k, v := range cfg.Resolve {
		ap, err := netip.ParseAddrPort(v)
		if err != nil {
			return nil, fmt.Errorf("configuring the proxy: resolve %q=%q: the address must be IP:PORT (e.g. 127.0.0.1:8443): %w", k, v, err)
		}
		hp, err := hostport.New(k)
		if err != nil {
			return nil, fmt.Errorf("configuring the proxy: resolve %q: the key must be HOST:PORT (port 443 when omitted): %w", k, err)
		}
		resolve[hp.WithDefaultPort(443).String()] = ap
	}
	s.metrics, err = newMetrics(cfg.Registerer, cfg.LeafStats)
	if err != nil {
		return nil, fmt.Errorf("configuring the proxy: %w", err)
	}
	s.bufPool.New = func() any { b := make([]byte, copyBufSize); return &b }
	s.bigBufPool.New = func() any { b := make([]byte, bigCopyBufSize); return &b }

	roots := cfg.SystemRoots
	if roots == nil {
		if roots, err = x509.SystemCertPool(); err != nil {
			return nil, fmt.Errorf("configuring the proxy: loading system roots for upstream TLS: %w; pass Config.SystemRoots", err)
		}
	} else {
		roots = roots.Clone()
	}
	for _, c := range cfg.UpstreamRoots {
		roots.AddCert(c)
	}
	s.dialer = newDialer(resolve, limits.DialTimeout)
	if s.dialer.upstream, err = compileUpstreamProxy(cfg.UpstreamProxy, s.log); err != nil {
		return nil, fmt.Errorf("configuring the proxy: %w", err)
	}
	s.transport = &http.Transport{
		Proxy:                  nil, // never an environment proxy
		DialContext:            s.dialRaw,
		TLSClientConfig:        &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout:    limits.TLSHandshakeTimeout,
		ResponseHeaderTimeout:  limits.ResponseHeaderTimeout,
		ExpectContinueTimeout:  time.Second,
		IdleConnTimeout:        90 * time.Second,
		MaxIdleConns:           4 * limits.MaxIdleConnsPerHost,
		MaxIdleConnsPerHost:    limits.MaxIdleConnsPerHost,
		MaxResponseHeaderBytes: int64(limits.MaxHeaderBytes),
		ForceAttemptHTTP2:      true,
		DisableCompression:     true, // pass the client's Accept-Encoding through untouched
	}

	s.h1TLS = &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12, NextProtos: []string{"http/1.1"}}
	s.h1Pool = h1Pool{maxIdle: limits.MaxIdleConnsPerHost, timeout: 90 * time.Second}

	s.tlsConfig = &tls.Config{
		MinVersion:     tls.VersionTLS12,
		NextProtos:     []string{"h2", "http/1.1"},
		GetCertificate: s.getCertificate,
	}

	s.gp = goproxy.NewProxyHttpServer()
	s.gp.Verbose = false
	s.gp.Logger = zap.NewStdLog(s.log.Named("goproxy"))
	s.gp.Tr = s.transport
	s.gp.ConnectDial = func(string, string) (net.Conn, error) {
		return nil, errors.New("goproxy must not dial: the proxy hijacks every CONNECT")
	}
	s.gp.NonproxyHandler = http.HandlerFunc(s.servePlain)
	s.rejectAction = &goproxy.ConnectAction{Action: goproxy.ConnectReject}
	s.hijackAction = &goproxy.ConnectAction{Action: goproxy.ConnectHijack, Hijack: s.hijackConnect}
	s.gp.OnRequest().HandleConnectFunc(s.handleConnect)

	errLog := zap.NewStdLog(s.log.Named("http"))
	var h1 http.Protocols
	h1.SetHTTP1(true)
	s.outer = &http.Server{
		Handler:           http.HandlerFunc(s.serveOuter),
		ReadHeaderTimeout: limits.ConnectTimeout,
		IdleTimeout:       limits.IdleTimeout,
		MaxHeaderBytes:    limits.MaxHeaderBytes,
		ErrorLog:          errLog,
		Protocols:         &h1,
		// OPTIONS * is a proxy request like any other, never answered by net/http.
		DisableGeneralOptionsHandler: true,
	}
	var both http.Protocols
	both.SetHTTP1(true)
	both.SetHTTP2(true)
	s.innerLn = newConnListener()
	s.inner = &http.Server{
		Handler:           innerHandler{s},
		ReadHeaderTimeout: limits.ConnectTimeout,
		IdleTimeout:       limits.IdleTimeout,
		MaxHeaderBytes:    limits.MaxHeaderBytes,
		ErrorLog:          errLog,
		Protocols:         &both,
		// OPTIONS * inside a tunnel is decided by policy like any request.
		DisableGeneralOptionsHandler: true,
		HTTP2: &http.HTTP2Config{
			MaxConcurrentStreams: int(limits.MaxConcurrentStreams),
		},
		ConnContext: connContext,
	}
	return s, nil
}

// dialRaw dials like dialer.DialContext and reads and writes the
// connection with raw system calls (rawconn.go).
func (s *Server) dialRaw(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := s.dialer.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return newRawConn(c), nil
}

// Serve accepts proxy clients on l until Shutdown; like net/http it returns
// http.ErrServerClosed after Shutdown.
func (s *Server) Serve(l net.Listener) error {
	s.innerOnce.Do(func() {
		go func() { _ = s.inner.Serve(s.innerLn) }()
	})
	return s.outer.Serve(l)
}

// Shutdown stops accepting, lets in-flight requests finish (HTTP/2 clients
// get GOAWAY, idle keep-alive tunnels are closed) and waits for every tunnel
// to close, until ctx ends; then it closes what is left and returns ctx's
// error. Open WebSockets first get a 1001 close. Passthrough tunnels are
// blind, so they are waited for until ctx ends.
func (s *Server) Shutdown(ctx context.Context) error {
	s.ws.goAway(func(*wsRelay) bool { return true }, true) // each gets a 1001 close
	s.closing.Store(true)
	s.mu.Lock()
	s.shuttingDown = true
	var h1 []*h1ServerConn
	for t := range s.tunnels {
		if c := t.h1.Load(); c != nil {
			h1 = append(h1, c)
		}
	}
	if len(s.tunnels) == 0 {
		s.drainedOnce.Do(func() { close(s.drained) })
	}
	s.mu.Unlock()
	for _, c := range h1 {
		c.closeIfIdle() // closing releases the tunnel, which takes s.mu
	}

	var errs []error
	if err := s.outer.Shutdown(ctx); err != nil {
		errs = append(errs, fmt.Errorf("draining proxy connections: %w", err))
		_ = s.outer.Close()
	}
	if err := s.inner.Shutdown(ctx); err != nil {
		errs = append(errs, fmt.Errorf("draining intercepted tunnels: %w", err))
		_ = s.inner.Close()
	}
	_ = s.innerLn.Close()
	select {
	case <-s.drained:
	case <-ctx.Done():
		n := s.closeTunnels(func(*tunnel) bool { return true })
		errs = append(errs, fmt.Errorf("draining tunnels: closed %d still open: %w", n, ctx.Err()))
	}
	s.transport.CloseIdleConnections()
	s.h1Pool.closeIdle(true)
	return errors.Join(errs...)
}

// CloseSession closes every open tunnel of a session (call it when the
// session ends) and reports how many were closed. Its WebSockets first get a
// 1001 close (waiting up to a second for the answers); in-flight requests
// fail.
func (s *Server) CloseSession(id string) int {
	s.ws.goAway(func(x *wsRelay) bool { return x.sessionID == id }, false) // each gets a 1001 close
	return s.closeTunnels(func(t *tunnel) bool { return t.sess.ID == id })
}

// OpenTunnels reports the open tunnels of a session.
func (s *Server) OpenTunnels(sessionID string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.perSession[sessionID]
}

func (s *Server) closeTunnels(match func(*tunnel) bool) int {
	s.mu.Lock()
	var conns []net.Conn
	n := 0
	for t := range s.tunnels {
		if match(t) {
			n++
			conns = t.markClosed(conns)
		}
	}
	s.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
	return n
}

// serveOuter is the handler of the proxy port: goproxy takes CONNECT, every
// other request is a plain-HTTP proxy request.
func (s *Server) serveOuter(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodConnect {
		s.servePlain(w, r)
		return
	}
	st := &connectState{}
	r = r.WithContext(context.WithValue(r.Context(), connectStateKey{}, st))
	s.gp.ServeHTTP(w, r)
	if st.tunnel != nil && !st.hijacked {
		// goproxy failed to hijack: release what handleConnect reserved.
		if st.tunnel.upstream != nil {
			_ = st.tunnel.upstream.Close()
		}
		st.tunnel.release()
	}
}

// connListener hands intercepted, handshaken TLS connections to the inner
// http.Server.
type connListener struct {
	ch   chan net.Conn
	done chan struct{}
	once sync.Once
}

func newConnListener() *connListener {
	return &connListener{ch: make(chan net.Conn), done: make(chan struct{})}
}

func (l *connListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *connListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *connListener) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)} }

// push hands c to the server; false when the listener is closed.
func (l *connListener) push(c net.Conn) bool {
	select {
	case l.ch <- c:
		return true
	case <-l.done:
		return false
	}
}

type tunnelKey struct{}

// connContext attaches the tunnel to every request of an intercepted HTTP/2
// connection.
func connContext(ctx context.Context, c net.Conn) context.Context {
	if tc, ok := c.(*tls.Conn); ok {
		if t, ok := tc.NetConn().(*tunnelConn); ok {
			return context.WithValue(ctx, tunnelKey{}, t.t)
		}
	}
	return ctx
}
