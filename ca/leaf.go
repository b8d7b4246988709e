package ca

import (
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"math/big"

	"go.step.sm/crypto/keyutil"
	"go.step.sm/crypto/x509util"
)

// issue creates a leaf certificate for h signed by the root. It does not
// consult or fill the cache and does not check h against the session's hosts.
func (a *Authority) issue(h hostName) (*tls.Certificate, error) {
	key, err := keyutil.GenerateSigner("EC", "P-256", 0)
	if err != nil {
		return nil, fmt.Errorf("generating leaf key: %w", err)
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, err
	}
	san := x509util.SubjectAlternativeName{Type: x509util.DNSType, Value: h.name}
	subject := x509util.Subject{CommonName: h.name}
	if h.isIP() {
		san.Type = x509util.IPType
		// No common name: OpenSSL checks a leaf's CN against the root's DNS
		// name constraints when the leaf has no DNS SAN, and "127.0.0.1"
		// looks like a DNS name to it, so a CN would fail every session
		// that has DNS hosts (or none). With an empty subject the SAN is
		// marked critical, as RFC 5280 requires.
		subject = x509util.Subject{}
	}
	notBefore := a.now().UTC().Add(-clockSkew)
	if notBefore.Before(a.cert.NotBefore) {
		notBefore = a.cert.NotBefore
	}
	c := &x509util.Certificate{
		Subject:          subject,
		SANs:             []x509util.SubjectAlternativeName{san},
		SerialNumber:     x509util.SerialNumber{Int: serial},
		NotBefore:        notBefore,
		NotAfter:         a.cert.NotAfter,
		KeyUsage:         x509util.KeyUsage(x509.KeyUsageDigitalSignature),
		ExtKeyUsage:      x509util.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraints: &x509util.BasicConstraints{IsCA: false},
		// The authority key identifier is copied from the root's subject key
		// identifier by CreateCertificate; the leaf's own is derived from
		// its public key.
		PublicKey: key.Public(),
	}
	cert, err := x509util.CreateCertificate(c.GetCertificate(), a.cert, key.Public(), a.key)
	if err != nil {
		return nil, fmt.Errorf("signing leaf certificate: %w", err)
	}
	a.issued.Add(1)
	return &tls.Certificate{
		Certificate: [][]byte{cert.Raw},
		PrivateKey:  key,
		Leaf:        cert,
	}, nil
}

// randomSerial returns a random, positive serial number of at most 128 bits.
func randomSerial() (*big.Int, error) {
	limit := new(big.Int).Lsh(big.NewInt(1), 128)
	for {
		n, err := rand.Int(rand.Reader, limit)
		if err != nil {
			return nil, fmt.Errorf("generating serial number: %w", err)
		}
		if n.Sign() > 0 {
			return n, nil
		}
	}
}
