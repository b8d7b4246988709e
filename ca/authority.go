package ca

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.step.sm/crypto/keyutil"
	"go.step.sm/crypto/x509util"
	"golang.org/x/sync/errgroup"
	"golang.org/x/sync/singleflight"
)

// clockSkew is added before NotBefore and after NotAfter of the root so that
// clients whose clocks are slightly off still accept the session's leaves.
const clockSkew = 5 * time.Minute

// Config describes the session a certificate authority is created for.
type Config struct {
	// Hosts are the hostnames and IP literals the session intercepts. A
	// ":port" suffix and IPv6 brackets are accepted and dropped; names are
	// lower-cased and lose a trailing dot. The root is name-constrained to
	// exactly these hosts and Leaf refuses any other. Empty means the
	// authority can issue for no host at all. Duplicates are ignored.
	Hosts []string
	// Domains are DNS domains below which any host may get a leaf (a learn
	// session's "*.example.org" patterns give "example.org"); the domain
	// itself is not included. The root is name-constrained to them too.
	// Empty means none.
	Domains []string
	// Validity is how long the root and every leaf stay valid, counted from
	// New; a 5-minute clock-skew margin is added at both ends. Required: zero
	// or negative is an error. Use the session's time to live.
	Validity time.Duration
	// Now returns the current time. Nil means time.Now.
	Now func() time.Time
	// CommonName is the root's subject common name. Empty means
	// "aileron-proxy session CA <8 hex digits of the root's key id>".
	CommonName string
	// PreIssue issues the leaf of every host in Hosts in New. False (the
	// default) issues each at its first Leaf call: an idle session then
	// holds no leaf (about 1.5 KiB per host), and the first connection to a
	// host pays one issuance.
	PreIssue bool
}

// Stats counts leaf certificate work since New.
type Stats struct {
	// Issued is the number of leaf certificates created, pre-issued ones
	// included.
	Issued uint64
	// CacheHits is the number of successful Leaf calls that created no
	// certificate (served from the cache or from a concurrent issuance).
	CacheHits uint64
}

// Authority is one session's root certificate authority and its cache of
// leaf certificates. It is safe for concurrent use.
type Authority struct {
	now func() time.Time
	key crypto.Signer // the root's private key; exported only by KeyDER
	// The root certificate is kept as its DER and the few fields leaves
	// need (RawSubject and SubjectKeyId are slices of it), not parsed: a
	// parsed certificate costs about 3 KiB per session.
	certDER             []byte
	rawSubject, skid    []byte
	notBefore, notAfter time.Time
	hosts               map[string]hostName // normalized name -> host, the session's hosts
	names               []string            // sorted normalized names, for error messages
	domains             []string            // normalized domains whose subdomains may get leaves

	mu     sync.RWMutex
	leaves map[string]*tls.Certificate
	flight singleflight.Group

	issued    atomic.Uint64
	cacheHits atomic.Uint64
}

// New creates a session certificate authority: a fresh ECDSA P-256 root,
// name-constrained to cfg.Hosts, and, with cfg.PreIssue, a leaf for every
// host in cfg.Hosts.
func New(cfg Config) (*Authority, error) {
	return newAuthority(cfg, cfg.PreIssue)
}

// newAuthority is New with pre-issuing optional, so that tests can exercise
// first-time issuance through Leaf.
func newAuthority(cfg Config, preIssue bool) (*Authority, error) {
	if cfg.Validity <= 0 {
		return nil, fmt.Errorf("creating session CA: validity %s is not positive; set Config.Validity to the session's time to live", cfg.Validity)
	}
	a, err := newEmpty(cfg, "creating session CA", preIssue)
	if err != nil {
		return nil, err
	}
	if err := a.createRoot(cfg); err != nil {
		return nil, fmt.Errorf("creating session CA: %w", err)
	}
	if preIssue {
		if err := a.preIssue(); err != nil {
			return nil, fmt.Errorf("creating session CA: %w", err)
		}
	}
	return a, nil
}

