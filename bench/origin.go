package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"math/big"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"
)

// Origin paths.
const (
	originHost    = "localhost"
	pathSmall     = "/small"
	pathDownload  = "/download/" // + size in bytes
	benchFQN      = "local://bench/origin"
	hosts100FQN   = "local://bench/hosts100"
	benchToken    = "bench-token-3f9a1c7e"
	smallResponse = `{"id":"b3c1","object":"item","name":"bench","status":"ok","count":3,"tags":["a","b","c"]}`
)

// authority is an ECDSA P-256 CA made for one run (the origin's, goproxy's,
// squid's or mitmproxy's).
type authority struct {
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	certPEM []byte
	keyPEM  []byte // PKCS #8
}

func newAuthority(cn string) (*authority, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating the %s key: %w", cn, err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("generating a serial: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: cn, Organization: []string{"aileron-proxy bench"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("signing the %s certificate: %w", cn, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parsing the %s certificate: %w", cn, err)
	}
	kd, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encoding the %s key: %w", cn, err)
	}
	return &authority{
		cert:    cert,
		key:     key,
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		keyPEM:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kd}),
	}, nil
}

// tlsCertificate returns the CA itself as a tls.Certificate (for goproxy).
func (a *authority) tlsCertificate() tls.Certificate {
	return tls.Certificate{Certificate: [][]byte{a.cert.Raw}, PrivateKey: a.key, Leaf: a.cert}
}

func (a *authority) pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(a.cert)
	return p
}

// issue signs an ECDSA P-256 server leaf for dnsNames and ips.
func (a *authority) issue(dnsNames []string, ips []net.IP) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("generating a leaf key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("generating a serial: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: dnsNames[0]},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     dnsNames,
		IPAddresses:  ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.cert, &key.PublicKey, a.key)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("signing a leaf: %w", err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("parsing a leaf: %w", err)
	}
	return tls.Certificate{Certificate: [][]byte{der, a.cert.Raw}, PrivateKey: key, Leaf: leaf}, nil
}

// serveOriginFlag is the first argument that turns the harness binary into
// the origin, a process of its own: a real origin never shares the client's
// process, so direct pays the same cross-process hop as every proxy.
const serveOriginFlag = "-serve-origin"

// pathStats answers the origin's counters; it is fetched directly, never
// through a proxy (no connector lists it).
const pathStats = "/_bench/stats"

// originStats are the origin's counters: every request, and those that
// carried the bench credential (aileron-proxy injects it; no client sends it).
type originStats struct {
	Requests int64 `json:"requests"`
	Injected int64 `json:"injected"`
}

// runOrigin is `bench -serve-origin`: the loopback HTTPS server every target
// reaches, HTTP/1.1 and h2 with an ECDSA leaf for localhost, ops.bench.test
// (scenario 7's host) and 127.0.0.1,
// serving a small JSON GET and a download generated on the fly (a 1 MiB
// pseudo-random block repeated). It writes its
// CA to -ca-out, prints "listening ADDR" and serves until SIGTERM or SIGINT.
func runOrigin(args []string) int {
	fs := flag.NewFlagSet("serve-origin", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:0", "address to listen on")
	caOut := fs.String("ca-out", "", "file to write the origin's CA certificate (PEM) to (required)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if err := serveOrigin(*listen, *caOut); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		return 1
	}
	return 0
}

func serveOrigin(listen, caOut string) error {
	if caOut == "" {
		return errors.New("serve-origin: -ca-out is required")
	}
	ca, err := newAuthority("aileron-proxy bench origin CA")
	if err != nil {
		return err
	}
	leaf, err := ca.issue([]string{originHost, opsHost}, []net.IP{net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return err
	}
	if err := os.WriteFile(caOut, ca.certPEM, 0o644); err != nil {
		return fmt.Errorf("writing -ca-out: %w", err)
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", listen, err)
	}
	block := downloadBlock()
	var requests, injected atomic.Int64
	count := func(r *http.Request) {
		requests.Add(1)
		if r.Header.Get("Authorization") == "Bearer "+benchToken {
			injected.Add(1)
		}
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+pathSmall, func(w http.ResponseWriter, r *http.Request) {
		count(r)
		h := w.Header()
		h.Set("Content-Type", "application/json")
		h.Set("Cache-Control", "no-store")
		h.Set("Content-Length", strconv.Itoa(len(smallResponse)))
		_, _ = io.WriteString(w, smallResponse)
	})
	mux.HandleFunc("GET "+pathDownload+"{size}", func(w http.ResponseWriter, r *http.Request) {
		count(r)
		n, err := strconv.ParseInt(r.PathValue("size"), 10, 64)
		if err != nil || n < 0 || n > 1<<34 {
			http.Error(w, "size must be a byte count up to 16 GiB", http.StatusBadRequest)
			return
		}
		h := w.Header()
		h.Set("Content-Type", "application/octet-stream")
		h.Set("Cache-Control", "no-store")
		h.Set("Content-Length", strconv.FormatInt(n, 10))
		streamPattern(w, block, n)
	})
	// Scenario (7)'s synthetic REST API: every GET under /repos/ is a small
	// JSON answer, whichever operation of the spec it is.
	mux.HandleFunc("GET "+opsPathPrefix, func(w http.ResponseWriter, r *http.Request) {
		count(r)
		h := w.Header()
		h.Set("Content-Type", "application/json")
		h.Set("Cache-Control", "no-store")
		h.Set("Content-Length", strconv.Itoa(len(smallResponse)))
		_, _ = io.WriteString(w, smallResponse)
	})
	mux.HandleFunc("GET "+pathWebSocket, serveWebSocket) // scenario (5), idle.go
	mux.HandleFunc("GET "+pathStats, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(originStats{Requests: requests.Load(), Injected: injected.Load()})
	})
	var protos http.Protocols
	protos.SetHTTP1(true)
	protos.SetHTTP2(true)
	srv := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       5 * time.Minute,
		Protocols:         &protos,
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{leaf}, MinVersion: tls.VersionTLS12},
		// Clients that close mid-handshake are normal under load.
		ErrorLog: log.New(io.Discard, "", 0),
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- srv.ServeTLS(ln, "", "") }()
	fmt.Printf("listening %s\n", ln.Addr())
	select {
	case err := <-errc:
		return fmt.Errorf("serving: %w", err)
	case <-ctx.Done():
	}
	return srv.Close()
}

