package proxy

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aileron-dev/aileron-proxy/credentials"
)

// The relay of an open WebSocket: one pump per direction, the close
// handshake, and the registry that session end and shutdown close with 1001.

// wsPeer is one side of a relay: where its frames come from and go to.
type wsPeer struct {
	r      io.Reader
	mu     sync.Mutex // serializes writes: the relay and a going-away close
	w      io.Writer
	flush  func() error // HTTP/2: push each frame out; nil for a connection
	close  func()
	masked bool // frames the proxy originates toward it are masked (the upstream)
	dead   bool // under mu: closed, write nothing more (an HTTP/2 handler may have returned)
}

// wsFramePool holds the buffers where write joins a small frame's header
// and payload: taken per frame, so an idle relay holds none.
var wsFramePool = sync.Pool{New: func() any { b := make([]byte, 0, wsCoalesceMax); return &b }}

// wsCoalesceMax is the largest frame, header included, that write sends
// with one Write: over a TLS connection two Writes are two records and two
// system calls, which dominate the cost of a small frame.
const wsCoalesceMax = 14 + 1024

// shut closes the peer for good.
func (p *wsPeer) shut() {
	p.close()
	p.mu.Lock()
	p.dead = true
	p.mu.Unlock()
}

// write sends one frame, header and payload, as one unit.
func (p *wsPeer) write(hdr, payload []byte) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.dead {
		return net.ErrClosed
	}
	if n := len(hdr) + len(payload); n <= wsCoalesceMax && len(payload) > 0 {
		bp := wsFramePool.Get().(*[]byte)
		*bp = append(append((*bp)[:0], hdr...), payload...)
		_, err := p.w.Write(*bp)
		wsFramePool.Put(bp)
		if err != nil {
			return err
		}
	} else {
		if _, err := p.w.Write(hdr); err != nil {
			return err
		}
		if len(payload) > 0 {
			if _, err := p.w.Write(payload); err != nil {
				return err
			}
		}
	}
	if p.flush != nil {
		return p.flush()
	}
	return nil
}

// sendClose sends a close frame the proxy originates.
func (p *wsPeer) sendClose(code int, reason string) {
	payload := closePayload(code, reason)
	var key *[4]byte
	if p.masked {
		key = new([4]byte)
		_, _ = rand.Read(key[:])
		maskWS(*key, 0, payload)
	}
	_ = p.write(appendWSHeader(nil, true, wsOpClose, len(payload), key), payload)
}

// wsRelay is one relayed WebSocket.
type wsRelay struct {
	s                   *Server
	sessionID           string
	client, upstream    *wsPeer
	scrub               *credentials.Scrubber
	closing             atomic.Bool // a going-away close was sent to both sides
	done                chan struct{}
	framesIn, bytesIn   atomic.Int64 // from the client
	framesOut, bytesOut atomic.Int64 // from the upstream (bytes: as passed on)

	mu        sync.Mutex
	closeCode int
	closedBy  string
}

// noteClose records the first close of the relay.
func (x *wsRelay) noteClose(code int, by string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.closedBy == "" {
		x.closeCode, x.closedBy = code, by
	}
}

func (x *wsRelay) closeInfo() (int, string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.closedBy == "" {
		return wsCloseAbnormal, "proxy"
	}
	return x.closeCode, x.closedBy
}

// errWSClosed ends a pump that passed on (or, when closing, took) a close
// frame.
var errWSClosed = errors.New("close frame passed")

// run relays until both sides are done, or one fails, then closes both.
// The client's pump runs on the calling goroutine and the upstream's on
// one of its own: an open WebSocket costs two goroutines, not three.
func (x *wsRelay) run() {
	defer close(x.done)
	var (
		mu    sync.Mutex
		ended int
		grace *time.Timer
	)
	end := func(err error, side string) {
		if err != nil && err != errWSClosed && !errors.Is(err, errWSProtocol) {
			x.noteClose(wsCloseAbnormal, side) // its connection ended first, without a close frame
		}
		mu.Lock()
		defer mu.Unlock()
		ended++
		switch {
		case ended == 2:
			if grace != nil {
				grace.Stop()
			}
		case err == errWSClosed:
			// The other side answers the close, then ends; do not wait
			// forever.
			grace = time.AfterFunc(wsGrace, func() { x.abort(err) })
		default:
			x.abort(err)
		}
	}
	down := make(chan struct{})
	go func() {
		defer close(down)
		end(x.pumpDown(), "upstream")
	}()
	end(x.pumpUp(), "client")
	<-down
	x.client.shut()
	x.upstream.shut()
}

