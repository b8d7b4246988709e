package proxy

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
)

// heapAfterGC returns the live heap after two collections (sync.Pool
// contents survive one).
func heapAfterGC() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// TestMemoryAfterTunnelBurst opens 1,000 intercepted tunnels at once, each
// serving a request and staying open, then closes them all, and measures
// the live heap per open tunnel and what stays after the burst. The figures
// are in docs/proxy-limits.md; the test asserts only generous bounds.
//
// With MEMPROF=FILE it records every allocation and writes heap profiles
// (FILE.open.http11 with the tunnels open, FILE.closed.http11 after, and
// the same for h2); docs/proxy-limits.md breaks them down with
// `go tool pprof -sample_index=inuse_space -base`.
func TestMemoryAfterTunnelBurst(t *testing.T) {
	const tunnels = 1000
	if os.Getenv("MEMPROF") != "" {
		old := runtime.MemProfileRate
		runtime.MemProfileRate = 1
		t.Cleanup(func() { runtime.MemProfileRate = old })
	}
	for _, proto := range []string{"http/1.1", "h2"} {
		t.Run(proto, func(t *testing.T) {
			e := newEnv(t, func(c *Config) {
				c.Logger = zap.NewNop()
				c.Audit = nopRecorder{}
				c.Limits.MaxTunnelsPerSession = 2 * tunnels
			})
			go func() {
				for range e.seen {
				}
			}()
			open := func() *tls.Conn {
				tc, br := openTunnel(t, e, proto)
				if tc == nil {
					return nil
				}
				if proto == "h2" {
					get := [][2]string{{":method", "GET"}, {":scheme", "https"}, {":authority", apiHost}, {":path", "/user"}}
					if got := h2Exchange(t, tc, br, get, ""); got != "status 200" {
						t.Errorf("GET /user over HTTP/2: %s", got)
					}
					return tc
				}
				resp, body := rawRequest(t, tc, br, "GET /user HTTP/1.1\r\nHost: "+apiHost+"\r\n\r\n")
				if resp.StatusCode != http.StatusOK {
					t.Errorf("GET /user = %d %s", resp.StatusCode, body)
				}
				return tc
			}
			if c := open(); c != nil {
				_ = c.Close() // warm the upstream pool and the leaf cache
			}
			waitTunnels(t, e, 0)
			base := heapAfterGC()

			conns := make([]*tls.Conn, tunnels)
			var wg sync.WaitGroup
			next := make(chan int)
			for w := 0; w < 32; w++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range next {
						conns[i] = open()
					}
				}()
			}
			for i := range conns {
				next <- i
			}
			close(next)
			wg.Wait()
			if t.Failed() {
				t.FailNow()
			}
			waitTunnels(t, e, tunnels)
			peak := heapAfterGC()
			peakHeld, peakStacks := heldFromOS()
			writeHeapProfile(t, "open."+proto)
			for _, c := range conns {
				if c != nil {
					_ = c.Close()
				}
			}
			conns = nil
			waitTunnels(t, e, 0)
			// The proxy returns the burst's memory itself once it is idle.
			deadline := time.Now().Add(10 * time.Second)
			for e.srv.memoryReleases.Load() == 0 && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			if e.srv.memoryReleases.Load() == 0 {
				t.Error("the proxy did not return memory to the OS after the burst")
			}
			afterHeld, _ := heldFromOS()
			after := heapAfterGC()
			writeHeapProfile(t, "closed."+proto)
			perTunnel := (int64(peak) - int64(base)) / tunnels
			perStack := int64(peakStacks) / tunnels
			retained := int64(after) - int64(base)
			t.Logf("%s: live heap %s idle, %s with %d tunnels open (%s heap + %s stacks per tunnel; %s held from the OS), "+
				"%s after they closed (%+d KiB; %s held from the OS once the proxy returned memory)",
				proto, mib(base), mib(peak), tunnels, kib(perTunnel), kib(perStack), mib(peakHeld),
				mib(after), retained>>10, mib(afterHeld))
			if perTunnel > 256<<10 {
				t.Errorf("%s per open tunnel; want under 256 KiB", kib(perTunnel))
			}
			if retained > 8<<20 {
				t.Errorf("%d KiB of heap stays after the burst closed; want under 8 MiB", retained>>10)
			}
			// Without the proxy's release the runtime still holds over 80%
			// of the peak here; with it, under 40%.
			if afterHeld > peakHeld*2/3 {
				t.Errorf("%s held from the OS after the burst, %s at its peak; want at most two thirds", mib(afterHeld), mib(peakHeld))
			}
		})
	}
}

