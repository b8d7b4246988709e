package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/elazarl/goproxy"
	"golang.org/x/sync/singleflight"
)

// serveGoproxyFlag is the first argument that turns the harness binary into
// the stock-goproxy baseline (a separate process, like every proxy measured).
const serveGoproxyFlag = "-serve-goproxy"

// certCache is the goproxy.CertStorage the library recommends: one leaf per
// host, concurrent first requests sign once.
type certCache struct {
	mu     sync.RWMutex
	certs  map[string]*tls.Certificate
	flight singleflight.Group
}

var _ goproxy.CertStorage = (*certCache)(nil)

func (c *certCache) Fetch(host string, gen func() (*tls.Certificate, error)) (*tls.Certificate, error) {
	c.mu.RLock()
	cert := c.certs[host]
	c.mu.RUnlock()
	if cert != nil {
		return cert, nil
	}
	v, err, _ := c.flight.Do(host, func() (any, error) {
		cert, err := gen()
		if err != nil {
			return nil, err
		}
		c.mu.Lock()
		c.certs[host] = cert
		c.mu.Unlock()
		return cert, nil
	})
	if err != nil {
		return nil, err
	}
	return v.(*tls.Certificate), nil
}

// runGoproxy is `bench -serve-goproxy`: a minimal MITM built from
// github.com/elazarl/goproxy with its own ECDSA CA made at start (never the
// library's built-in CA), a certificate cache, HTTP/2 allowed towards the
// client, a pooled HTTP/1.1 upstream transport like the library's default
// one (which sets a TLS config and so never negotiates h2) except that it
// verifies upstream TLS, and no policy. It prints
// "listening ADDR" on stdout once it accepts connections and serves until
// SIGTERM or SIGINT.
func runGoproxy(args []string) int {
	fs := flag.NewFlagSet("serve-goproxy", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:0", "address to listen on")
	upstreamCA := fs.String("upstream-ca", "", "PEM file of roots trusted for upstream TLS (required)")
	caOut := fs.String("ca-out", "", "file to write the proxy's CA certificate (PEM) to (required)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if err := serveGoproxy(*listen, *upstreamCA, *caOut); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		return 1
	}
	return 0
}

func serveGoproxy(listen, upstreamCA, caOut string) error {
	if upstreamCA == "" || caOut == "" {
		return errors.New("serve-goproxy: -upstream-ca and -ca-out are required")
	}
	raw, err := os.ReadFile(upstreamCA)
	if err != nil {
		return fmt.Errorf("reading -upstream-ca: %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(raw) {
		return fmt.Errorf("-upstream-ca %s holds no PEM certificate", upstreamCA)
	}
	ca, err := newAuthority("goproxy bench CA")
	if err != nil {
		return err
	}
	if err := os.WriteFile(caOut, ca.certPEM, 0o644); err != nil {
		return fmt.Errorf("writing -ca-out: %w", err)
	}
	caCert := ca.tlsCertificate()

	p := goproxy.NewProxyHttpServer()
	p.Verbose = false
	p.Logger = log.New(io.Discard, "", 0)
	p.AllowHTTP2 = true
	p.KeepAcceptEncoding = true
	p.CertStore = &certCache{certs: map[string]*tls.Certificate{}}
	p.Tr = &http.Transport{
		Proxy:               nil,
		TLSClientConfig:     &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12},
		MaxIdleConns:        256,
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
		TLSHandshakeTimeout: 10 * time.Second,
	}
	mitm := &goproxy.ConnectAction{Action: goproxy.ConnectMitm, TLSConfig: goproxy.TLSConfigFromCA(&caCert)}
	p.OnRequest().HandleConnectFunc(func(host string, _ *goproxy.ProxyCtx) (*goproxy.ConnectAction, string) {
		return mitm, host
	})

	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", listen, err)
	}
	srv := &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second, ErrorLog: log.New(io.Discard, "", 0)}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	fmt.Printf("listening %s\n", ln.Addr())
	select {
	case err := <-errc:
		return fmt.Errorf("serving: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = srv.Shutdown(sctx)
	return nil
}
