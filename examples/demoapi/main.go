// Command demoapi is a small HTTPS API for the aileron-proxy demo. It mints
// its own self-signed certificate for the names it is given, writes that
// certificate to a file (so serve can trust it with --upstream-ca), and
// answers a few JSON routes. It reports whether a request carried an
// Authorization header and a short hash of it, never the value itself, so
// the demo can show that the proxy injected the credential.
package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "address to listen on")
	names := flag.String("names", "api.demo.localhost", "comma-separated DNS names for the certificate")
	certOut := flag.String("cert-out", "", "write the certificate PEM here (required)")
	addrOut := flag.String("addr-out", "", "write the bound address here once listening")
	flag.Parse()
	if err := run(*listen, strings.Split(*names, ","), *certOut, *addrOut); err != nil {
		fmt.Fprintf(os.Stderr, "demoapi: %s\n", err)
		os.Exit(1)
	}
}

func run(listen string, names []string, certOut, addrOut string) error {
	if certOut == "" {
		return fmt.Errorf("-cert-out is required")
	}
	cert, certPEM, err := selfSigned(names)
	if err != nil {
		return fmt.Errorf("minting certificate: %w", err)
	}
	if err := os.WriteFile(certOut, certPEM, 0o644); err != nil {
		return fmt.Errorf("writing certificate: %w", err)
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", listen, err)
	}
	if addrOut != "" {
		if err := os.WriteFile(addrOut, []byte(ln.Addr().String()), 0o644); err != nil {
			return fmt.Errorf("writing address: %w", err)
		}
	}
	srv := &http.Server{
		Handler:           routes(),
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
		ReadHeaderTimeout: 10 * time.Second,
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() { <-sig; srv.Close() }()
	if err := srv.ServeTLS(ln, "", ""); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/items", func(w http.ResponseWriter, r *http.Request) {
		reply(w, r, http.StatusOK, map[string]any{"items": []map[string]any{{"id": "1", "name": "first"}, {"id": "2", "name": "second"}}})
	})
	mux.HandleFunc("GET /v1/items/{id}", func(w http.ResponseWriter, r *http.Request) {
		reply(w, r, http.StatusOK, map[string]any{"id": r.PathValue("id"), "name": "item " + r.PathValue("id")})
	})
	mux.HandleFunc("POST /v1/items", func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		_ = json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&body)
		reply(w, r, http.StatusCreated, map[string]any{"created": body})
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		reply(w, r, http.StatusNotFound, map[string]any{"error": "no such route"})
	})
	return mux
}

// reply writes v plus what the demo wants to show about the request.
func reply(w http.ResponseWriter, r *http.Request, status int, v map[string]any) {
	auth := r.Header.Get("Authorization")
	v["request"] = map[string]any{
		"method":                 r.Method,
		"path":                   r.URL.Path,
		"query":                  r.URL.RawQuery,
		"authorization_received": auth != "",
		"authorization_sha256":   shortHash(auth),
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

func shortHash(s string) string {
	if s == "" {
		return ""
	}
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:6])
}

func selfSigned(names []string) (tls.Certificate, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: names[0]},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
		DNSNames:              names,
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	return cert, certPEM, err
}