// writeHeapProfile writes the heap profile to $MEMPROF.name (slashes
// dropped) when MEMPROF is set.
func writeHeapProfile(t *testing.T, name string) {
	f := os.Getenv("MEMPROF")
	if f == "" {
		return
	}
	fh, err := os.Create(f + "." + strings.ReplaceAll(name, "/", ""))
	if err != nil {
		t.Errorf("MEMPROF: %v", err)
		return
	}
	if err := pprof.WriteHeapProfile(fh); err != nil {
		t.Errorf("MEMPROF: %v", err)
	}
	_ = fh.Close()
}

// heldFromOS returns the heap and stack memory the runtime holds from the
// OS (what counts in RSS), and the stacks in use.
func heldFromOS() (held, stacks uint64) {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapSys - ms.HeapReleased + ms.StackSys, ms.StackInuse
}

func mib(n uint64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
func kib(n int64) string  { return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10)) }

// waitTunnels waits (bounded) until the session has n open tunnels.
func waitTunnels(t *testing.T, e *env, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for e.srv.OpenTunnels(e.sess.ID) != n {
		if time.Now().After(deadline) {
			t.Fatalf("open tunnels = %d, want %d", e.srv.OpenTunnels(e.sess.ID), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// openTunnel is rawTunnel without cleanups, so that a closed tunnel's
// client side is garbage (the test measures the heap of both ends).
func openTunnel(t *testing.T, e *env, proto string) (*tls.Conn, *bufio.Reader) {
	c, err := net.DialTimeout("tcp", e.addr, 5*time.Second)
	if err != nil {
		t.Errorf("dialing the proxy: %v", err)
		return nil, nil
	}
	cred := base64.StdEncoding.EncodeToString([]byte(e.sess.ID + ":" + e.secret))
	_, _ = io.WriteString(c, "CONNECT "+apiHost+":443 HTTP/1.1\r\nHost: "+apiHost+":443\r\nProxy-Authorization: Basic "+cred+"\r\n\r\n")
	// Read the CONNECT response byte by byte: nothing may be buffered past it.
	var head []byte
	one := make([]byte, 1)
	for !bytes.HasSuffix(head, []byte("\r\n\r\n")) {
		if _, err := c.Read(one); err != nil {
			t.Errorf("reading the CONNECT response: %v", err)
			_ = c.Close()
			return nil, nil
		}
		head = append(head, one[0])
	}
	if !bytes.HasPrefix(head, []byte("HTTP/1.1 200")) {
		t.Errorf("CONNECT = %q", head)
		_ = c.Close()
		return nil, nil
	}
	tc := tls.Client(c, &tls.Config{RootCAs: e.caPool, ServerName: apiHost, NextProtos: []string{proto}})
	if err := tc.Handshake(); err != nil {
		t.Errorf("TLS handshake in the tunnel: %v", err)
		_ = tc.Close()
		return nil, nil
	}
	return tc, bufio.NewReader(tc)
}

// TestReturnMemoryOncePerInterval ends many bursts at once: one of them
// returns memory, the others find it done.
func TestReturnMemoryOncePerInterval(t *testing.T) {
	s := &Server{log: zap.NewNop(), now: time.Now}
	start := make(chan struct{})
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			s.returnMemory()
		}()
	}
	close(start)
	wg.Wait()
	if n := s.memoryReleases.Load(); n != 1 {
		t.Errorf("%d returns of memory for bursts ending together, want 1 per %v", n, minMemoryRelease)
	}
}