// newEmpty returns an Authority with cfg's hosts and domains normalized and
// no root yet; errors start with what.
func newEmpty(cfg Config, what string, preIssue bool) (*Authority, error) {
	a := &Authority{
		now:   cfg.Now,
		hosts: make(map[string]hostName, len(cfg.Hosts)),
	}
	if preIssue {
		a.leaves = make(map[string]*tls.Certificate, len(cfg.Hosts))
	}
	if a.now == nil {
		a.now = time.Now
	}
	for i, raw := range cfg.Hosts {
		h, err := normalizeHost(raw)
		if err != nil {
			return nil, fmt.Errorf("%s: checking Config.Hosts[%d] %q: %w", what, i, raw, err)
		}
		a.hosts[h.name] = h
	}
	for name := range a.hosts {
		a.names = append(a.names, name)
	}
	for i, raw := range cfg.Domains {
		h, err := normalizeHost(raw)
		if err != nil || h.isIP() {
			return nil, fmt.Errorf("%s: checking Config.Domains[%d] %q: not a DNS domain", what, i, raw)
		}
		a.domains = append(a.domains, h.name)
	}
	slices.Sort(a.domains)
	a.domains = slices.Compact(a.domains)
	slices.Sort(a.names)
	return a, nil
}

// Restore rebuilds an Authority from a root that New made earlier (its
// certificate DER and its KeyDER), for a session that outlived the process:
// the root is the same certificate, byte for byte, so clients that trusted
// it trust the leaves issued after the restore. cfg.Hosts and cfg.Domains
// are the hosts the root was made for (a subset is fine: the root's name
// constraints still bound them); cfg.Validity and cfg.CommonName are
// ignored, the certificate carries both. Leaves are issued afresh, at first
// use or, with cfg.PreIssue, here.
func Restore(cfg Config, certDER, keyDER []byte) (*Authority, error) {
	const what = "restoring session CA"
	a, err := newEmpty(cfg, what, cfg.PreIssue)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(certDER)
	if err != nil {
		return nil, fmt.Errorf("%s: parsing the root certificate: %w", what, err)
	}
	if !cert.IsCA || !cert.BasicConstraintsValid {
		return nil, fmt.Errorf("%s: certificate %q is not a CA certificate", what, cert.Subject.CommonName)
	}
	parsed, err := x509.ParsePKCS8PrivateKey(keyDER)
	if err != nil {
		return nil, fmt.Errorf("%s: parsing the root key (PKCS#8): %w", what, err)
	}
	key, ok := parsed.(*ecdsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("%s: the root key is a %T, want an ECDSA key", what, parsed)
	}
	if pub, ok := cert.PublicKey.(*ecdsa.PublicKey); !ok || !key.PublicKey.Equal(pub) {
		return nil, fmt.Errorf("%s: the key does not belong to certificate %q", what, cert.Subject.CommonName)
	}
	a.key = key
	a.setRoot(cert)
	if cfg.PreIssue {
		if err := a.preIssue(); err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
	}
	return a, nil
}

// setRoot keeps of the root certificate what leaves need: its DER and the
// fields taken from it.
func (a *Authority) setRoot(cert *x509.Certificate) {
	a.certDER, a.rawSubject, a.skid = cert.Raw, cert.RawSubject, cert.SubjectKeyId
	a.notBefore, a.notAfter = cert.NotBefore, cert.NotAfter
}

// KeyDER returns the root's private key in PKCS#8 DER, for a caller that
// must rebuild the Authority after a restart (Restore). The caller owns
// keeping it secret: aileron-proxy writes it only sealed under the state
// key, never to a log, a response or a plain file.
func (a *Authority) KeyDER() ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(a.key)
	if err != nil {
		return nil, fmt.Errorf("encoding the session CA key: %w", err)
	}
	return der, nil
}

// CertDER returns the root certificate in DER form (a fresh copy).
func (a *Authority) CertDER() []byte {
	return slices.Clone(a.certDER)
}

