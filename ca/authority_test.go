package ca

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// Extension OIDs from RFC 5280 section 4.2.1.
const (
	extKeyUsage         = "2.5.29.15"
	extBasicConstraints = "2.5.29.19"
	extNameConstraints  = "2.5.29.30"
	extSubjectKeyID     = "2.5.29.14"
	extSubjectAltName   = "2.5.29.17"
)

// extCritical reports whether c has the extension oid, and whether it is critical.
func extCritical(c *x509.Certificate, oid string) (present, critical bool) {
	for _, e := range c.Extensions {
		if e.Id.String() == oid {
			return true, e.Critical
		}
	}
	return false, false
}

func TestNewRejectsBadConfig(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		wantErr string
	}{
		{"zero validity", Config{Hosts: []string{"a.example"}}, "set Config.Validity"},
		{"negative validity", Config{Hosts: []string{"a.example"}, Validity: -time.Hour}, "not positive"},
		{"empty host", Config{Hosts: []string{"a.example", ""}, Validity: time.Hour}, `Config.Hosts[1] ""`},
		{"wildcard", Config{Hosts: []string{"*.example.com"}, Validity: time.Hour}, "wildcards are not supported"},
		{"bad port", Config{Hosts: []string{"a.example:http"}, Validity: time.Hour}, `port "http" must be a decimal number`},
		{"zone", Config{Hosts: []string{"fe80::1%eth0"}, Validity: time.Hour}, "zone"},
		{"space inside", Config{Hosts: []string{"a b.example"}, Validity: time.Hour}, "must not contain whitespace"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, err := New(tc.cfg)
			if err == nil {
				t.Fatalf("New(%+v) = %v, want error containing %q", tc.cfg, a, tc.wantErr)
			}
			if !strings.Contains(err.Error(), tc.wantErr) || !strings.HasPrefix(err.Error(), "creating session CA: ") {
				t.Fatalf("New(%+v) error = %q, want it to start with %q and contain %q", tc.cfg, err, "creating session CA: ", tc.wantErr)
			}
		})
	}
}

