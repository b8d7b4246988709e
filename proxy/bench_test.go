package proxy

import (
	"crypto/tls"
	"io"
	"net/http"
	"sync"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// benchEnv is newEnv with a production-shaped logger (JSON to io.Discard at
// Info) and an audit recorder that keeps nothing, so the loop measures the
// proxy rather than the test harness.
func benchEnv(b *testing.B) *env {
	e := newEnv(b, func(c *Config) {
		enc := zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig())
		c.Logger = zap.New(zapcore.NewCore(enc, zapcore.AddSync(io.Discard), zapcore.InfoLevel))
		c.Audit = nopRecorder{}
	})
	e.handlers.Store("/user", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"login":"octocat"}`)
	}))
	go func() {
		for range e.seen { // drain what the upstream captures
		}
	}()
	return e
}

// benchGet fails b with Error (it may run off the benchmark goroutine).
func benchGet(b *testing.B, c *http.Client, url string) {
	resp, err := c.Get(url)
	if err != nil {
		b.Error(err)
		return
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b.Errorf("status = %d", resp.StatusCode)
	}
}

// benchSerial warms c with one GET of url, then times one GET per iteration.
func benchSerial(b *testing.B, c *http.Client, url string) {
	benchGet(b, c, url)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		benchGet(b, c, url)
	}
}

// benchStreams warms c with one GET of url, then times one GET per
// iteration, issued by 64 concurrent workers sharing c.
func benchStreams(b *testing.B, c *http.Client, url string) {
	benchGet(b, c, url)
	const streams = 64
	b.ReportAllocs()
	b.ResetTimer()
	work := make(chan struct{})
	var wg sync.WaitGroup
	for range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range work {
				benchGet(b, c, url)
			}
		}()
	}
	// b.N, not b.Loop: the timer must run until the last request finishes,
	// and b.Loop stops it as soon as the last one is handed out.
	for range b.N {
		work <- struct{}{}
	}
	close(work)
	wg.Wait()
}

// BenchmarkWarmTunnelRequest: a small credentialed GET on a kept-alive
// HTTP/1.1 tunnel (policy, injection, scrubbing, audit and log on).
func BenchmarkWarmTunnelRequest(b *testing.B) {
	e := benchEnv(b)
	benchSerial(b, e.client(false), "https://api.example.test/user")
}

// BenchmarkNewTunnelPerRequest: CONNECT, proxy auth, client TLS handshake
// with the cached session leaf, then one GET, per iteration; the upstream
// side stays pooled.
func BenchmarkNewTunnelPerRequest(b *testing.B) {
	e := benchEnv(b)
	tr := &http.Transport{
		Proxy:             http.ProxyURL(e.proxyURL(true)),
		TLSClientConfig:   &tls.Config{RootCAs: e.caPool, ClientSessionCache: nil},
		DisableKeepAlives: true,
		TLSNextProto:      map[string]func(string, *tls.Conn) http.RoundTripper{},
	}
	benchSerial(b, &http.Client{Transport: tr}, "https://api.example.test/user")
}

// BenchmarkHTTP2Streams: 64 concurrent streams on one HTTP/2 tunnel, each
// decided and forwarded on its own.
func BenchmarkHTTP2Streams(b *testing.B) {
	e := benchEnv(b)
	benchStreams(b, e.client(true), "https://h2.example.test/user")
	if n := e.accepts.Load(); n != 1 {
		b.Errorf("%d proxy connections, want 1", n)
	}
}

// The Direct benchmarks are the floor the proxy is measured against: the same
// client and upstream in the same process, without the proxy.

func directClient(e *env, h2, keepAlive bool) *http.Client {
	e.direct.Store(true)
	tr := &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: e.pki.pool(), ServerName: apiHost},
		ForceAttemptHTTP2: h2,
		DisableKeepAlives: !keepAlive,
	}
	if !h2 {
		tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	}
	return &http.Client{Transport: tr}
}

func BenchmarkDirectWarmRequest(b *testing.B) {
	e := benchEnv(b)
	benchSerial(b, directClient(e, false, true), "https://"+addrOf(e.up1)+"/user")
}

func BenchmarkDirectNewConnPerRequest(b *testing.B) {
	e := benchEnv(b)
	benchSerial(b, directClient(e, false, false), "https://"+addrOf(e.up1)+"/user")
}

func BenchmarkDirectHTTP2Streams(b *testing.B) {
	e := benchEnv(b)
	benchStreams(b, directClient(e, true, true), "https://"+addrOf(e.up2)+"/user")
}
