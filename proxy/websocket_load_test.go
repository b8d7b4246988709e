package proxy

import (
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// TestWebSocketThousandSockets holds 1,000 relayed WebSockets open at once,
// each with an echo before and after all are open, and measures the heap
// they cost (client, proxy and upstream together, all in this process).
func TestWebSocketThousandSockets(t *testing.T) {
	const n = 1000
	e, u := newWSEnv(t, func(c *Config) { c.Limits.MaxTunnelsPerSession = n + 10 })
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	goroutinesBefore := runtime.NumGoroutine()
	start := time.Now()

	conns := make([]*websocket.Conn, n)
	errs := make(chan error, n)
	sem := make(chan struct{}, 32)
	var wg sync.WaitGroup
	echo := func(c *websocket.Conn, msg string) error {
		if err := c.WriteMessage(websocket.TextMessage, []byte(msg)); err != nil {
			return err
		}
		_, got, err := readMsg(t, c)
		if err != nil || got != msg {
			return fmt.Errorf("echo of %q = %q, %v", msg, got, err)
		}
		return nil
	}
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			c, _, err := e.dialWS(t, "/ws")
			if err == nil {
				err = echo(c, fmt.Sprintf("open %d", i))
			}
			if err != nil {
				errs <- fmt.Errorf("socket %d: %w", i, err)
				return
			}
			conns[i] = c
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	opened := time.Since(start)
	for range n {
		<-u.auth // every handshake reached the upstream with the credential
	}
	var held runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&held)
	perSocket := (int64(held.HeapInuse) - int64(before.HeapInuse)) / n
	goroutines := runtime.NumGoroutine() - goroutinesBefore
	t.Logf("%d sockets open in %v; heap in use %d KiB per socket (client, proxy and upstream), %d goroutines per socket",
		n, opened.Round(time.Millisecond), perSocket>>10, goroutines/n)

	// All of them still relay, at once.
	var wg2 sync.WaitGroup
	errs2 := make(chan error, n)
	for i, c := range conns {
		wg2.Add(1)
		go func() {
			defer wg2.Done()
			if err := echo(c, fmt.Sprintf("held %d", i)); err != nil {
				errs2 <- fmt.Errorf("socket %d: %w", i, err)
			}
		}()
	}
	wg2.Wait()
	close(errs2)
	for err := range errs2 {
		t.Fatal(err)
	}
	if !raceEnabled && perSocket > 160<<10 {
		t.Fatalf("%d KiB of heap per open socket; want at most 160 KiB (idle relays hold no copy buffers)", perSocket>>10)
	}
	if got := e.srv.OpenTunnels(e.sess.ID); got != n {
		t.Fatalf("OpenTunnels = %d, want %d", got, n)
	}
	for _, c := range conns {
		_ = c.Close()
	}
	deadline := time.Now().Add(30 * time.Second)
	for e.srv.OpenTunnels(e.sess.ID) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d tunnels still open 30s after the clients closed", e.srv.OpenTunnels(e.sess.ID))
		}
		time.Sleep(50 * time.Millisecond)
	}
}