func TestRootCertificate(t *testing.T) {
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	a, err := New(Config{
		Hosts:    []string{"API.Example.com.", "example.com", "127.0.0.1", "[::1]:8443", "localhost:443"},
		Validity: 8 * time.Hour,
		Now:      func() time.Time { return now },
	})
	if err != nil {
		t.Fatal(err)
	}
	root := a.Certificate()

	if pub, ok := root.PublicKey.(*ecdsa.PublicKey); !ok || pub.Curve != elliptic.P256() {
		t.Errorf("root key = %T, want ECDSA P-256", root.PublicKey)
	}
	if root.SignatureAlgorithm != x509.ECDSAWithSHA256 {
		t.Errorf("root signature = %v, want ECDSA-SHA256", root.SignatureAlgorithm)
	}
	if !root.IsCA || !root.BasicConstraintsValid || root.MaxPathLen != 0 || !root.MaxPathLenZero {
		t.Errorf("root basic constraints = CA %v valid %v pathlen %d zero %v, want CA:true pathlen:0",
			root.IsCA, root.BasicConstraintsValid, root.MaxPathLen, root.MaxPathLenZero)
	}
	if want := x509.KeyUsageCertSign | x509.KeyUsageCRLSign; root.KeyUsage != want {
		t.Errorf("root key usage = %b, want %b", root.KeyUsage, want)
	}
	for _, ext := range []struct {
		name     string
		oid      string
		critical bool
	}{
		{"basicConstraints", extBasicConstraints, true},
		{"keyUsage", extKeyUsage, true},
		{"nameConstraints", extNameConstraints, true},
		{"subjectKeyIdentifier", extSubjectKeyID, false},
	} {
		present, critical := extCritical(root, ext.oid)
		if !present || critical != ext.critical {
			t.Errorf("root %s present=%v critical=%v, want present, critical=%v", ext.name, present, critical, ext.critical)
		}
	}
	if len(root.SubjectKeyId) == 0 || !bytes.Equal(root.AuthorityKeyId, root.SubjectKeyId) {
		t.Errorf("root SKID %x AKID %x, want non-empty and equal", root.SubjectKeyId, root.AuthorityKeyId)
	}
	if err := root.CheckSignatureFrom(root); err != nil {
		t.Errorf("root is not self-signed: %v", err)
	}
	if !root.NotBefore.Equal(now.Add(-5*time.Minute)) || !root.NotAfter.Equal(now.Add(8*time.Hour+5*time.Minute)) {
		t.Errorf("root validity = %s..%s, want %s..%s", root.NotBefore, root.NotAfter, now.Add(-5*time.Minute), now.Add(8*time.Hour+5*time.Minute))
	}
	if want := "aileron-proxy session CA "; !strings.HasPrefix(root.Subject.CommonName, want) || len(root.Subject.CommonName) != len(want)+8 {
		t.Errorf("root CN = %q, want %q + 8 hex digits", root.Subject.CommonName, want)
	}

	wantDNS := []string{"api.example.com", "example.com", "localhost"}
	if !reflect.DeepEqual(root.PermittedDNSDomains, wantDNS) {
		t.Errorf("PermittedDNSDomains = %q, want %q", root.PermittedDNSDomains, wantDNS)
	}
	// example.com keeps its subdomains because api.example.com is a session host.
	wantExcl := []string{".api.example.com", ".localhost"}
	if !reflect.DeepEqual(root.ExcludedDNSDomains, wantExcl) {
		t.Errorf("ExcludedDNSDomains = %q, want %q", root.ExcludedDNSDomains, wantExcl)
	}
	var ranges []string
	for _, r := range root.PermittedIPRanges {
		ranges = append(ranges, r.String())
	}
	if want := []string{"127.0.0.1/32", "::1/128"}; !reflect.DeepEqual(ranges, want) {
		t.Errorf("PermittedIPRanges = %q, want %q", ranges, want)
	}
	if len(root.ExcludedIPRanges) != 0 {
		t.Errorf("ExcludedIPRanges = %v, want none when the session has IP hosts", root.ExcludedIPRanges)
	}

	block, rest := pem.Decode(a.CertPEM())
	if block == nil || block.Type != "CERTIFICATE" || !bytes.Equal(block.Bytes, root.Raw) || len(bytes.TrimSpace(rest)) != 0 {
		t.Errorf("CertPEM() is not exactly the root certificate")
	}
	a.CertPEM()[0] = 'X'
	if !bytes.HasPrefix(a.CertPEM(), []byte("-----BEGIN CERTIFICATE-----")) {
		t.Errorf("CertPEM() returned the authority's own buffer; want a copy")
	}
}

func TestRootNameConstraintsExcludeUnusedTypes(t *testing.T) {
	tests := []struct {
		name         string
		hosts        []string
		wantExclDNS  []string
		wantExclIPs  []string
		wantPermDNS  []string
		wantPermIPs  int
		wantCNPrefix string
		commonName   string
	}{
		{name: "dns only", hosts: []string{"api.example.com"}, wantPermDNS: []string{"api.example.com"},
			wantExclDNS: []string{".api.example.com"}, wantExclIPs: []string{"0.0.0.0/0", "::/0"}},
		{name: "ip only", hosts: []string{"127.0.0.1"}, wantPermIPs: 1, wantExclDNS: []string{""}},
		{name: "no hosts", hosts: nil, wantExclDNS: []string{""}, wantExclIPs: []string{"0.0.0.0/0", "::/0"}},
		{name: "custom common name", hosts: []string{"a.example"}, commonName: "session s-123", wantCNPrefix: "session s-123",
			wantPermDNS: []string{"a.example"}, wantExclDNS: []string{".a.example"}, wantExclIPs: []string{"0.0.0.0/0", "::/0"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, err := New(Config{Hosts: tc.hosts, Validity: time.Hour, CommonName: tc.commonName})
			if err != nil {
				t.Fatal(err)
			}
			root := a.Certificate()
			if present, critical := extCritical(root, extNameConstraints); !present || !critical {
				t.Errorf("nameConstraints present=%v critical=%v, want critical", present, critical)
			}
			if !slices.Equal(root.PermittedDNSDomains, tc.wantPermDNS) {
				t.Errorf("PermittedDNSDomains = %q, want %q", root.PermittedDNSDomains, tc.wantPermDNS)
			}
			if !slices.Equal(root.ExcludedDNSDomains, tc.wantExclDNS) {
				t.Errorf("ExcludedDNSDomains = %q, want %q", root.ExcludedDNSDomains, tc.wantExclDNS)
			}
			var excl []string
			for _, r := range root.ExcludedIPRanges {
				excl = append(excl, r.String())
			}
			if !slices.Equal(excl, tc.wantExclIPs) {
				t.Errorf("ExcludedIPRanges = %q, want %q", excl, tc.wantExclIPs)
			}
			if len(root.PermittedIPRanges) != tc.wantPermIPs {
				t.Errorf("PermittedIPRanges = %v, want %d", root.PermittedIPRanges, tc.wantPermIPs)
			}
			if len(tc.hosts) == 0 {
				if _, err := a.Leaf("localhost"); err == nil || !strings.Contains(err.Error(), "the session has none") {
					t.Errorf("Leaf on a session without hosts = %v, want an error saying it has none", err)
				}
			}
			if tc.wantCNPrefix != "" && root.Subject.CommonName != tc.wantCNPrefix {
				t.Errorf("root CN = %q, want %q", root.Subject.CommonName, tc.wantCNPrefix)
			}
		})
	}
}

