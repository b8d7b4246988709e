package proxy

import (
	"bufio"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
)

// waitReleased waits (bounded) until n HTTP/1.1 connections wait for a
// request with their buffers back in the pool.
func waitReleased(t *testing.T, s *Server, n int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for s.h1BufsReleased.Load() != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d idle HTTP/1.1 connections without buffers, want %d", s.h1BufsReleased.Load(), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestIdleBuffersReleasedAndReacquired opens many HTTP/1.1 tunnels and has
// each alternate between idle waits and bursts of pipelined requests. An
// idle tunnel must hold no buffers (they are back in the shared pool), and
// every request after an idle wait must be read whole from its first byte
// (the one read while the connection held no buffers) and answered with its
// own bytes, whatever the other tunnels do with the pool meanwhile.
func TestIdleBuffersReleasedAndReacquired(t *testing.T) {
	const tunnels, rounds = 24, 8
	e := newEnv(t, func(c *Config) {
		c.Logger = zap.NewNop()
		c.Audit = nopRecorder{}
	})
	go func() {
		for range e.seen {
		}
	}()
	conns := make([]*tls.Conn, tunnels)
	readers := make([]*bufio.Reader, tunnels)
	for i := range conns {
		conns[i], readers[i] = openTunnel(t, e, "http/1.1")
		if conns[i] == nil {
			t.FailNow()
		}
	}
	t.Cleanup(func() {
		for _, c := range conns {
			_ = c.Close()
		}
	})
	// Each waits for its first request without buffers.
	waitReleased(t, e.srv, tunnels)

	var wg sync.WaitGroup
	for i := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, br := conns[i], readers[i]
			for r := range rounds {
				time.Sleep(time.Duration(rand.IntN(15)) * time.Millisecond) // idle
				// A GET and a POST (a request starting with another byte)
				// pipelined in one write, then a GET on its own.
				paths := []string{
					fmt.Sprintf("/repos/t%d/r%d/issues", i, r),
					fmt.Sprintf("/repos/t%d/r%d-post/issues", i, r),
				}
				body := strings.Repeat(fmt.Sprintf("t%d-r%d;", i, r), 50)
				raw := "GET " + paths[0] + " HTTP/1.1\r\nHost: " + apiHost + "\r\n\r\n" +
					"POST " + paths[1] + " HTTP/1.1\r\nHost: " + apiHost + "\r\nContent-Type: text/plain\r\nContent-Length: " + fmt.Sprint(len(body)) + "\r\n\r\n" + body
				if _, err := io.WriteString(c, raw); err != nil {
					t.Errorf("tunnel %d round %d: writing: %v", i, r, err)
					return
				}
				for _, p := range paths {
					if err := readEcho(br, p); err != nil {
						t.Errorf("tunnel %d round %d: %v", i, r, err)
						return
					}
				}
				p := fmt.Sprintf("/repos/t%d/r%d-single/issues", i, r)
				if _, err := io.WriteString(c, "GET "+p+" HTTP/1.1\r\nHost: "+apiHost+"\r\n\r\n"); err != nil {
					t.Errorf("tunnel %d round %d: writing: %v", i, r, err)
					return
				}
				if err := readEcho(br, p); err != nil {
					t.Errorf("tunnel %d round %d: %v", i, r, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	waitReleased(t, e.srv, tunnels)
	for _, c := range conns {
		_ = c.Close()
	}
	// Closed connections are no longer counted.
	waitReleased(t, e.srv, 0)
}

// readEcho reads a response of the test upstream and checks that it
// answers path.
func readEcho(br *bufio.Reader, path string) error {
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return fmt.Errorf("reading the response to %s: %w", path, err)
	}
	b, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		return fmt.Errorf("reading the body of %s: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: status %d, body %s", path, resp.StatusCode, b)
	}
	var got struct{ Path string }
	if err := json.Unmarshal(b, &got); err != nil || got.Path != path {
		return fmt.Errorf("%s answered %s, want the echo of its own path", path, b)
	}
	return nil
}
