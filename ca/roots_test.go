package ca

import (
	"bytes"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestBundlePEM(t *testing.T) {
	const a = "-----BEGIN CERTIFICATE-----\nQQ==\n-----END CERTIFICATE-----"
	const b = "-----BEGIN CERTIFICATE-----\nQg==\n-----END CERTIFICATE-----"
	tests := []struct {
		name        string
		session     string
		system      string
		want        string
		wantNBlocks int
	}{
		{"both with newlines", a + "\n", b + "\n", a + "\n" + b + "\n", 2},
		{"no trailing newlines", a, b, a + "\n" + b + "\n", 2},
		{"crlf session", a + "\r\n", b, a + "\r\n" + b + "\n", 2},
		{"leading blank lines dropped", "\n\n" + a, "\r\n" + b, a + "\n" + b + "\n", 2},
		{"no system roots", a, "", a + "\n", 1},
		{"no session CA", "", b, b + "\n", 1},
		{"nothing", "", "", "", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := BundlePEM([]byte(tc.session), []byte(tc.system))
			if string(got) != tc.want {
				t.Fatalf("BundlePEM(%q, %q) = %q, want %q", tc.session, tc.system, got, tc.want)
			}
			n := 0
			for rest := got; ; n++ {
				var blk *pem.Block
				if blk, rest = pem.Decode(rest); blk == nil {
					break
				}
			}
			if n != tc.wantNBlocks {
				t.Fatalf("BundlePEM(%q, %q) decodes to %d PEM blocks, want %d", tc.session, tc.system, n, tc.wantNBlocks)
			}
		})
	}

	// With real certificates: the session CA comes first.
	ca := newTestAuthority(t, "localhost").CertPEM()
	other := newTestAuthority(t, "localhost").CertPEM()
	bundle := BundlePEM(ca, other)
	if !bytes.HasPrefix(bundle, ca) || !bytes.HasSuffix(bundle, other) {
		t.Errorf("BundlePEM(ca, roots) is not ca followed by roots:\n%s", bundle)
	}
}

func TestReadRoots(t *testing.T) {
	dir := t.TempDir()
	certA := newTestAuthority(t, "a.example").CertPEM()
	certB := newTestAuthority(t, "b.example").CertPEM()
	fedoraStyle := "# Comment line from a distribution bundle\n" + string(certA) +
		"\n# another\n-----BEGIN PRIVATE KEY-----\nQQ==\n-----END PRIVATE KEY-----\n" + strings.TrimSuffix(string(certB), "\n")
	bundle := writeFile(t, dir, "bundle.pem", []byte(fedoraStyle))
	empty := writeFile(t, dir, "empty.pem", []byte("# no certificates here\n"))
	missing := filepath.Join(dir, "missing.pem")

	tests := []struct {
		name    string
		paths   []string
		want    []byte
		wantErr []string
	}{
		{"first existing file with certificates", []string{missing, empty, bundle}, append(append([]byte{}, certA...), certB...), nil},
		{"nothing usable", []string{missing, empty}, nil,
			[]string{"reading system root bundle: no certificates in " + missing, "empty.pem: no PEM certificates", "install the ca-certificates package"}},
		{"directory instead of file", []string{dir}, nil, []string{"is a directory"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := readRoots(tc.paths)
			if tc.wantErr != nil {
				for _, w := range tc.wantErr {
					if err == nil || !strings.Contains(err.Error(), w) {
						t.Fatalf("readRoots(%q) error = %v, want it to contain %q", tc.paths, err, w)
					}
				}
				return
			}
			if err != nil || !bytes.Equal(got, tc.want) {
				t.Fatalf("readRoots(%q) = %q, %v; want only the two certificates, re-encoded:\n%s", tc.paths, got, err, tc.want)
			}
		})
	}
}

func TestSystemRootsPEMIgnoresEnvironment(t *testing.T) {
	var present string
	for _, p := range systemRootPaths() {
		if _, err := os.Stat(p); err == nil {
			present = p
			break
		}
	}
	if present == "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("no system root bundle in %q (required when CI=true)", systemRootPaths())
		}
		t.Skipf("no system root bundle in %q", systemRootPaths())
	}
	// A session bundle that SSL_CERT_FILE might point at must not be read.
	decoyPEM := newTestAuthority(t, "decoy.example").CertPEM()
	decoy := writeFile(t, t.TempDir(), "decoy.pem", decoyPEM)
	t.Setenv("SSL_CERT_FILE", decoy)
	t.Setenv("SSL_CERT_DIR", filepath.Dir(decoy))

	got, err := SystemRootsPEM()
	if err != nil {
		t.Fatalf("SystemRootsPEM() error: %v", err)
	}
	want, err := readRoots([]string{present})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("SystemRootsPEM() is not the certificates of %s", present)
	}
	if bytes.Contains(got, decoyPEM) {
		t.Errorf("SystemRootsPEM() contains the SSL_CERT_FILE decoy")
	}
	if n := bytes.Count(got, []byte("-----BEGIN CERTIFICATE-----")); n < 10 {
		t.Errorf("SystemRootsPEM() has %d certificates, want a real bundle", n)
	}
}