func TestLeafCertificate(t *testing.T) {
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	clock := now
	a, err := New(Config{
		Hosts:    []string{"api.example.com", "127.0.0.1", "::1"},
		Validity: 8 * time.Hour,
		Now:      func() time.Time { return clock },
	})
	if err != nil {
		t.Fatal(err)
	}
	root := a.Certificate()
	tests := []struct {
		host    string
		wantDNS []string
		wantIP  net.IP
		wantCN  string

		wantSANCritical bool
	}{
		{host: "api.example.com", wantDNS: []string{"api.example.com"}, wantCN: "api.example.com"},
		// IP leaves have an empty subject (see issue) and a critical SAN.
		{host: "127.0.0.1", wantIP: net.ParseIP("127.0.0.1"), wantSANCritical: true},
		{host: "[::1]", wantIP: net.ParseIP("::1"), wantSANCritical: true},
	}
	serials := map[string]bool{}
	for _, tc := range tests {
		t.Run(tc.host, func(t *testing.T) {
			c := mustLeaf(t, a, tc.host)
			if len(c.Certificate) != 1 || c.Leaf != nil {
				t.Fatalf("Leaf(%q) chain has %d certs, Leaf set %v; want [leaf] without Leaf (memory per session)", tc.host, len(c.Certificate), c.Leaf != nil)
			}
			leaf := parsedLeaf(t, c)
			priv, ok := c.PrivateKey.(*ecdsa.PrivateKey)
			if !ok || priv.Curve != elliptic.P256() || !priv.PublicKey.Equal(leaf.PublicKey) {
				t.Errorf("Leaf(%q) private key = %T, want the ECDSA P-256 key of the leaf", tc.host, c.PrivateKey)
			}
			if !slices.Equal(leaf.DNSNames, tc.wantDNS) {
				t.Errorf("Leaf(%q) DNS SANs = %q, want %q", tc.host, leaf.DNSNames, tc.wantDNS)
			}
			if tc.wantIP == nil && len(leaf.IPAddresses) != 0 || tc.wantIP != nil && (len(leaf.IPAddresses) != 1 || !leaf.IPAddresses[0].Equal(tc.wantIP)) {
				t.Errorf("Leaf(%q) IP SANs = %v, want %v", tc.host, leaf.IPAddresses, tc.wantIP)
			}
			if len(leaf.EmailAddresses)+len(leaf.URIs) != 0 {
				t.Errorf("Leaf(%q) has email or URI SANs", tc.host)
			}
			if leaf.Subject.CommonName != tc.wantCN {
				t.Errorf("Leaf(%q) CN = %q, want %q", tc.host, leaf.Subject.CommonName, tc.wantCN)
			}
			if leaf.IsCA || leaf.KeyUsage != x509.KeyUsageDigitalSignature {
				t.Errorf("Leaf(%q) IsCA %v key usage %b, want end entity with digitalSignature", tc.host, leaf.IsCA, leaf.KeyUsage)
			}
			if !reflect.DeepEqual(leaf.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}) {
				t.Errorf("Leaf(%q) ext key usage = %v, want [serverAuth]", tc.host, leaf.ExtKeyUsage)
			}
			if len(leaf.SubjectKeyId) == 0 || !bytes.Equal(leaf.AuthorityKeyId, root.SubjectKeyId) {
				t.Errorf("Leaf(%q) SKID %x AKID %x, want SKID set and AKID = root SKID %x", tc.host, leaf.SubjectKeyId, leaf.AuthorityKeyId, root.SubjectKeyId)
			}
			if present, critical := extCritical(leaf, extSubjectAltName); !present || critical != tc.wantSANCritical {
				t.Errorf("Leaf(%q) subjectAltName present=%v critical=%v, want present, critical=%v", tc.host, present, critical, tc.wantSANCritical)
			}
			if tc.wantCN == "" && len(leaf.RawSubject) != 2 {
				t.Errorf("Leaf(%q) subject = %q, want empty", tc.host, leaf.Subject)
			}
			if leaf.SerialNumber.Sign() <= 0 || leaf.SerialNumber.Cmp(new(big.Int).Lsh(big.NewInt(1), 128)) >= 0 {
				t.Errorf("Leaf(%q) serial %v, want positive and below 2^128", tc.host, leaf.SerialNumber)
			}
			if serials[leaf.SerialNumber.String()] {
				t.Errorf("Leaf(%q) serial %v repeats another leaf's", tc.host, leaf.SerialNumber)
			}
			serials[leaf.SerialNumber.String()] = true
			if leaf.NotBefore.Before(root.NotBefore) || leaf.NotAfter.After(root.NotAfter) {
				t.Errorf("Leaf(%q) validity %s..%s outside the root's %s..%s", tc.host, leaf.NotBefore, leaf.NotAfter, root.NotBefore, root.NotAfter)
			}
			if err := leaf.CheckSignatureFrom(root); err != nil {
				t.Errorf("Leaf(%q) not signed by the root: %v", tc.host, err)
			}
		})
	}

	// After the root expires, Leaf refuses to hand out certificates.
	clock = root.NotAfter.Add(time.Second)
	if _, err := a.Leaf("api.example.com"); err == nil || !strings.Contains(err.Error(), "session CA expired") {
		t.Errorf("Leaf after expiry error = %v, want session CA expired", err)
	}
}

