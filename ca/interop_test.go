package ca

// Interoperability tests with real clients: openssl, curl, Python's ssl
// module and Go's crypto/tls, each trusting only the CA it is given.

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/aileron-dev/aileron-proxy/internal/testkit"
)

// interopHosts is the host set most client tests use: DNS names, an IPv4
// and an IPv6 literal.
func interopHosts() []string {
	return []string{"localhost", "127.0.0.1", "::1", "api.example.com"}
}

func TestOpenSSLVerifyStrict(t *testing.T) {
	openssl := testkit.RequireTool(t, "openssl")
	tests := []struct {
		name  string
		hosts []string
		good  []string
		bad   []string // forged, outside the root's name constraints
	}{
		{"dns and ip", interopHosts(), []string{"localhost", "127.0.0.1", "::1", "api.example.com"},
			[]string{"evil.example", "sub.localhost", "x.api.example.com", "127.0.0.2", "::2"}},
		{"dns only", []string{"localhost"}, []string{"localhost"}, []string{"evil.example", "127.0.0.1", "::1"}},
		{"ip only", []string{"127.0.0.1"}, []string{"127.0.0.1"}, []string{"localhost", "127.0.0.2", "::1"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			a := newTestAuthority(t, tc.hosts...)
			caFile := writeFile(t, dir, "ca.pem", a.CertPEM())
			wrongFile := writeFile(t, dir, "wrong.pem", newTestAuthority(t, tc.hosts...).CertPEM())
			verify := func(ca, leaf string, extra ...string) (string, int) {
				args := append([]string{"verify", "-x509_strict", "-no-CApath", "-no-CAstore", "-CAfile", ca}, extra...)
				return run(t, openssl, append(args, leaf)...)
			}

			if out, code := verify(caFile, caFile, "-purpose", "any"); code != 0 || !strings.Contains(out, ": OK") {
				t.Errorf("openssl verify -x509_strict of the root itself: exit %d\n%s", code, out)
			}
			for _, host := range tc.good {
				leafFile := writeFile(t, dir, "leaf-"+host+".pem", leafPEM(mustLeaf(t, a, host)))
				check := []string{"-purpose", "sslserver", "-verify_hostname", host}
				if net.ParseIP(host) != nil {
					check = []string{"-purpose", "sslserver", "-verify_ip", host}
				}
				if out, code := verify(caFile, leafFile, check...); code != 0 || !strings.Contains(out, ": OK") {
					t.Errorf("openssl verify -x509_strict leaf %q: exit %d, want OK\n%s", host, code, out)
				}
				if out, code := verify(wrongFile, leafFile); code == 0 || !strings.Contains(out, "unable to get local issuer certificate") {
					t.Errorf("openssl verify leaf %q with another session's CA: exit %d, want unable to get local issuer certificate\n%s", host, code, out)
				}
			}
			for _, host := range tc.bad {
				leafFile := writeFile(t, dir, "forged-"+host+".pem", leafPEM(forgeLeaf(t, a, host)))
				if out, code := verify(caFile, leafFile); code == 0 || !strings.Contains(out, "subtree violation") {
					t.Errorf("openssl verify forged leaf %q: exit %d, want a subtree violation\n%s", host, code, out)
				}
			}
		})
	}
}