// abort ends the relay after err: a protocol error closes both sides with
// 1002; a side that dropped leaves the other without a close frame, so
// that it sees the abort too.
func (x *wsRelay) abort(err error) {
	if errors.Is(err, errWSProtocol) {
		x.noteClose(wsCloseProtocolError, "proxy")
		x.client.sendClose(wsCloseProtocolError, "protocol error")
		x.upstream.sendClose(wsCloseProtocolError, "protocol error")
	}
	x.client.close()
	x.upstream.close()
}

// goAway closes the relay with 1001 (session end, shutdown): a close frame
// to each side, then, after at most wsGoAwayGrace for their answers, the
// connections.
func (x *wsRelay) goAway() {
	if !x.closing.CompareAndSwap(false, true) {
		return
	}
	x.noteClose(wsCloseGoingAway, "proxy")
	go func() {
		// A pump may hold a peer's write lock while its source stalls
		// mid-frame; closing the connections below ends that wait.
		x.client.sendClose(wsCloseGoingAway, "aileron-proxy: session ended or proxy shutting down")
		x.upstream.sendClose(wsCloseGoingAway, "")
	}()
	t := time.NewTimer(wsGoAwayGrace)
	defer t.Stop()
	select {
	case <-x.done:
	case <-t.C:
		x.client.close()
		x.upstream.close()
	}
}

// pumpUp passes client frames to the upstream unchanged (they are masked
// by the client), counting them and noting a close code.
func (x *wsRelay) pumpUp() error {
	var hb [14]byte
	var h wsHeader
	for {
		raw, err := readWSHeader(x.client.r, hb[:], &h)
		if err != nil {
			return err
		}
		if !h.masked {
			return fmt.Errorf("%w: client frame not masked", errWSProtocol)
		}
		if h.rsv != 0 {
			return fmt.Errorf("%w: RSV bits set without a negotiated extension", errWSProtocol)
		}
		x.framesIn.Add(1)
		x.bytesIn.Add(h.length)
		if h.op == wsOpClose {
			var p [wsMaxControl]byte
			if _, err := io.ReadFull(x.client.r, p[:h.length]); err != nil {
				return noEOF(err)
			}
			plain := p
			maskWS(h.key, 0, plain[:h.length])
			x.noteClose(closeCode(plain[:h.length]), "client")
			if x.closing.Load() {
				return errWSClosed // the proxy sent its own close upstream
			}
			if err := x.upstream.write(raw, p[:h.length]); err != nil {
				return err
			}
			return errWSClosed
		}
		if x.closing.Load() {
			if _, err := io.CopyN(io.Discard, x.client.r, h.length); err != nil {
				return noEOF(err)
			}
			continue
		}
		if err := x.copyPayload(x.upstream, raw, x.client.r, h.length); err != nil {
			return err
		}
	}
}

// copyPayload writes a frame header and then its payload of n bytes from r,
// unchanged, in pooled pieces.
func (x *wsRelay) copyPayload(to *wsPeer, hdr []byte, r io.Reader, n int64) error {
	if n <= wsMaxControl {
		var p [wsMaxControl]byte
		if _, err := io.ReadFull(r, p[:n]); err != nil {
			return noEOF(err)
		}
		return to.write(hdr, p[:n])
	}
	bufp := x.s.bufPool.Get().(*[]byte)
	defer x.s.bufPool.Put(bufp)
	buf := *bufp
	to.mu.Lock()
	defer to.mu.Unlock()
	if to.dead {
		return net.ErrClosed
	}
	if _, err := to.w.Write(hdr); err != nil {
		return err
	}
	for n > 0 {
		k, err := io.ReadFull(r, buf[:min(n, int64(len(buf)))])
		if err != nil {
			return noEOF(err)
		}
		if _, err := to.w.Write(buf[:k]); err != nil {
			return err
		}
		n -= int64(k)
	}
	if to.flush != nil {
		return to.flush()
	}
	return nil
}