func TestLeafCacheAndNormalization(t *testing.T) {
	a := newTestAuthority(t, "api.example.com", "::1")
	if got := a.Stats(); got != (Stats{Issued: 2}) {
		t.Fatalf("Stats after New = %+v, want the 2 hosts pre-issued and no hits", got)
	}
	first := mustLeaf(t, a, "api.example.com")
	for _, spelling := range []string{"API.EXAMPLE.COM", "api.example.com.", "api.example.com:443", "Api.Example.com.:8443"} {
		if got := mustLeaf(t, a, spelling); got != first {
			t.Errorf("Leaf(%q) returned a different certificate than Leaf(%q)", spelling, "api.example.com")
		}
	}
	v6 := mustLeaf(t, a, "::1")
	for _, spelling := range []string{"[::1]", "[::1]:8443", "0:0:0:0:0:0:0:1"} {
		if got := mustLeaf(t, a, spelling); got != v6 {
			t.Errorf("Leaf(%q) returned a different certificate than Leaf(%q)", spelling, "::1")
		}
	}
	if got, want := a.Stats(), (Stats{Issued: 2, CacheHits: 9}); got != want {
		t.Errorf("Stats = %+v, want %+v", got, want)
	}
}

func TestLeafRefusesOtherHosts(t *testing.T) {
	a := newTestAuthority(t, "api.example.com", "127.0.0.1")
	tests := []struct {
		host    string
		wantErr string
	}{
		{"evil.example", `issuing leaf for "evil.example": not one of this session's hosts (127.0.0.1, api.example.com)`},
		{"sub.api.example.com", "not one of this session's hosts"},
		{"example.com", "not one of this session's hosts"},
		{"127.0.0.2", "not one of this session's hosts"},
		{"::ffff:127.0.0.2", `"127.0.0.2": not one of`},
		{"", "must not be empty"},
		{"*.example.com", "wildcards are not supported"},
		{"[::1", `unclosed "["`},
		{"1:2:3", "is not a DNS name or IP literal"},
		{"127.1", "the last label is all digits"},
	}
	for _, tc := range tests {
		t.Run(tc.host, func(t *testing.T) {
			c, err := a.Leaf(tc.host)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Leaf(%q) = %v, %v; want error containing %q", tc.host, c, err, tc.wantErr)
			}
		})
	}
	if got := a.Stats(); got.Issued != 2 || got.CacheHits != 0 {
		t.Errorf("Stats = %+v, want refusals to issue nothing", got)
	}
}

