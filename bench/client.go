package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// clientOpts shape a benchmark client.
type clientOpts struct {
	h2      bool // offer h2 by ALPN (else HTTP/1.1 only)
	newConn bool // a new connection (CONNECT + TLS) per request
}

// countingDialer counts the TCP connections a client opens.
type countingDialer struct {
	d     net.Dialer
	dials atomic.Int64
}

func (c *countingDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	c.dials.Add(1)
	return c.d.DialContext(ctx, network, addr)
}

// newClient builds one client for t: it reaches the origin through t's
// proxy (none for direct) trusting only t's CA. No TLS session cache, so
// every new tunnel costs a full client handshake.
func newClient(t *target, o clientOpts) (*http.Client, *countingDialer) {
	cd := &countingDialer{d: net.Dialer{Timeout: 10 * time.Second}}
	tr := &http.Transport{
		DialContext:           cd.DialContext,
		TLSClientConfig:       &tls.Config{RootCAs: t.roots, MinVersion: tls.VersionTLS12},
		ForceAttemptHTTP2:     o.h2,
		DisableKeepAlives:     o.newConn,
		DisableCompression:    true,
		MaxIdleConnsPerHost:   64,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: 30 * time.Second,
	}
	if t.proxyURL != nil {
		tr.Proxy = http.ProxyURL(t.proxyURL)
	}
	if !o.h2 {
		tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	}
	return &http.Client{Transport: tr, Timeout: 60 * time.Second}, cd
}

func closeClients(cs []*http.Client) {
	for _, c := range cs {
		c.CloseIdleConnections()
	}
}

// loadResult is what a load run measured.
type loadResult struct {
	requests  int
	errors    int
	firstErr  error
	elapsed   time.Duration
	latencies []time.Duration
	// audited counts responses carrying X-Aileron-Audit-Id; h2 those
	// served over HTTP/2.
	audited, h2 int
}

// merge adds o (a later round) to r.
func (r *loadResult) merge(o loadResult) {
	r.requests += o.requests
	r.errors += o.errors
	if r.firstErr == nil {
		r.firstErr = o.firstErr
	}
	r.elapsed += o.elapsed
	r.latencies = append(r.latencies, o.latencies...)
	r.audited += o.audited
	r.h2 += o.h2
}

func (r loadResult) perSecond() float64 {
	if r.elapsed <= 0 {
		return 0
	}
	return float64(r.requests) / r.elapsed.Seconds()
}

// percentile returns the p-th percentile latency in milliseconds; the
// latencies must be sorted.
func (r loadResult) percentile(p float64) float64 {
	if len(r.latencies) == 0 {
		return 0
	}
	i := int(float64(len(r.latencies)-1) * p)
	return float64(r.latencies[i]) / float64(time.Millisecond)
}

// runLoad has `workers` goroutines issue GET u (worker i uses clients[i %
// len(clients)]) until dur has passed or maxRequests were started, and
// returns counts and sorted latencies. ctx ends it early.
func runLoad(ctx context.Context, clients []*http.Client, u string, workers int, dur time.Duration, maxRequests int) loadResult {
	var (
		mu      sync.Mutex
		res     loadResult
		started atomic.Int64
		wg      sync.WaitGroup
	)
	deadline := time.Now().Add(dur)
	begin := time.Now()
	for w := range workers {
		c := clients[w%len(clients)]
		wg.Add(1)
		go func() {
			defer wg.Done()
			var local loadResult
			lat := make([]time.Duration, 0, 1024)
			for ctx.Err() == nil && time.Now().Before(deadline) {
				if maxRequests > 0 && started.Add(1) > int64(maxRequests) {
					break
				}
				t0 := time.Now()
				audited, h2, err := get(ctx, c, u)
				if err != nil {
					local.errors++
					if local.firstErr == nil {
						local.firstErr = err
					}
					continue
				}
				lat = append(lat, time.Since(t0))
				local.requests++
				if audited {
					local.audited++
				}
				if h2 {
					local.h2++
				}
			}
			local.latencies = lat
			mu.Lock()
			res.merge(local) // local.elapsed is zero: res.elapsed is set below
			mu.Unlock()
		}()
	}
	wg.Wait()
	res.elapsed = time.Since(begin)
	slices.Sort(res.latencies)
	return res
}

// get fetches u, reads the whole body and checks the status.
func get(ctx context.Context, c *http.Client, u string) (audited, h2 bool, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return false, false, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return false, false, err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return false, false, fmt.Errorf("reading the body of %s: %w", u, err)
	}
	if resp.StatusCode != http.StatusOK {
		return false, false, fmt.Errorf("GET %s: status %d (%s)", u, resp.StatusCode, resp.Header.Get("X-Aileron-Decision"))
	}
	return resp.Header.Get("X-Aileron-Audit-Id") != "", resp.ProtoMajor == 2, nil
}

// download fetches u and returns the body size and the time it took.
func download(ctx context.Context, c *http.Client, u string) (int64, time.Duration, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, 0, err
	}
	t0 := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, 0, fmt.Errorf("GET %s: status %d", u, resp.StatusCode)
	}
	n, err := io.CopyBuffer(io.Discard, resp.Body, make([]byte, 64<<10))
	if err != nil {
		return n, 0, fmt.Errorf("reading the download after %d bytes: %w", n, err)
	}
	return n, time.Since(t0), nil
}

// openIdleTunnel opens what one sandbox connection holds: a CONNECT tunnel
// (or, for direct, a TCP connection to the origin), a full TLS handshake and
// one HTTP/1.1 GET, then leaves the connection open and idle.
func openIdleTunnel(ctx context.Context, o *origin, ep endpoint) (net.Conn, error) {
	conn, err := dialTunnel(ctx, o, ep, "http/1.1")
	if err != nil {
		return nil, err
	}
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	req, _ := http.NewRequest(http.MethodGet, o.url(pathSmall), nil)
	if err := req.Write(conn); err != nil {
		conn.Close()
		return nil, fmt.Errorf("writing GET: %w", err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), req)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("reading response: %w", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		conn.Close()
		return nil, fmt.Errorf("GET through the tunnel: status %d", resp.StatusCode)
	}
	_ = conn.SetDeadline(time.Time{})
	return conn, nil
}

// connect sends CONNECT target on c and reads the proxy's answer.
func connect(c net.Conn, target string, user *url.Userinfo) error {
	req := "CONNECT " + target + " HTTP/1.1\r\nHost: " + target + "\r\n"
	if user != nil {
		pw, _ := user.Password()
		req += "Proxy-Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte(user.Username()+":"+pw)) + "\r\n"
	}
	if _, err := io.WriteString(c, req+"\r\n"); err != nil {
		return fmt.Errorf("writing CONNECT: %w", err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		return fmt.Errorf("reading the CONNECT response: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("CONNECT %s: status %d", target, resp.StatusCode)
	}
	if br.Buffered() > 0 {
		return errors.New("the proxy sent bytes after its CONNECT response before the TLS handshake")
	}
	return nil
}
