package ca

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/aileron-dev/aileron-proxy/internal/testkit"
)

// testValidity is the session length used by tests that do not care.
const testValidity = 8 * time.Hour

// newTestAuthority creates an authority with every leaf pre-issued, or
// fails the test.
func newTestAuthority(t testing.TB, hosts ...string) *Authority {
	t.Helper()
	a, err := New(Config{Hosts: hosts, Validity: testValidity, PreIssue: true})
	if err != nil {
		t.Fatalf("New(%q) error: %v", hosts, err)
	}
	return a
}

// mustLeaf returns a's leaf for host or fails the test.
func mustLeaf(t testing.TB, a *Authority, host string) *tls.Certificate {
	t.Helper()
	c, err := a.Leaf(host)
	if err != nil {
		t.Fatalf("Leaf(%q) error: %v", host, err)
	}
	return c
}

// parsedLeaf parses c's leaf (Authority.Leaf leaves c.Leaf unset).
func parsedLeaf(t testing.TB, c *tls.Certificate) *x509.Certificate {
	t.Helper()
	leaf, err := x509.ParseCertificate(c.Certificate[0])
	if err != nil {
		t.Fatalf("parsing the leaf: %v", err)
	}
	return leaf
}

// forgeLeaf signs, with a's private root key, a leaf for names the authority
// would refuse, so tests can check that clients enforce the root's name
// constraints. Names that parse as IPs become IP SANs, others DNS SANs.
func forgeLeaf(t testing.TB, a *Authority, names ...string) *tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("generating forged leaf key: %v", err)
	}
	serial, err := randomSerial()
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: names[0]},
		NotBefore:    a.notBefore,
		NotAfter:     a.notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		SubjectKeyId: []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20},
	}
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, n)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.Certificate(), key.Public(), a.key)
	if err != nil {
		t.Fatalf("signing forged leaf for %q: %v", names, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatalf("parsing forged leaf: %v", err)
	}
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: cert}
}

// writeFile writes data to name in a test temp dir and returns the path.
func writeFile(t testing.TB, dir, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatalf("writing %s: %v", p, err)
	}
	return p
}

// leafPEM encodes the leaf of c as PEM.
func leafPEM(c *tls.Certificate) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Certificate[0]})
}

// run runs a client subprocess with childEnv and a bounded wait, returning
// its combined output and exit code (-1 if it did not exit normally).
func run(t testing.TB, name string, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = testkit.CleanEnv("NO_PROXY=*", "no_proxy=*")
	out, err := cmd.CombinedOutput()
	if err == nil {
		return string(out), 0
	}
	if ee, ok := errors.AsType[*exec.ExitError](err); ok && ee.Exited() {
		return string(out), ee.ExitCode()
	}
	t.Fatalf("running %s %q: %v\n%s", name, args, err, out)
	return "", -1
}

// startTLSServer serves HTTPS on a loopback listener of the given network
// ("tcp4" or "tcp6"), choosing the certificate with certFor(name), where
// name is the SNI or, without SNI, the listener's IP. It returns the
// listener address.
func startTLSServer(t testing.TB, network string, certFor func(name string) (*tls.Certificate, error)) (net.Addr, error) {
	t.Helper()
	addr := "127.0.0.1:0"
	if network == "tcp6" {
		addr = "[::1]:0"
	}
	ln, err := net.Listen(network, addr)
	if err != nil {
		return nil, err
	}
	cfg := &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"http/1.1"},
		GetCertificate: func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
			name := hello.ServerName
			if name == "" {
				host, _, err := net.SplitHostPort(hello.Conn.LocalAddr().String())
				if err != nil {
					return nil, err
				}
				name = host
			}
			return certFor(name)
		},
	}
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			_, _ = w.Write([]byte("hello from the session leaf\n"))
		}),
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          log.New(io.Discard, "", 0), // failed handshakes are what some tests expect
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(tls.NewListener(ln, cfg)) // returns http.ErrServerClosed on Close
	}()
	t.Cleanup(func() {
		_ = srv.Close()
		<-done
	})
	return ln.Addr(), nil
}

// goHandshake dials addr with Go's TLS client trusting only rootsPEM and
// verifying serverName. It returns the handshake error.
func goHandshake(addr, serverName string, rootsPEM []byte) error {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(rootsPEM) {
		return errors.New("no certificates in roots PEM")
	}
	d := &tls.Dialer{
		NetDialer: &net.Dialer{Timeout: 10 * time.Second},
		Config:    &tls.Config{RootCAs: pool, ServerName: serverName, MinVersion: tls.VersionTLS12},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	return conn.Close()
}