func TestOpenSSLShowsExtensions(t *testing.T) {
	openssl := testkit.RequireTool(t, "openssl")
	dir := t.TempDir()
	a := newTestAuthority(t, interopHosts()...)
	files := map[string]string{
		"root":      writeFile(t, dir, "ca.pem", a.CertPEM()),
		"dns leaf":  writeFile(t, dir, "dns.pem", leafPEM(mustLeaf(t, a, "api.example.com"))),
		"ipv4 leaf": writeFile(t, dir, "ip4.pem", leafPEM(mustLeaf(t, a, "127.0.0.1"))),
		"ipv6 leaf": writeFile(t, dir, "ip6.pem", leafPEM(mustLeaf(t, a, "::1"))),
	}
	tests := []struct {
		cert string
		want []string
	}{
		{"root", []string{
			"Public-Key: (256 bit)", "NIST CURVE: P-256", "Signature Algorithm: ecdsa-with-SHA256",
			"Subject: O = aileron-proxy, CN = aileron-proxy session CA ",
			"X509v3 Basic Constraints: critical\n                CA:TRUE, pathlen:0",
			"X509v3 Key Usage: critical\n                Certificate Sign, CRL Sign",
			"X509v3 Subject Key Identifier:",
			"X509v3 Name Constraints: critical\n                Permitted:\n                  DNS:api.example.com\n                  DNS:localhost\n                  IP:127.0.0.1/255.255.255.255\n                  IP:0:0:0:0:0:0:0:1/FFFF:FFFF:FFFF:FFFF:FFFF:FFFF:FFFF:FFFF\n                Excluded:\n                  DNS:.api.example.com\n                  DNS:.localhost",
		}},
		{"dns leaf", []string{
			"Public-Key: (256 bit)", "NIST CURVE: P-256", "Subject: CN = api.example.com",
			"X509v3 Key Usage: critical\n                Digital Signature",
			"X509v3 Extended Key Usage: \n                TLS Web Server Authentication\n",
			"X509v3 Basic Constraints: critical\n                CA:FALSE",
			"X509v3 Subject Key Identifier:", "X509v3 Authority Key Identifier:",
			"X509v3 Subject Alternative Name: \n                DNS:api.example.com\n",
		}},
		{"ipv4 leaf", []string{
			"X509v3 Subject Alternative Name: critical\n                IP Address:127.0.0.1\n",
			"X509v3 Authority Key Identifier:",
		}},
		{"ipv6 leaf", []string{
			"X509v3 Subject Alternative Name: critical\n                IP Address:0:0:0:0:0:0:0:1\n",
		}},
	}
	for _, tc := range tests {
		t.Run(tc.cert, func(t *testing.T) {
			out, code := run(t, openssl, "x509", "-noout", "-text", "-in", files[tc.cert])
			if code != 0 {
				t.Fatalf("openssl x509 -text: exit %d\n%s", code, out)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("openssl x509 -text of the %s lacks %q\n%s", tc.cert, w, out)
				}
			}
		})
	}
}

// clientCase is one handshake a client makes against the test server.
type clientCase struct {
	name       string
	serverName string // DNS name or IP literal the client verifies
	addr       net.Addr
	trust      string // "session", "bundle" or "other"
	want       string // "ok", "unknown authority" or "name constraints"
}

// clientSessions are the host sets the handshake tests cover, with leaves
// forged (signed by the session's key) for names the root does not permit.
// Forged IPs must be loopback addresses the test servers listen on.
func clientSessions() []clientSession {
	return []clientSession{
		{"dns and ip", interopHosts(), []string{"evil.example", "x.api.example.com", "sub.localhost"}},
		{"dns only", []string{"localhost", "api.example.com"}, []string{"evil.example", "127.0.0.1", "::1"}},
		{"ip only", []string{"127.0.0.1", "::1"}, []string{"localhost"}},
	}
}

type clientSession struct {
	name   string
	hosts  []string
	forged []string
}

// clientCases starts TLS servers for a session over hosts and lists the
// handshakes every client must get right, with the CA files to trust.
func clientCases(t *testing.T, hosts, forgedNames []string) (cases []clientCase, trust map[string]string, trustPEM map[string][]byte) {
	t.Helper()
	a := newTestAuthority(t, hosts...)
	forged := map[string]*tls.Certificate{}
	for _, name := range forgedNames {
		forged[name] = forgeLeaf(t, a, name)
	}
	certFor := func(name string) (*tls.Certificate, error) {
		if c, ok := forged[name]; ok {
			return c, nil
		}
		return a.Leaf(name) // what the proxy does with the CONNECT host
	}
	v4, err := startTLSServer(t, "tcp4", certFor)
	if err != nil {
		t.Fatalf("listening on 127.0.0.1: %v", err)
	}
	v6, err := startTLSServer(t, "tcp6", certFor)
	if err != nil {
		t.Logf("no IPv6 loopback, skipping ::1 handshakes: %v", err)
	}
	addrFor := func(name string) net.Addr {
		if name == "::1" {
			return v6
		}
		return v4
	}
	add := func(c clientCase) {
		if c.addr != nil {
			cases = append(cases, c)
		}
	}
	for _, h := range hosts {
		add(clientCase{h, h, addrFor(h), "session", "ok"})
	}
	add(clientCase{"bundle " + hosts[0], hosts[0], addrFor(hosts[0]), "bundle", "ok"})
	add(clientCase{"other session CA " + hosts[0], hosts[0], addrFor(hosts[0]), "other", "unknown authority"})
	for _, name := range forgedNames {
		add(clientCase{"forged " + name, name, addrFor(name), "session", "name constraints"})
	}

	dir := t.TempDir()
	systemRoots := []byte{}
	if roots, err := SystemRootsPEM(); err == nil {
		systemRoots = roots
	}
	trustPEM = map[string][]byte{
		"session": a.CertPEM(),
		"bundle":  BundlePEM(a.CertPEM(), systemRoots),
		"other":   newTestAuthority(t, hosts...).CertPEM(),
	}
	trust = map[string]string{}
	for k, v := range trustPEM {
		trust[k] = writeFile(t, dir, k+".pem", v)
	}
	return cases, trust, trustPEM
}

