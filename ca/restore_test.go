package ca

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"strings"
	"testing"
)

// A restored authority is the same root: same certificate bytes, and its
// new leaves verify against the root a client trusted before the restore.
func TestRestoreKeepsTheRoot(t *testing.T) {
	hosts := []string{"api.example.com:443", "127.0.0.1"}
	orig := newTestAuthority(t, hosts...)
	keyDER, err := orig.KeyDER()
	if err != nil {
		t.Fatal(err)
	}
	got, err := Restore(Config{Hosts: hosts, PreIssue: true}, orig.CertDER(), keyDER)
	if err != nil {
		t.Fatalf("Restore: %v", err)
	}
	if !bytes.Equal(got.CertPEM(), orig.CertPEM()) || !bytes.Equal(got.CertDER(), orig.CertDER()) {
		t.Fatal("the restored root differs from the original")
	}
	// A client that trusted the original root before the restart.
	pool := x509.NewCertPool()
	pool.AddCert(orig.Certificate())
	for _, h := range []string{"api.example.com", "127.0.0.1"} {
		leaf, err := x509.ParseCertificate(mustLeaf(t, got, h).Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Equal(leaf.Raw, mustLeaf(t, orig, h).Certificate[0]) {
			t.Errorf("Leaf(%q) after Restore is the original's leaf; want a fresh one", h)
		}
		opts := x509.VerifyOptions{Roots: pool, DNSName: h, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
		if _, err := leaf.Verify(opts); err != nil {
			t.Errorf("the restored authority's leaf for %q does not verify against the original root: %v", h, err)
		}
	}
	if st := got.Stats(); st.Issued != 2 {
		t.Errorf("Restore pre-issued %d leaves, want 2", st.Issued)
	}
	// The restored authority refuses hosts outside its config, as New's does.
	if _, err := got.Leaf("other.example.com"); err == nil {
		t.Error("Leaf(other.example.com) after Restore succeeded; want a refusal")
	}
}

func TestRestoreRefusesMismatchedOrBadInput(t *testing.T) {
	a := newTestAuthority(t, "api.example.com")
	b := newTestAuthority(t, "api.example.com")
	keyA, err := a.KeyDER()
	if err != nil {
		t.Fatal(err)
	}
	keyB, err := b.KeyDER()
	if err != nil {
		t.Fatal(err)
	}
	rsaLike, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	otherDER, _ := x509.MarshalPKCS8PrivateKey(rsaLike)
	leafDER := mustLeaf(t, a, "api.example.com").Certificate[0]
	cfg := Config{Hosts: []string{"api.example.com"}}
	for _, tc := range []struct {
		name      string
		cert, key []byte
		cfg       Config
		want      string
	}{
		{"other root's key", a.CertDER(), keyB, cfg, "does not belong"},
		{"other curve key", a.CertDER(), otherDER, cfg, "does not belong"},
		{"truncated key", a.CertDER(), keyA[:10], cfg, "parsing the root key"},
		{"garbage cert", []byte("not a certificate"), keyA, cfg, "parsing the root certificate"},
		{"leaf instead of root", leafDER, keyA, cfg, "not a CA certificate"},
		{"bad host", a.CertDER(), keyA, Config{Hosts: []string{"bad host"}}, "Config.Hosts[0]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Restore(tc.cfg, tc.cert, tc.key)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "restoring session CA: ") {
				t.Fatalf("Restore = %v, want an error starting %q containing %q", err, "restoring session CA: ", tc.want)
			}
		})
	}
}