func TestLeafErrorListsManyHostsBriefly(t *testing.T) {
	var hosts []string
	for i := range 12 {
		hosts = append(hosts, "h"+string(rune('a'+i))+".example")
	}
	a, err := newAuthority(Config{Hosts: hosts, Validity: time.Hour}, false)
	if err != nil {
		t.Fatal(err)
	}
	_, err = a.Leaf("x.example")
	if err == nil || !strings.Contains(err.Error(), "hj.example and 2 more") {
		t.Errorf("Leaf error = %v, want the host list cut after 10 with %q", err, "and 2 more")
	}
}

func TestLeafConcurrentFirstRequestsIssueOnce(t *testing.T) {
	a, err := newAuthority(Config{Hosts: []string{"api.example.com"}, Validity: time.Hour}, false)
	if err != nil {
		t.Fatal(err)
	}
	const n = 100
	start := make(chan struct{})
	results := make(chan any, n)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			<-start
			c, err := a.Leaf("api.example.com")
			if err != nil {
				results <- err
				return
			}
			results <- c
		})
	}
	close(start)
	wg.Wait()
	close(results)
	var first any
	for r := range results {
		if err, ok := r.(error); ok {
			t.Fatalf("Leaf error: %v", err)
		}
		if first == nil {
			first = r
		}
		if r != first {
			t.Fatalf("concurrent Leaf calls returned different certificates")
		}
	}
	if got, want := a.Stats(), (Stats{Issued: 1, CacheHits: n - 1}); got != want {
		t.Errorf("Stats after %d concurrent first calls = %+v, want %+v", n, got, want)
	}
}

func TestGoVerifiesNameConstraints(t *testing.T) {
	tests := []struct {
		name  string
		hosts []string
		good  []string // leaves Leaf issues, which must verify
		bad   []string // forged leaves for other names, which must not
	}{
		{
			name:  "dns and ip",
			hosts: []string{"localhost", "api.example.com", "example.com", "127.0.0.1", "::1"},
			good:  []string{"localhost", "api.example.com", "example.com", "127.0.0.1", "::1"},
			bad:   []string{"evil.example", "sub.localhost", "x.api.example.com", "localhost.evil", "127.0.0.2", "::2"},
		},
		{
			name:  "dns only",
			hosts: []string{"localhost"},
			good:  []string{"localhost"},
			bad:   []string{"evil.example", "127.0.0.1", "::1"},
		},
		{
			name:  "ip only",
			hosts: []string{"127.0.0.1"},
			good:  []string{"127.0.0.1"},
			bad:   []string{"localhost", "127.0.0.2", "::1"},
		},
	}
	other := newTestAuthority(t, "localhost", "127.0.0.1")
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := newTestAuthority(t, tc.hosts...)
			roots := x509.NewCertPool()
			roots.AddCert(a.Certificate())
			otherRoots := x509.NewCertPool()
			otherRoots.AddCert(other.Certificate())
			verify := func(leaf *x509.Certificate, host string, pool *x509.CertPool) error {
				_, err := leaf.Verify(x509.VerifyOptions{DNSName: host, Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
				return err
			}
			for _, host := range tc.good {
				leaf := parsedLeaf(t, mustLeaf(t, a, host))
				if err := verify(leaf, host, roots); err != nil {
					t.Errorf("Verify(leaf %q) with the session CA: %v", host, err)
				}
				err := verify(leaf, host, otherRoots)
				if _, ok := errors.AsType[x509.UnknownAuthorityError](err); !ok {
					t.Errorf("Verify(leaf %q) with another session's CA = %v, want UnknownAuthorityError", host, err)
				}
			}
			for _, host := range tc.bad {
				if _, err := a.Leaf(host); err == nil {
					t.Errorf("Leaf(%q) succeeded for a host outside the session", host)
				}
				leaf := parsedLeaf(t, forgeLeaf(t, a, host))
				err := verify(leaf, host, roots)
				invalid, ok := errors.AsType[x509.CertificateInvalidError](err)
				if !ok || invalid.Reason != x509.CANotAuthorizedForThisName {
					t.Errorf("Verify(forged leaf %q) = %v, want CANotAuthorizedForThisName", host, err)
				}
			}
		})
	}
}

