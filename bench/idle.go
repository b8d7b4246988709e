package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/sha1"
	"crypto/tls"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/http2"
)

// Scenario (5): memory per idle tunnel. The first figure is HTTP/1.1 on
// the proxies as started for the whole run (each with its own GC setting:
// serve runs at GOGC=300 unless GOGC is set). Then each Go proxy
// (aileron-proxy, -compare-bin, goproxy) is started afresh with GOGC=100,
// the runtime's default, once per kind of idle connection: HTTP/1.1
// tunnels, HTTP/2 connections and WebSockets. A fresh process per kind: a
// Go process reuses heap freed by an earlier measurement without growing
// its RSS, which would understate the next one.

// pathWebSocket is the origin's WebSocket endpoint: it answers the
// handshake, echoes each message and holds the connection.
const pathWebSocket = "/ws"

// idleGOGC is the GC setting of the fresh proxies.
const idleGOGC = "GOGC=100"

// idleKiBTarget is the most RSS an idle HTTP/1.1 tunnel may cost with
// GOGC=100; it must also be below goproxy's figure in the same run.
const idleKiBTarget = 40

// idleKind is one kind of idle connection scenario (5) opens.
type idleKind struct {
	key, label string
	open       func(ctx context.Context, o *origin, ep endpoint) (io.Closer, error)
}

var idleKinds = []idleKind{
	{"kib_h1", "RSS KiB per HTTP/1.1 tunnel, GOGC=100", openIdleH1},
	{"kib_h2", "RSS KiB per HTTP/2 connection, GOGC=100", openIdleH2},
	{"kib_ws", "RSS KiB per WebSocket, GOGC=100", openIdleWebSocket},
}

// idleMetrics are scenario (5)'s rows.
func idleMetrics() []metricDef {
	ms := []metricDef{{"kib_per_tunnel", "RSS KiB per tunnel", false}}
	for _, k := range idleKinds {
		ms = append(ms, metricDef{k.key, k.label, false})
	}
	return ms
}

// scenarioIdle runs scenario (5) against every target.
func scenarioIdle(cfg config, o *origin) func(context.Context, []*target, io.Writer) map[string]measure {
	return func(ctx context.Context, ts []*target, progress io.Writer) map[string]measure {
		out := map[string]measure{}
		for _, t := range ts {
			if ctx.Err() != nil {
				return out
			}
			fmt.Fprintf(progress, "  %s\n", t.name)
			out[t.name] = scenarioIdleTunnels(ctx, cfg, o, t)
		}
		for _, k := range idleKinds {
			for _, t := range ts {
				if ctx.Err() != nil {
					return out
				}
				if t.name != targetAileron && t.name != targetCompare && t.name != targetGoproxy {
					continue // not a Go process: GOGC means nothing to it
				}
				fmt.Fprintf(progress, "  %s, %s\n", t.name, k.label)
				m := out[t.name]
				v, ok, note := measureFresh(ctx, cfg, o, t, k)
				if ok { // with a handful of connections the growth may be noise, even negative
					m.set(k.key, v)
				}
				if note != "" {
					m.addNote("%s: %s", k.label, note)
				}
				out[t.name] = m
			}
		}
		return out
	}
}

// measureFresh starts a fresh copy of t with GOGC=100, warms it with one
// connection of kind k, and measures k's idle connections: KiB per
// connection, whether it was measured, and a note.
func measureFresh(ctx context.Context, cfg config, o *origin, t *target, k idleKind) (float64, bool, string) {
	dir, err := os.MkdirTemp("", "aileron-bench-idle-")
	if err != nil {
		return 0, false, err.Error()
	}
	var cl cleanups
	defer func() {
		cl.run()
		_ = os.RemoveAll(dir)
	}()
	var fresh *target
	switch t.name {
	case targetGoproxy:
		self, err := os.Executable()
		if err != nil {
			return 0, false, err.Error()
		}
		fresh, err = startGoproxyTarget(ctx, self, dir, o, &cl, idleGOGC)
		if err != nil {
			return 0, false, "did not start: " + firstErrLine(err)
		}
	default:
		sessions := (cfg.idleTunnels + 249) / 250
		fresh, err = startAileron(ctx, t.name, t.aileron.bin, dir, o, sessions, &cl, idleGOGC)
		if err != nil {
			return 0, false, "did not start: " + firstErrLine(err)
		}
	}
	eps := fresh.endpoints()
	warm, err := k.open(ctx, o, eps[0])
	if err != nil {
		return 0, false, "warm-up: " + err.Error()
	}
	_ = warm.Close()
	time.Sleep(200 * time.Millisecond)
	m := measureIdle(ctx, cfg, o, fresh, k.open)
	v, ok := m.values["kib_per_tunnel"]
	return v, ok, m.note
}

