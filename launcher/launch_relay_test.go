package launcher

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
)

// targetServer accepts TCP connections on loopback and runs handle on each.
func targetServer(t *testing.T, handle func(c *net.TCPConn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				handle(c.(*net.TCPConn))
			}()
		}
	}()
	return ln.Addr().String()
}

func newTestRelay(t *testing.T, target string, maxConns int) *Relay {
	t.Helper()
	r, err := NewRelay(RelayConfig{Logger: zaptest.NewLogger(t), Name: "test", Listen: "127.0.0.1:0", Target: target, MaxConns: maxConns})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func dialRelay(t *testing.T, r *Relay) *net.TCPConn {
	t.Helper()
	c, err := net.DialTimeout("tcp", r.Addr(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	return c.(*net.TCPConn)
}

// TestLaunchRelayHalfClose: the target sees the client's EOF only when the
// relay passes the half-close on, and answers after it; the client sees
// the answer and then the target's EOF.
func TestLaunchRelayHalfClose(t *testing.T) {
	target := targetServer(t, func(c *net.TCPConn) {
		n, err := io.Copy(io.Discard, c) // returns at the relayed EOF
		if err != nil {
			return
		}
		fmt.Fprintf(c, "got %d bytes", n)
	})
	r := newTestRelay(t, target, 0)
	c := dialRelay(t, r)
	if _, err := c.Write([]byte("hello relay")); err != nil {
		t.Fatal(err)
	}
	if err := c.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	if string(got) != "got 11 bytes" {
		t.Errorf("answer = %q, want %q", got, "got 11 bytes")
	}
}

// TestLaunchRelayBothWays streams a few MB each way at once.
func TestLaunchRelayBothWays(t *testing.T) {
	const size = 4 << 20
	fromTarget := make([]byte, size)
	if _, err := rand.Read(fromTarget); err != nil {
		t.Fatal(err)
	}
	received := make(chan []byte, 1)
	target := targetServer(t, func(c *net.TCPConn) {
		done := make(chan struct{})
		go func() {
			defer close(done)
			b, _ := io.ReadAll(c)
			received <- b
		}()
		c.Write(fromTarget)
		c.CloseWrite()
		<-done
	})
	r := newTestRelay(t, target, 0)
	c := dialRelay(t, r)
	fromClient := make([]byte, size)
	if _, err := rand.Read(fromClient); err != nil {
		t.Fatal(err)
	}
	writeErr := make(chan error, 1)
	go func() {
		_, err := c.Write(fromClient)
		if err == nil {
			err = c.CloseWrite()
		}
		writeErr <- err
	}()
	got, err := io.ReadAll(c)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-writeErr; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, fromTarget) {
		t.Errorf("client received %d bytes, not the target's %d", len(got), size)
	}
	select {
	case b := <-received:
		if !bytes.Equal(b, fromClient) {
			t.Errorf("target received %d bytes, not the client's %d", len(b), size)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the target never saw the client's EOF")
	}
}

// TestLaunchRelayCloseStops: Close ends relayed connections, stops
// accepting and returns.
func TestLaunchRelayCloseStops(t *testing.T) {
	hold := make(chan struct{})
	defer close(hold)
	accepted := make(chan struct{}, 1)
	target := targetServer(t, func(c *net.TCPConn) {
		accepted <- struct{}{}
		select {
		case <-hold:
		case <-time.After(30 * time.Second):
		}
	})
	r, err := NewRelay(RelayConfig{Logger: zaptest.NewLogger(t), Name: "test", Listen: "127.0.0.1:0", Target: target})
	if err != nil {
		t.Fatal(err)
	}
	addr := r.Addr()
	c := dialRelay(t, r)
	select {
	case <-accepted:
	case <-time.After(10 * time.Second):
		t.Fatal("the relay never connected to the target")
	}
	closed := make(chan error, 1)
	go func() { closed <- r.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Errorf("Close = %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return with a connection open")
	}
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Error("a relayed connection stayed open after Close")
	}
	if c2, err := net.DialTimeout("tcp", addr, 2*time.Second); err == nil {
		c2.Close()
		t.Errorf("the relay still accepts on %s after Close", addr)
	}
	if err := r.Close(); err != nil {
		t.Errorf("second Close = %v", err)
	}
}

// TestLaunchRelayLimits: connections beyond MaxConns and connections whose
// target refuses are closed at once.
func TestLaunchRelayLimits(t *testing.T) {
	hold := make(chan struct{})
	defer close(hold)
	target := targetServer(t, func(c *net.TCPConn) {
		c.Write([]byte("x"))
		select {
		case <-hold:
		case <-time.After(30 * time.Second):
		}
	})
	r := newTestRelay(t, target, 1)
	first := dialRelay(t, r)
	if _, err := io.ReadFull(first, make([]byte, 1)); err != nil {
		t.Fatalf("first connection: %v", err)
	}
	expectClosed(t, dialRelay(t, r), "a connection over MaxConns=1")

	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := dead.Addr().String()
	dead.Close()
	rd := newTestRelay(t, deadAddr, 0)
	expectClosed(t, dialRelay(t, rd), "a connection whose target refuses")
}

// expectClosed fails unless the relay closes c without sending anything.
func expectClosed(t *testing.T, c net.Conn, what string) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := c.Read(make([]byte, 1))
	var ne net.Error
	switch {
	case err == nil:
		t.Errorf("%s: read %d bytes, want the connection closed", what, n)
	case errors.As(err, &ne) && ne.Timeout():
		t.Errorf("%s: still open after 5s, want it closed at once", what)
	}
}

func TestLaunchRelayConfigErrors(t *testing.T) {
	log := zaptest.NewLogger(t)
	for _, tc := range []struct {
		name string
		cfg  RelayConfig
		want string
	}{
		{"no logger", RelayConfig{Listen: "127.0.0.1:0", Target: "127.0.0.1:1"}, "Logger is required"},
		{"no target", RelayConfig{Logger: log, Listen: "127.0.0.1:0"}, "Target is required"},
		{"wildcard", RelayConfig{Logger: log, Listen: "0.0.0.0:0", Target: "127.0.0.1:1"}, "not a name or a wildcard"},
		{"name", RelayConfig{Logger: log, Listen: "localhost:0", Target: "127.0.0.1:1"}, "must be a specific IP"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := NewRelay(tc.cfg)
			if err == nil {
				r.Close()
				t.Fatalf("NewRelay(%+v) succeeded", tc.cfg)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("NewRelay error = %q, want it to contain %q", err, tc.want)
			}
		})
	}
}

// TestLaunchRelayFreebind: on Linux the relay binds an address the host
// does not have yet, as it must for a Podman gateway.
func TestLaunchRelayFreebind(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("IP_FREEBIND is Linux-only")
	}
	r, err := NewRelay(RelayConfig{Logger: zaptest.NewLogger(t), Name: "test", Listen: "192.0.2.77:0", Target: "127.0.0.1:1"})
	if err != nil {
		t.Fatalf("binding 192.0.2.77 (TEST-NET-1, not on this host): %v", err)
	}
	defer r.Close()
	if !strings.HasPrefix(r.Addr(), "192.0.2.77:") {
		t.Errorf("Addr = %q", r.Addr())
	}
}
