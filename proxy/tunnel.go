package proxy

import (
	"crypto/tls"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aileron-dev/aileron-proxy/internal/contract"
	"github.com/aileron-dev/aileron-proxy/internal/hostport"
)

// The tunnel lifecycle: one accepted CONNECT, from reservation against the
// per-session limit through the connections it carries to release.

// tunnel is one accepted CONNECT.
type tunnel struct {
	s    *Server
	sess Session
	mode string
	// target is the normalized CONNECT host:port; host is its lower-case,
	// unbracketed host without a trailing dot.
	target string
	host   string
	port   int
	// hostHeader is the Host value sent upstream.
	hostHeader string
	leaf       *tls.Certificate
	opened     time.Time

	// client and upstream are set under s.mu; upstream only for passthrough.
	client   net.Conn
	upstream net.Conn
	// closed is set under s.mu by closeTunnels, so a tunnel closed before
	// hijackConnect set client is closed there instead of being served.
	closed bool
	// expiry closes the tunnel when its session expires; set under s.mu,
	// nil for a session without expiry.
	expiry *time.Timer

	// h1 is the HTTP/1.1 serving state of an intercepted tunnel
	// (serve_h1.go), for Shutdown to close it when idle.
	h1 atomic.Pointer[h1ServerConn]

	releaseOnce sync.Once
}

// release forgets the tunnel; it runs once, when the client connection
// closes (or when a reserved tunnel is never hijacked).
func (t *tunnel) release() {
	t.releaseOnce.Do(func() {
		s := t.s
		s.mu.Lock()
		if t.expiry != nil {
			t.expiry.Stop()
		}
		delete(s.tunnels, t)
		if n := s.perSession[t.sess.ID] - 1; n > 0 {
			s.perSession[t.sess.ID] = n
		} else {
			delete(s.perSession, t.sess.ID)
		}
		drained := s.shuttingDown && len(s.tunnels) == 0
		burst := s.burstOverLocked()
		s.mu.Unlock()
		s.metrics.tunnelGauge(t.mode).Dec()
		if drained {
			s.drainedOnce.Do(func() { close(s.drained) })
		}
		if burst {
			go s.returnMemory() // memory.go
		}
	})
}

// markClosed marks t closed and appends its open connections to conns, for
// the caller to close once it has released s.mu, which it holds.
func (t *tunnel) markClosed(conns []net.Conn) []net.Conn {
	t.closed = true
	if t.client != nil {
		conns = append(conns, t.client)
	}
	if t.upstream != nil {
		conns = append(conns, t.upstream)
	}
	return conns
}

// expire closes t when its session expires, unless it is released already.
func (t *tunnel) expire() {
	s := t.s
	var conns []net.Conn
	s.mu.Lock()
	if _, open := s.tunnels[t]; open {
		conns = t.markClosed(nil)
	}
	s.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
}

// tunnelConn is the client side of a tunnel; closing it releases the tunnel.
// The TLS config finds the tunnel through it (ClientHelloInfo.Conn).
type tunnelConn struct {
	net.Conn
	t *tunnel
	// batch collects writes between startBatch and flushBatch (batch.go);
	// only the goroutine serving the connection uses it.
	batch *[]byte
}

func (c *tunnelConn) Close() error {
	err := c.Conn.Close()
	c.t.release()
	return err
}

// CloseWrite half-closes a TCP connection; other conns are left open.
func (c *tunnelConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// openTunnel reserves a tunnel for sess, enforcing the per-session limit.
func (s *Server) openTunnel(sess Session, mode, target, host string, port int) (*tunnel, int, contract.Code) {
	t := &tunnel{s: s, sess: sess, mode: mode, target: target, host: host, port: port, opened: s.now()}
	t.hostHeader = target
	if port == 443 {
		t.hostHeader = hostport.Join(host, 0)
	}
	s.mu.Lock()
	if s.shuttingDown {
		s.mu.Unlock()
		return nil, http.StatusServiceUnavailable, contract.CodeShuttingDown
	}
	if s.perSession[sess.ID] >= s.limits.MaxTunnelsPerSession {
		s.mu.Unlock()
		return nil, http.StatusTooManyRequests, contract.CodeTooManyTunnels
	}
	s.perSession[sess.ID]++
	s.tunnels[t] = struct{}{}
	s.noteOpenLocked()
	if !sess.ExpiresAt.IsZero() {
		// Requests check expiry themselves; this also ends passthrough
		// tunnels and idle keep-alive tunnels of an expired session.
		t.expiry = time.AfterFunc(sess.ExpiresAt.Sub(t.opened), t.expire)
	}
	s.mu.Unlock()
	s.metrics.tunnelGauge(mode).Inc()
	return t, 0, ""
}

// names reports whether an authority (Host header or absolute-URL host)
// names the tunnel's CONNECT target. An empty authority names nothing else.
func (t *tunnel) names(authority string) bool {
	if authority == "" || authority == t.hostHeader || authority == t.target {
		return true
	}
	hp, err := hostport.New(authority)
	return err == nil && hp.Host == t.host && hp.WithDefaultPort(443).Port == t.port
}