// measureIdle opens cfg.idleTunnels connections with open, spread over t's
// endpoints, and reports the proxy's RSS growth divided by those opened.
func measureIdle(ctx context.Context, cfg config, o *origin, t *target, open func(context.Context, *origin, endpoint) (io.Closer, error)) measure {
	var m measure
	pid := t.pid()
	if pid == 0 {
		m.addNote("no proxy")
		return m
	}
	before, err := rssKiB(pid)
	if err != nil {
		m.addNote("%v", err)
		return m
	}
	eps := t.endpoints()
	conns := make([]io.Closer, cfg.idleTunnels)
	errs := make([]error, cfg.idleTunnels)
	tctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	work := make(chan int)
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				conns[i], errs[i] = open(tctx, o, eps[i%len(eps)])
			}
		}()
	}
	for i := range conns {
		work <- i
	}
	close(work)
	wg.Wait()
	defer func() {
		for _, c := range conns {
			if c != nil {
				_ = c.Close()
			}
		}
	}()
	opened := 0
	var firstErr error
	for i, c := range conns {
		if c != nil {
			opened++
		} else if firstErr == nil {
			firstErr = errs[i]
		}
	}
	if opened < cfg.idleTunnels {
		m.addNote("opened %d of %d tunnels (first error: %v)", opened, cfg.idleTunnels, firstErr)
	}
	if opened == 0 {
		return m
	}
	// Let the proxy settle (goroutines park, buffers are released).
	select {
	case <-ctx.Done():
		return m
	case <-time.After(time.Second):
	}
	after, err := rssKiB(pid)
	if err != nil {
		m.addNote("%v", err)
		return m
	}
	m.set("kib_per_tunnel", float64(after-before)/float64(opened))
	m.addNote("RSS %.1f -> %.1f MiB with %d tunnels", float64(before)/1024, float64(after)/1024, opened)
	return m
}

// dialTunnel opens a TLS connection to the origin through ep (directly for
// direct), offering the ALPN protocol proto.
func dialTunnel(ctx context.Context, o *origin, ep endpoint, proto string) (*tls.Conn, error) {
	d := net.Dialer{Timeout: 10 * time.Second}
	dialAddr := o.addr()
	if ep.proxyURL != nil {
		dialAddr = ep.proxyURL.Host
	}
	raw, err := d.DialContext(ctx, "tcp", dialAddr)
	if err != nil {
		return nil, err
	}
	_ = raw.SetDeadline(time.Now().Add(30 * time.Second))
	if ep.proxyURL != nil {
		if err := connect(raw, o.authority(), ep.proxyURL.User); err != nil {
			_ = raw.Close()
			return nil, err
		}
	}
	conn := tls.Client(raw, &tls.Config{ServerName: originHost, RootCAs: ep.roots, NextProtos: []string{proto}, MinVersion: tls.VersionTLS12})
	if err := conn.HandshakeContext(ctx); err != nil {
		_ = raw.Close()
		return nil, fmt.Errorf("TLS handshake: %w", err)
	}
	if got := conn.ConnectionState().NegotiatedProtocol; got != proto {
		_ = conn.Close()
		return nil, fmt.Errorf("ALPN negotiated %q, want %q", got, proto)
	}
	_ = raw.SetDeadline(time.Time{})
	return conn, nil
}

// openIdleH1 is openIdleTunnel (client.go) as an idleKind opener.
func openIdleH1(ctx context.Context, o *origin, ep endpoint) (io.Closer, error) {
	return openIdleTunnel(ctx, o, ep)
}

// openIdleH2 opens an HTTP/2 connection through ep, sends one GET on it
// and leaves it open and idle.
func openIdleH2(ctx context.Context, o *origin, ep endpoint) (io.Closer, error) {
	conn, err := dialTunnel(ctx, o, ep, "h2")
	if err != nil {
		return nil, err
	}
	tr := &http2.Transport{}
	cc, err := tr.NewClientConn(conn)
	if err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("starting HTTP/2: %w", err)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, o.url(pathSmall), nil)
	resp, err := cc.RoundTrip(req)
	if err != nil {
		_ = cc.Close()
		return nil, fmt.Errorf("GET over HTTP/2: %w", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_ = cc.Close()
		return nil, fmt.Errorf("GET over HTTP/2: status %d", resp.StatusCode)
	}
	return cc, nil
}

// openIdleWebSocket opens a WebSocket through ep (HTTP/1.1 Upgrade), has
// one message echoed, and leaves it open and idle.
func openIdleWebSocket(ctx context.Context, o *origin, ep endpoint) (io.Closer, error) {
	conn, err := dialTunnel(ctx, o, ep, "http/1.1")
	if err != nil {
		return nil, err
	}
	fail := func(err error) (io.Closer, error) {
		_ = conn.Close()
		return nil, err
	}
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	key := make([]byte, 16)
	_, _ = rand.Read(key)
	k := base64.StdEncoding.EncodeToString(key)
	req := "GET " + pathWebSocket + " HTTP/1.1\r\nHost: " + o.authority() + "\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Key: " + k + "\r\nSec-WebSocket-Version: 13\r\n\r\n"
	if _, err := io.WriteString(conn, req); err != nil {
		return fail(fmt.Errorf("writing the WebSocket handshake: %w", err))
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodGet})
	if err != nil {
		return fail(fmt.Errorf("reading the WebSocket handshake: %w", err))
	}
	if resp.StatusCode != http.StatusSwitchingProtocols || resp.Header.Get("Sec-WebSocket-Accept") != wsAccept(k) {
		return fail(fmt.Errorf("WebSocket handshake: status %d, accept %q", resp.StatusCode, resp.Header.Get("Sec-WebSocket-Accept")))
	}
	msg := []byte("hello")
	if err := writeWSFrame(conn, 0x1, msg, true); err != nil {
		return fail(fmt.Errorf("writing a message: %w", err))
	}
	op, got, err := readWSFrame(br)
	if err != nil || op != 0x1 || string(got) != string(msg) {
		return fail(fmt.Errorf("reading the echo: opcode %d, %q, %v", op, got, err))
	}
	_ = conn.SetDeadline(time.Time{})
	return conn, nil
}

