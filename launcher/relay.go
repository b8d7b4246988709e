package launcher

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"go.uber.org/zap"
)

// Relay defaults for RelayConfig fields left zero.
const (
	DefaultRelayMaxConns    = 256
	DefaultRelayDialTimeout = 10 * time.Second
)

// RelayConfig configures NewRelay.
type RelayConfig struct {
	// Logger is required; connections are logged at debug level.
	Logger *zap.Logger
	// Name labels the relay in logs ("proxy", "api").
	Name string
	// Listen is the ip:port to listen on; port 0 picks a free one. The IP
	// need not exist yet: on Linux the socket is bound with IP_FREEBIND,
	// because Podman adds an internal network's gateway address to the host
	// only when the first container joins. Required, and never a wildcard
	// address: the relay is meant to be reachable from one network only.
	Listen string
	// Target is the host:port every accepted connection is forwarded to
	// (the daemon's loopback proxy or API). Required.
	Target string
	// MaxConns bounds the connections relayed at once; zero means
	// DefaultRelayMaxConns. Connections beyond it are closed at once.
	MaxConns int
	// DialTimeout bounds connecting to Target; zero means
	// DefaultRelayDialTimeout.
	DialTimeout time.Duration
}

// Relay forwards TCP connections from one listener to one target, byte for
// byte in both directions, passing half-closes through. The launcher runs
// two on a sandbox network's gateway address, in front of the daemon's
// loopback proxy and API, so the daemon never listens on an address other
// hosts or other containers could reach directly.
type Relay struct {
	cfg    RelayConfig
	log    *zap.Logger
	ln     net.Listener
	ctx    context.Context
	cancel context.CancelFunc
	slots  chan struct{}

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// NewRelay listens on cfg.Listen and starts relaying to cfg.Target until
// Close.
func NewRelay(cfg RelayConfig) (*Relay, error) {
	if cfg.Logger == nil {
		return nil, errors.New("creating a relay: RelayConfig.Logger is required")
	}
	if cfg.Target == "" {
		return nil, errors.New("creating a relay: RelayConfig.Target is required")
	}
	if _, _, err := net.SplitHostPort(cfg.Target); err != nil {
		return nil, fmt.Errorf("creating a relay: target %q is not host:port: %w", cfg.Target, err)
	}
	host, _, err := net.SplitHostPort(cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("creating a relay: listen address %q is not ip:port: %w", cfg.Listen, err)
	}
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		return nil, fmt.Errorf("creating a relay: listen address %q must be a specific IP (the sandbox network's gateway), not a name or a wildcard", cfg.Listen)
	}
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = DefaultRelayMaxConns
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = DefaultRelayDialTimeout
	}
	lc := net.ListenConfig{Control: freebindControl}
	ln, err := lc.Listen(context.Background(), "tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("listening for the %s relay on %s: %w", cfg.Name, cfg.Listen, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &Relay{
		cfg:    cfg,
		log:    cfg.Logger.Named("relay").With(zap.String("relay", cfg.Name)),
		ln:     ln,
		ctx:    ctx,
		cancel: cancel,
		slots:  make(chan struct{}, cfg.MaxConns),
		conns:  map[net.Conn]struct{}{},
	}
	r.wg.Add(1)
	go r.serve()
	return r, nil
}

// Addr is the bound ip:port.
func (r *Relay) Addr() string { return r.ln.Addr().String() }

// Close stops accepting, closes every relayed connection and waits until
// all of the relay's goroutines have returned.
func (r *Relay) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	for c := range r.conns {
		c.Close()
	}
	r.mu.Unlock()
	r.cancel()
	err := r.ln.Close()
	r.wg.Wait()
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}

func (r *Relay) serve() {
	defer r.wg.Done()
	var backoff time.Duration
	for {
		c, err := r.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) || r.ctx.Err() != nil {
				return
			}
			// Out of file descriptors and the like: back off, bounded.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			r.log.Warn("accepting a connection failed; retrying", zap.Error(err), zap.Duration("backoff", backoff))
			select {
			case <-time.After(backoff):
			case <-r.ctx.Done():
				return
			}
			continue
		}
		backoff = 0
		select {
		case r.slots <- struct{}{}:
		default:
			r.log.Warn("too many relayed connections; refusing one", zap.Int("max_conns", r.cfg.MaxConns))
			c.Close()
			continue
		}
		if !r.track(c) {
			<-r.slots
			c.Close()
			return
		}
		r.wg.Add(1)
		go r.handle(c)
	}
}

// track registers c so Close can close it; false when the relay closed.
func (r *Relay) track(c net.Conn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return false
	}
	r.conns[c] = struct{}{}
	return true
}

func (r *Relay) untrack(cs ...net.Conn) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range cs {
		delete(r.conns, c)
	}
}

func (r *Relay) handle(down net.Conn) {
	defer r.wg.Done()
	defer func() { <-r.slots }()
	defer r.untrack(down)
	defer down.Close()

	dctx, cancel := context.WithTimeout(r.ctx, r.cfg.DialTimeout)
	up, err := (&net.Dialer{}).DialContext(dctx, "tcp", r.cfg.Target)
	cancel()
	if err != nil {
		if r.ctx.Err() == nil {
			r.log.Warn("connecting to the relay target failed", zap.String("target", r.cfg.Target), zap.Error(err))
		}
		return
	}
	if !r.track(up) {
		up.Close()
		return
	}
	defer r.untrack(up)
	defer up.Close()
	start := time.Now()

	type result struct {
		n   int64
		err error
	}
	toUp, toDown := make(chan result, 1), make(chan result, 1)
	go func() { n, err := pipe(up, down); toUp <- result{n, err} }()
	go func() { n, err := pipe(down, up); toDown <- result{n, err} }()
	var sent, received int64
	for range 2 {
		var res result
		select {
		case res = <-toUp:
			sent = res.n
		case res = <-toDown:
			received = res.n
		}
		if res.err != nil {
			// A failed direction ends the connection: closing both ends
			// unblocks the other copy.
			down.Close()
			up.Close()
		}
	}
	if ce := r.log.Check(zap.DebugLevel, "relayed connection"); ce != nil {
		ce.Write(zap.String("remote_addr", down.RemoteAddr().String()), zap.Int64("bytes_out", sent),
			zap.Int64("bytes_in", received), zap.Int64("duration_ms", time.Since(start).Milliseconds()))
	}
}

// pipe copies src to dst until src reaches EOF, then half-closes dst's
// write side so the peer sees the EOF too. A nil error means a clean EOF.
func pipe(dst, src net.Conn) (int64, error) {
	n, err := io.Copy(dst, src)
	if err != nil {
		return n, err
	}
	if cw, ok := dst.(interface{ CloseWrite() error }); ok {
		if err := cw.CloseWrite(); err != nil {
			return n, err
		}
	}
	return n, nil
}