// forEachClientCase runs check for every handshake of every client session.
func forEachClientCase(t *testing.T, check func(t *testing.T, tc clientCase, trust map[string]string, trustPEM map[string][]byte)) {
	for _, sess := range clientSessions() {
		t.Run(sess.name, func(t *testing.T) {
			cases, trust, trustPEM := clientCases(t, sess.hosts, sess.forged)
			for _, tc := range cases {
				t.Run(tc.name, func(t *testing.T) { check(t, tc, trust, trustPEM) })
			}
		})
	}
}

func TestGoClientHandshake(t *testing.T) {
	forEachClientCase(t, func(t *testing.T, tc clientCase, _ map[string]string, trustPEM map[string][]byte) {
		err := goHandshake(tc.addr.String(), tc.serverName, trustPEM[tc.trust])
		switch tc.want {
		case "ok":
			if err != nil {
				t.Errorf("Go handshake %q = %v, want success", tc.serverName, err)
			}
		case "unknown authority":
			if _, ok := errors.AsType[x509.UnknownAuthorityError](err); !ok {
				t.Errorf("Go handshake %q = %v, want x509.UnknownAuthorityError", tc.serverName, err)
			}
		case "name constraints":
			invalid, ok := errors.AsType[x509.CertificateInvalidError](err)
			if !ok || invalid.Reason != x509.CANotAuthorizedForThisName {
				t.Errorf("Go handshake %q = %v, want CANotAuthorizedForThisName", tc.serverName, err)
			}
		default:
			t.Fatalf("clientCase %q: unknown want %q", tc.name, tc.want)
		}
	})
}

func TestCurlHandshake(t *testing.T) {
	curl := testkit.RequireTool(t, "curl")
	emptyDir := t.TempDir() // --capath: no other trust anchors
	forEachClientCase(t, func(t *testing.T, tc clientCase, trust map[string]string, _ map[string][]byte) {
		tcp := tc.addr.(*net.TCPAddr)
		port := strconv.Itoa(tcp.Port)
		args := []string{"-q", "-sS", "--fail", "--max-time", "10", "--noproxy", "*",
			"--cacert", trust[tc.trust], "--capath", emptyDir}
		urlHost := tc.serverName
		switch {
		case strings.Contains(urlHost, ":"):
			urlHost = "[" + urlHost + "]"
		case net.ParseIP(urlHost) == nil:
			args = append(args, "--resolve", tc.serverName+":"+port+":"+tcp.IP.String())
		}
		out, code := run(t, curl, append(args, "https://"+urlHost+":"+port+"/")...)
		checkClientExit(t, "curl", tc, out, code, 60, strings.Contains(out, "hello from the session leaf"))
	})
}

func TestPythonStrictHandshake(t *testing.T) {
	python := testkit.RequireTool(t, "python3")
	script, err := filepath.Abs(filepath.Join("testdata", "tls_client.py"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(script); err != nil {
		t.Fatalf("missing probe script: %v", err)
	}
	forEachClientCase(t, func(t *testing.T, tc clientCase, trust map[string]string, _ map[string][]byte) {
		tcp := tc.addr.(*net.TCPAddr)
		out, code := run(t, python, script, trust[tc.trust], tcp.IP.String(), strconv.Itoa(tcp.Port), tc.serverName)
		checkClientExit(t, "python ssl (VERIFY_X509_STRICT)", tc, out, code, 3, strings.HasPrefix(out, "ok TLSv1.3"))
	})
}

// checkClientExit checks what a command-line client reported for tc: exit 0
// with ok (its success output) when the handshake must succeed, otherwise
// exit failCode and the OpenSSL verification error for the expected failure.
func checkClientExit(t *testing.T, client string, tc clientCase, out string, code, failCode int, ok bool) {
	t.Helper()
	if tc.want == "ok" {
		if code != 0 || !ok {
			t.Errorf("%s %q: exit %d, want success\n%s", client, tc.serverName, code, out)
		}
		return
	}
	wantErr, known := map[string]string{
		"unknown authority": "unable to get local issuer certificate",
		"name constraints":  "subtree violation",
	}[tc.want]
	if !known {
		t.Fatalf("clientCase %q: unknown want %q", tc.name, tc.want)
	}
	if code != failCode || !strings.Contains(out, wantErr) {
		t.Errorf("%s %q: exit %d, want %d with %q\n%s", client, tc.serverName, code, failCode, wantErr, out)
	}
}