// wsAccept is the Sec-WebSocket-Accept answer to key (RFC 6455 §4.2.2).
func wsAccept(key string) string {
	h := sha1.Sum([]byte(key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
	return base64.StdEncoding.EncodeToString(h[:])
}

// writeWSFrame writes one final frame of at most 125 bytes, masked when
// mask (a client's frames are).
func writeWSFrame(w io.Writer, op byte, payload []byte, mask bool) error {
	if len(payload) > 125 {
		return errors.New("payload too long for this writer")
	}
	b := []byte{0x80 | op, byte(len(payload))}
	p := append([]byte(nil), payload...)
	if mask {
		var m [4]byte
		_, _ = rand.Read(m[:])
		b[1] |= 0x80
		b = append(b, m[:]...)
		for i := range p {
			p[i] ^= m[i%4]
		}
	}
	_, err := w.Write(append(b, p...))
	return err
}

// readWSFrame reads one frame of at most 64 KiB and returns its opcode and
// unmasked payload.
func readWSFrame(br *bufio.Reader) (byte, []byte, error) {
	var h [2]byte
	if _, err := io.ReadFull(br, h[:]); err != nil {
		return 0, nil, err
	}
	n := uint64(h[1] & 0x7f)
	switch n {
	case 126:
		var l [2]byte
		if _, err := io.ReadFull(br, l[:]); err != nil {
			return 0, nil, err
		}
		n = uint64(binary.BigEndian.Uint16(l[:]))
	case 127:
		return 0, nil, errors.New("frame longer than 64 KiB")
	}
	var m [4]byte
	masked := h[1]&0x80 != 0
	if masked {
		if _, err := io.ReadFull(br, m[:]); err != nil {
			return 0, nil, err
		}
	}
	p := make([]byte, n)
	if _, err := io.ReadFull(br, p); err != nil {
		return 0, nil, err
	}
	if masked {
		for i := range p {
			p[i] ^= m[i%4]
		}
	}
	return h[0] & 0x0f, p, nil
}

// serveWebSocket is the origin's WebSocket endpoint: it completes the
// handshake, echoes text and binary messages (one frame each), answers a
// close, and holds the connection until the client leaves.
func serveWebSocket(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get("Sec-WebSocket-Key")
	if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") || key == "" {
		http.Error(w, "a WebSocket handshake is expected here", http.StatusBadRequest)
		return
	}
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Time{})
	_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: " + wsAccept(key) + "\r\n\r\n")
	if brw.Flush() != nil {
		return
	}
	for {
		op, p, err := readWSFrame(brw.Reader)
		if err != nil || len(p) > 125 {
			return
		}
		switch op {
		case 0x1, 0x2:
			if writeWSFrame(conn, op, p, false) != nil {
				return
			}
		case 0x8:
			_ = writeWSFrame(conn, 0x8, p, false)
			return
		}
	}
}

// idleChecks are scenario (5)'s targets: an idle HTTP/1.1 tunnel at most
// idleKiBTarget with GOGC=100 and below goproxy's figure in the same run;
// HTTP/2 and WebSockets get the same target only where their figure is
// worse than HTTP/1.1's.
func idleChecks(rep *report) []check {
	h1, okH1 := rep.idleValue("5.kib_h1", targetAileron)
	var cs []check
	for _, k := range idleKinds {
		id := "5." + k.key
		v, ok := rep.idleValue(id, targetAileron)
		if k.key != "kib_h1" && ok && okH1 && v <= h1 {
			continue // no worse than HTTP/1.1: no target of its own
		}
		c := check{Name: fmt.Sprintf("(5) %s <= %d and below goproxy's", k.label, idleKiBTarget), Limit: idleKiBTarget, Unit: " KiB"}
		g, okG := rep.idleValue(id, targetGoproxy)
		if ok {
			c.Value, c.Measured = v, true
			c.Met = v <= idleKiBTarget && okG && v < g
		}
		if okG {
			c.BestPeer = fmt.Sprintf("goproxy %.1f (%s)", g, map[bool]string{true: "beaten", false: "not beaten"}[ok && v < g])
		}
		cs = append(cs, c)
	}
	return cs
}

// idleValue is target's figure on row id.
func (r *report) idleValue(id, target string) (float64, bool) {
	rw, ok := r.row(id)
	if !ok {
		return 0, false
	}
	v, ok := rw.Values[target]
	return v, ok
}
