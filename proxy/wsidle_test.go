package proxy

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestDrainReader reads what the hijacked reader holds first, in order and
// across short reads, then the connection, and drops the reader once it is
// empty.
func TestDrainReader(t *testing.T) {
	br := bufio.NewReaderSize(strings.NewReader("held-back|then the connection"), 16)
	if _, err := br.Peek(10); err != nil {
		t.Fatal(err)
	}
	held := br.Buffered()
	d := newDrainReader(br, br) // past the buffered bytes, br reads its source
	var got []byte
	p := make([]byte, 3)
	for {
		n, err := d.Read(p)
		got = append(got, p[:n]...)
		if len(got) == held && d.br != nil {
			t.Fatalf("the reader is kept after its %d bytes were read", held)
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if string(got) != "held-back|then the connection" {
		t.Fatalf("read %q", got)
	}
	if d := newDrainReader(bufio.NewReader(strings.NewReader("x")), nil); d.br != nil {
		t.Fatal("an empty reader is kept")
	}
}

// TestWebSocketIdleAndBursts opens many WebSockets whose first frame comes
// in the same TLS write as the handshake (so the hijacked reader holds it
// when the relay starts) and has each alternate idle waits with bursts of
// messages of every length encoding, some fragmented by the client and
// several frames to a write, all at once. Every echo must come back whole
// and in order: the relay hands the held-back bytes to its pump before it
// drops the reader, and the copy buffers it takes per frame from the shared
// pool are never shared between pumps.
func TestWebSocketIdleAndBursts(t *testing.T) {
	sockets, rounds := 24, 6
	if raceEnabled {
		sockets, rounds = 12, 4
	}
	e, _ := newWSEnv(t, func(c *Config) { c.Limits.MaxTunnelsPerSession = sockets + 10 })
	var wg sync.WaitGroup
	for i := range sockets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := idleAndBursts(t, e, i, rounds); err != nil {
				t.Errorf("socket %d: %v", i, err)
			}
		}()
	}
	wg.Wait()
}

func idleAndBursts(t *testing.T, e *env, i, rounds int) error {
	tc, br := e.rawTunnel(t, wsHost+":443")
	first := []byte(fmt.Sprintf("first message of socket %d", i))
	req := "GET /ws HTTP/1.1\r\nHost: " + wsHost + "\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n" +
		"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
	if _, err := tc.Write(append([]byte(req), clientFrames(wsOpBinary, first, 1)...)); err != nil {
		return err
	}
	_ = tc.SetReadDeadline(time.Now().Add(30 * time.Second))
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		return fmt.Errorf("handshake = %v, %v", resp, err)
	}
	if err := readEchoWS(tc, br, first); err != nil {
		return fmt.Errorf("the frame sent with the handshake: %w", err)
	}
	sizes := []int{1, 125, 126, 4095, 4096, 4097, 20000, 70000} // 7-bit, 16-bit and 64-bit lengths, around the reader's size
	for r := range rounds {
		time.Sleep(time.Duration(rand.IntN(20)) * time.Millisecond) // idle
		var burst []byte
		var msgs [][]byte
		for k, n := range sizes {
			msg := bytes.Repeat([]byte(fmt.Sprintf("s%d-r%d-m%d;", i, r, k)), n/8+1)[:n]
			msgs = append(msgs, msg)
			burst = append(burst, clientFrames(wsOpBinary, msg, 1+k%3)...)
		}
		if _, err := tc.Write(burst); err != nil {
			return fmt.Errorf("round %d: writing: %w", r, err)
		}
		_ = tc.SetReadDeadline(time.Now().Add(30 * time.Second))
		for k, msg := range msgs {
			if err := readEchoWS(tc, br, msg); err != nil {
				return fmt.Errorf("round %d, message %d (%d bytes): %w", r, k, len(msg), err)
			}
		}
	}
	_ = tc.Close()
	return nil
}

// clientFrames is msg as a message of parts masked client frames.
func clientFrames(op byte, msg []byte, parts int) []byte {
	var out []byte
	step := max(1, (len(msg)+parts-1)/parts)
	for pos := 0; ; {
		end := min(len(msg), pos+step)
		key := [4]byte{byte(pos), 0x5a, byte(end), 0xa5}
		p := append([]byte(nil), msg[pos:end]...)
		maskWS(key, 0, p)
		fop := byte(wsOpContinuation)
		if pos == 0 {
			fop = op
		}
		out = append(appendWSHeader(out, end == len(msg), fop, len(p), &key), p...)
		if pos = end; pos == len(msg) {
			return out
		}
	}
}

// readEchoWS reads one message from the relay (in as many frames as it
// sent) and checks that it is want.
func readEchoWS(tc *tls.Conn, br *bufio.Reader, want []byte) error {
	var hb [14]byte
	var h wsHeader
	var got []byte
	for {
		if _, err := readWSHeader(br, hb[:], &h); err != nil {
			return err
		}
		if h.masked || h.isControl() {
			return fmt.Errorf("frame %+v from the proxy; want unmasked data", h)
		}
		p := make([]byte, h.length)
		if _, err := io.ReadFull(br, p); err != nil {
			return err
		}
		got = append(got, p...)
		if h.fin {
			break
		}
	}
	if !bytes.Equal(got, want) {
		return fmt.Errorf("echo of %d bytes differs (%d bytes back)", len(want), len(got))
	}
	return nil
}