// pumpDown passes upstream frames to the client with every payload
// scrubbed. Data payloads stream through a ChunkMasker per message, so a
// secret split across frames is still masked; the frames passed on carry
// what the masker releases (the same bytes, possibly re-fragmented).
func (x *wsRelay) pumpDown() error {
	var hb, ob [14]byte
	var h wsHeader
	cm := x.scrub.Chunks()
	var msgOp byte
	inMsg, started := false, false
	for {
		_, err := readWSHeader(x.upstream.r, hb[:], &h)
		if err != nil {
			return err
		}
		if h.rsv != 0 {
			return fmt.Errorf("%w: RSV bits set without a negotiated extension", errWSProtocol)
		}
		x.framesOut.Add(1)
		if h.isControl() {
			var p [wsMaxControl]byte
			if _, err := io.ReadFull(x.upstream.r, p[:h.length]); err != nil {
				return noEOF(err)
			}
			if h.masked {
				maskWS(h.key, 0, p[:h.length])
			}
			x.scrub.Mask(p[:h.length])
			if h.op == wsOpClose {
				x.noteClose(closeCode(p[:h.length]), "upstream")
				if x.closing.Load() {
					return errWSClosed
				}
			}
			if x.closing.Load() {
				continue
			}
			x.bytesOut.Add(h.length)
			if err := x.client.write(appendWSHeader(ob[:0], true, h.op, int(h.length), nil), p[:h.length]); err != nil {
				return err
			}
			if h.op == wsOpClose {
				return errWSClosed
			}
			continue
		}
		switch {
		case h.op != wsOpContinuation && inMsg, h.op == wsOpContinuation && !inMsg:
			return fmt.Errorf("%w: frame %#x out of message order", errWSProtocol, h.op)
		case h.op != wsOpContinuation:
			inMsg, started, msgOp = true, false, h.op
		}
		if err := x.scrubPayload(&h, cm, &started, msgOp, ob[:0]); err != nil {
			return err
		}
		if h.fin {
			inMsg = false
		}
	}
}

// scrubPayload reads one upstream data frame's payload in pooled pieces and
// passes on what the masker releases, each piece as a frame of the message.
func (x *wsRelay) scrubPayload(h *wsHeader, cm *credentials.ChunkMasker, started *bool, msgOp byte, ob []byte) error {
	bufp := x.s.bufPool.Get().(*[]byte)
	defer x.s.bufPool.Put(bufp)
	buf := *bufp
	var pos int64
	for {
		k := min(h.length-pos, int64(len(buf)))
		if _, err := io.ReadFull(x.upstream.r, buf[:k]); err != nil {
			return noEOF(err)
		}
		if h.masked {
			maskWS(h.key, pos, buf[:k])
		}
		pos += k
		final := h.fin && pos == h.length
		out := cm.Next(buf[:k], final)
		if !x.closing.Load() && (len(out) > 0 || final) {
			op := byte(wsOpContinuation)
			if !*started {
				op, *started = msgOp, true
			}
			x.bytesOut.Add(int64(len(out)))
			if err := x.client.write(appendWSHeader(ob, final, op, len(out), nil), out); err != nil {
				return err
			}
		}
		if pos == h.length {
			return nil
		}
	}
}

// wsRegistry holds the open relays, for session end and shutdown.
type wsRegistry struct {
	mu     sync.Mutex
	open   map[*wsRelay]struct{}
	closed bool // shutting down: no new relays
}

// add registers x; false when the proxy is shutting down, and x must go
// away at once.
func (g *wsRegistry) add(x *wsRelay) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.open == nil {
		g.open = make(map[*wsRelay]struct{})
	}
	g.open[x] = struct{}{}
	return !g.closed
}

func (g *wsRegistry) remove(x *wsRelay) {
	g.mu.Lock()
	delete(g.open, x)
	g.mu.Unlock()
}

// goAway closes, with 1001, every open relay that match selects, in
// parallel, and returns how many; shutdown also refuses new relays.
func (g *wsRegistry) goAway(match func(*wsRelay) bool, shutdown bool) int {
	g.mu.Lock()
	if shutdown {
		g.closed = true
	}
	var list []*wsRelay
	for x := range g.open {
		if match(x) {
			list = append(list, x)
		}
	}
	g.mu.Unlock()
	var wg sync.WaitGroup
	for _, x := range list {
		wg.Add(1)
		go func() { defer wg.Done(); x.goAway() }()
	}
	wg.Wait()
	return len(list)
}
