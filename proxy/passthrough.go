package proxy

import (
	"errors"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"go.uber.org/zap/zapcore"

	"github.com/aileron-dev/aileron-proxy/audit"
	"github.com/aileron-dev/aileron-proxy/internal/contract"
)

// runPassthrough copies bytes both ways until both directions end, closing a
// tunnel idle in both directions for Limits.IdleTimeout, then audits it.
func (s *Server) runPassthrough(t *tunnel, client *tunnelConn) {
	up := t.upstream
	var last atomic.Int64
	last.Store(time.Now().UnixNano())
	var bytesIn int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		n, err := s.pipe(up, client, &last)
		bytesIn = n
		if err != nil {
			_ = client.Close()
			_ = up.Close()
			return
		}
		closeWrite(up)
	}()
	bytesOut, err := s.pipe(client, up, &last)
	if err != nil {
		_ = client.Close()
		_ = up.Close()
	} else {
		_ = client.CloseWrite()
	}
	<-done
	_ = up.Close()
	_ = client.Close()

	s.record(&exchange{start: t.opened, ev: audit.Event{
		Event: audit.EventPassthrough, AuditID: audit.NewID(), SessionID: t.sess.ID, Method: http.MethodConnect,
		Host: t.target, Decision: contract.DecisionAllowed, Reason: modePassthrough, BytesIn: bytesIn, BytesOut: bytesOut,
		Source: contract.SourceProxy,
	}}, zapcore.InfoLevel, "passthrough tunnel closed")
	s.metrics.decision(true, modePassthrough)
}

// pipe copies src to dst. A read that times out continues while the other
// direction moved within the idle timeout. It returns nil at EOF.
func (s *Server) pipe(dst, src net.Conn, last *atomic.Int64) (int64, error) {
	bufp := s.bufPool.Get().(*[]byte)
	defer s.bufPool.Put(bufp)
	buf := *bufp
	idle := s.limits.IdleTimeout
	var total int64
	for {
		now := time.Now()
		_ = src.SetReadDeadline(now.Add(idle))
		n, err := src.Read(buf)
		if n > 0 {
			now = time.Now()
			last.Store(now.UnixNano())
			_ = dst.SetWriteDeadline(now.Add(idle))
			w, werr := dst.Write(buf[:n])
			total += int64(w)
			if werr != nil {
				return total, werr
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				return total, nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() && time.Since(time.Unix(0, last.Load())) < idle {
				continue
			}
			return total, err
		}
	}
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
		return
	}
	_ = c.Close()
}