// origin is the harness's handle on the origin process.
type origin struct {
	proc   *process
	caFile string
	caPEM  []byte
	roots  *x509.CertPool
	port   int
	stats  *http.Client
}

// startOrigin re-runs the harness binary as `-serve-origin`.
func startOrigin(ctx context.Context, self, dir string, cl *cleanups) (*origin, error) {
	caFile := filepath.Join(dir, "origin-ca.pem")
	cmd := exec.Command(self, serveOriginFlag, "-listen", "127.0.0.1:0", "-ca-out", caFile)
	p, addr, err := startListener(ctx, "origin", cmd, filepath.Join(dir, "origin.log"), cl)
	if err != nil {
		return nil, err
	}
	_, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("the origin printed address %q: %w", addr, err)
	}
	port, _ := strconv.Atoi(portStr)
	raw, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("reading the origin's CA: %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(raw) {
		return nil, fmt.Errorf("the origin's CA file %s holds no certificate", caFile)
	}
	o := &origin{proc: p, caFile: caFile, caPEM: raw, roots: roots, port: port}
	o.stats = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		Proxy:           nil,
		TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12},
	}}
	return o, nil
}

// counters fetches the origin's counters (zero on failure: the checks that
// use them then report a shortfall).
func (o *origin) counters(ctx context.Context) originStats {
	var st originStats
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+o.addr()+pathStats, nil)
	if err != nil {
		return st
	}
	req.Host = o.authority()
	resp, err := o.stats.Do(req)
	if err != nil {
		return st
	}
	defer resp.Body.Close()
	_ = json.NewDecoder(resp.Body).Decode(&st)
	return st
}

// authority is host:port as clients name the origin.
func (o *origin) authority() string { return net.JoinHostPort(originHost, strconv.Itoa(o.port)) }

// addr is the address the origin listens on.
func (o *origin) addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(o.port)) }

func (o *origin) url(path string) string { return "https://" + o.authority() + path }

// downloadBlock is the 1 MiB the download repeats: seeded pseudo-random
// bytes, so the body is like an archive or a binary (incompressible, no text
// structure) and costs the origin nothing to generate.
func downloadBlock() []byte {
	b := make([]byte, 1<<20)
	r := mrand.NewChaCha8([32]byte{'a', 'i', 'l', 'e', 'r', 'o', 'n'})
	_, _ = r.Read(b)
	return b
}

// streamPattern writes n bytes of block, repeated, in 64 KiB writes.
func streamPattern(w io.Writer, block []byte, n int64) {
	const chunk = 64 << 10
	for off := 0; n > 0; off = (off + chunk) % len(block) {
		k := min(int64(chunk), n)
		if _, err := w.Write(block[off : off+int(k)]); err != nil {
			return
		}
		n -= k
	}
}