// preIssue issues a leaf for every session host, spreading the signing over
// the available CPUs.
func (a *Authority) preIssue() error {
	leaves := make([]*tls.Certificate, len(a.names))
	var g errgroup.Group
	g.SetLimit(runtime.GOMAXPROCS(0))
	for i, name := range a.names {
		g.Go(func() error {
			leaf, err := a.issue(a.hosts[name])
			if err != nil {
				return fmt.Errorf("pre-issuing leaf for %q: %w", name, err)
			}
			leaves[i] = leaf
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	for i, name := range a.names {
		a.leaves[name] = leaves[i]
	}
	return nil
}

// createRoot generates the root key and self-signed certificate.
func (a *Authority) createRoot(cfg Config) error {
	key, err := keyutil.GenerateSigner("EC", "P-256", 0)
	if err != nil {
		return fmt.Errorf("generating root key: %w", err)
	}
	skid, err := x509util.GenerateSubjectKeyID(key.Public())
	if err != nil {
		return fmt.Errorf("computing root key id: %w", err)
	}
	serial, err := randomSerial()
	if err != nil {
		return err
	}
	cn := cfg.CommonName
	if cn == "" {
		cn = fmt.Sprintf("aileron-proxy session CA %x", skid[:4])
	}
	now := a.now().UTC()
	subject := x509util.Subject{CommonName: cn, Organization: x509util.MultiString{"aileron-proxy"}}
	c := &x509util.Certificate{
		Subject:          subject,
		Issuer:           x509util.Issuer(subject),
		SerialNumber:     x509util.SerialNumber{Int: serial},
		NotBefore:        now.Add(-clockSkew),
		NotAfter:         now.Add(cfg.Validity + clockSkew),
		KeyUsage:         x509util.KeyUsage(x509.KeyUsageCertSign | x509.KeyUsageCRLSign),
		BasicConstraints: &x509util.BasicConstraints{IsCA: true, MaxPathLen: 0},
		NameConstraints:  a.nameConstraints(),
		SubjectKeyID:     x509util.SubjectKeyID(skid),
		AuthorityKeyID:   x509util.AuthorityKeyID(skid),
		PublicKey:        key.Public(),
	}
	tmpl := c.GetCertificate()
	cert, err := x509util.CreateCertificate(tmpl, tmpl, key.Public(), key)
	if err != nil {
		return fmt.Errorf("signing root certificate: %w", err)
	}
	a.key = key
	a.setRoot(cert)
	return nil
}

// nameConstraints limits the root to the session's hosts. DNS names are
// permitted with their subdomains excluded (unless another session host lies
// below them, since exclusions win); IPs are permitted as single addresses.
// A name type the session does not use is excluded outright: an empty DNS
// constraint matches every name, 0.0.0.0/0 and ::/0 match every address.
func (a *Authority) nameConstraints() *x509util.NameConstraints {
	nc := &x509util.NameConstraints{Critical: true}
	var dns []string
	for _, name := range a.names {
		h := a.hosts[name]
		if h.isIP() {
			bits := h.ip.BitLen()
			nc.PermittedIPRanges = append(nc.PermittedIPRanges, &net.IPNet{
				IP:   net.IP(h.ip.AsSlice()),
				Mask: net.CIDRMask(bits, bits),
			})
			continue
		}
		dns = append(dns, name)
	}
	for _, d := range a.domains {
		nc.PermittedDNSDomains = append(nc.PermittedDNSDomains, "."+d)
	}
	for _, name := range dns {
		nc.PermittedDNSDomains = append(nc.PermittedDNSDomains, name)
		if !slices.ContainsFunc(dns, func(other string) bool { return strings.HasSuffix(other, "."+name) }) &&
			!slices.ContainsFunc(a.domains, func(d string) bool { return strings.HasSuffix(name, "."+d) }) {
			nc.ExcludedDNSDomains = append(nc.ExcludedDNSDomains, "."+name)
		}
	}
	if len(dns) == 0 && len(a.domains) == 0 {
		nc.ExcludedDNSDomains = x509util.MultiString{""}
	}
	if len(nc.PermittedIPRanges) == 0 {
		nc.ExcludedIPRanges = x509util.MultiIPNet{
			{IP: net.IPv4zero.To4(), Mask: net.CIDRMask(0, 32)},
			{IP: net.IPv6zero, Mask: net.CIDRMask(0, 128)},
		}
	}
	return nc
}

// CertPEM returns the root certificate in PEM form (a fresh copy), for
// clients to trust. It is encoded at each call: the authority keeps only
// the DER, as every session holds one.
func (a *Authority) CertPEM() []byte {
	// EncodeToMemory's buffer has room to spare; a session keeps this copy.
	return slices.Clone(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: a.certDER}))
}

// Certificate returns the root certificate, parsed at each call.
func (a *Authority) Certificate() *x509.Certificate {
	cert, err := x509.ParseCertificate(a.certDER)
	if err != nil {
		// The DER is the one createRoot parsed: this cannot fail.
		panic(fmt.Sprintf("parsing the session root certificate: %v", err))
	}
	return cert
}

// Stats returns the leaf issuance counters.
func (a *Authority) Stats() Stats {
	return Stats{Issued: a.issued.Load(), CacheHits: a.cacheHits.Load()}
}

// Leaf returns the certificate to serve for host, which must be one of the
// session's hosts (in any spelling normalizeHost accepts: case, trailing dot,
// port and IPv6 brackets do not matter). The chain holds the leaf alone;
// Leaf is not set (a parsed leaf costs about 3 KiB per host of every
// session, and a TLS server does not read it): parse Certificate[0] to
// inspect the leaf. Leaves are issued once per host and cached; concurrent first
// calls share one issuance. The returned value is shared: callers must not
// modify it.
func (a *Authority) Leaf(host string) (*tls.Certificate, error) {
	// Fast path for a host already in normalized form, as the proxy passes
	// it: the cache holds only session hosts, keyed by that form, so a hit
	// needs no normalizing (which costs an allocation per call).
	if leaf := a.cached(host); leaf != nil {
		if err := a.checkExpiry(host); err != nil {
			return nil, err
		}
		a.cacheHits.Add(1)
		return leaf, nil
	}
	h, err := normalizeHost(host)
	if err != nil {
		return nil, fmt.Errorf("issuing leaf for %q: %w", host, err)
	}
	if _, ok := a.hosts[h.name]; !ok && !a.underDomain(h) {
		return nil, fmt.Errorf("issuing leaf for %q: not one of this session's hosts (%s); intercept it by starting a session with a connector that lists it", h.name, a.hostList())
	}
	if err := a.checkExpiry(h.name); err != nil {
		return nil, err
	}
	if leaf := a.cached(h.name); leaf != nil {
		a.cacheHits.Add(1)
		return leaf, nil
	}

	issuedHere := false
	v, err, _ := a.flight.Do(h.name, func() (any, error) {
		if leaf := a.cached(h.name); leaf != nil { // a previous flight finished after our cache miss
			return leaf, nil
		}
		leaf, err := a.issue(h)
		if err != nil {
			return nil, err
		}
		issuedHere = true
		a.mu.Lock()
		if a.leaves == nil { // made at the first issuance: most sessions stay idle
			a.leaves = map[string]*tls.Certificate{}
		}
		a.leaves[h.name] = leaf
		a.mu.Unlock()
		return leaf, nil
	})
	if err != nil {
		return nil, fmt.Errorf("issuing leaf for %q: %w", h.name, err)
	}
	if !issuedHere {
		a.cacheHits.Add(1)
	}
	return v.(*tls.Certificate), nil
}

// underDomain reports whether h lies below one of the authority's domains.
func (a *Authority) underDomain(h hostName) bool {
	if h.isIP() {
		return false
	}
	return slices.ContainsFunc(a.domains, func(d string) bool { return strings.HasSuffix(h.name, "."+d) })
}

// cached returns the cached leaf for the normalized name, or nil.
func (a *Authority) cached(name string) *tls.Certificate {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return a.leaves[name]
}

// checkExpiry refuses to hand out a leaf for name once the root has expired.
func (a *Authority) checkExpiry(name string) error {
	if now := a.now(); now.After(a.notAfter) {
		return fmt.Errorf("issuing leaf for %q: session CA expired at %s; start a new session", name, a.notAfter.Format(time.RFC3339))
	}
	return nil
}

// hostList renders the session's hosts for an error message.
func (a *Authority) hostList() string {
	const limit = 10
	if len(a.names) == 0 {
		return "the session has none"
	}
	if len(a.names) <= limit {
		return strings.Join(a.names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(a.names[:limit], ", "), len(a.names)-limit)
}