// TestLeafUnderDomain: a learn session's wildcard domain lets the CA issue
// for any host below it, and a client verifying with the name-constrained
// root accepts those leaves and nothing outside.
func TestLeafUnderDomain(t *testing.T) {
	a, err := New(Config{Hosts: []string{"api.example.org"}, Domains: []string{"Example.org."}, Validity: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(a.Certificate())
	for _, host := range []string{"a.example.org", "b.c.example.org", "x.api.example.org", "api.example.org"} {
		leaf, err := a.Leaf(host)
		if err != nil {
			t.Fatalf("Leaf(%q): %v", host, err)
		}
		if _, err := parsedLeaf(t, leaf).Verify(x509.VerifyOptions{DNSName: host, Roots: roots}); err != nil {
			t.Errorf("verifying the leaf of %q: %v", host, err)
		}
	}
	for _, host := range []string{"example.org", "example.com", "aexample.org", "127.0.0.1"} {
		if _, err := a.Leaf(host); err == nil {
			t.Errorf("Leaf(%q) succeeded outside the domain", host)
		}
	}
	if _, err := New(Config{Domains: []string{"10.0.0.1"}, Validity: time.Hour}); err == nil {
		t.Error("New accepted an IP as a domain")
	}
}

// TestLeavesIssuedAtFirstUse: without PreIssue, New issues no leaf (an idle
// session holds none) and the first Leaf call per host issues it once.
func TestLeavesIssuedAtFirstUse(t *testing.T) {
	a, err := New(Config{Hosts: []string{"api.example.com", "127.0.0.1"}, Validity: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if got := a.Stats(); got != (Stats{}) {
		t.Fatalf("Stats after New = %+v, want nothing issued", got)
	}
	if a.leaves != nil {
		t.Errorf("New made a leaf cache of %d entries; want none until the first issuance", len(a.leaves))
	}
	first := mustLeaf(t, a, "api.example.com")
	if again := mustLeaf(t, a, "api.example.com"); again != first {
		t.Error("the second Leaf call issued another certificate")
	}
	mustLeaf(t, a, "127.0.0.1")
	if got, want := a.Stats(), (Stats{Issued: 2, CacheHits: 1}); got != want {
		t.Errorf("Stats = %+v, want %+v", got, want)
	}
}

// TestLateLeafKeepsTheRootsValidity: a leaf issued hours after New is valid
// from the root's NotBefore, so a client whose clock lags accepts it as it
// accepts the root.
func TestLateLeafKeepsTheRootsValidity(t *testing.T) {
	now := time.Unix(2e9, 0)
	a, err := New(Config{Hosts: []string{"api.example.com"}, Validity: 8 * time.Hour, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	now = now.Add(3 * time.Hour)
	leaf := parsedLeaf(t, mustLeaf(t, a, "api.example.com"))
	root := a.Certificate()
	if !leaf.NotBefore.Equal(root.NotBefore) || !leaf.NotAfter.Equal(root.NotAfter) {
		t.Errorf("leaf issued 3h in: validity %s..%s, want the root's %s..%s", leaf.NotBefore, leaf.NotAfter, root.NotBefore, root.NotAfter)
	}
}
