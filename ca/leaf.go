package ca

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	encasn1 "encoding/asn1"
	"fmt"
	"math/big"
	"slices"
	"time"

	"go.step.sm/crypto/keyutil"
	"golang.org/x/crypto/cryptobyte"
	"golang.org/x/crypto/cryptobyte/asn1"
)

// Object identifiers of the leaf encoding.
var (
	oidECDSAWithSHA256  = encasn1.ObjectIdentifier{1, 2, 840, 10045, 4, 3, 2}
	oidCommonName       = encasn1.ObjectIdentifier{2, 5, 4, 3}
	oidSubjectKeyID     = encasn1.ObjectIdentifier{2, 5, 29, 14}
	oidKeyUsage         = encasn1.ObjectIdentifier{2, 5, 29, 15}
	oidSubjectAltName   = encasn1.ObjectIdentifier{2, 5, 29, 17}
	oidBasicConstraints = encasn1.ObjectIdentifier{2, 5, 29, 19}
	oidAuthorityKeyID   = encasn1.ObjectIdentifier{2, 5, 29, 35}
	oidExtKeyUsage      = encasn1.ObjectIdentifier{2, 5, 29, 37}
	oidServerAuth       = encasn1.ObjectIdentifier{1, 3, 6, 1, 5, 5, 7, 3, 1}
)

// issue creates a leaf certificate for h signed by the root. It does not
// consult or fill the cache and does not check h against the session's hosts.
//
// The leaf is encoded here rather than with x509.CreateCertificate, which
// verifies every signature it makes: that check alone costs about as much
// as the rest of issuance together (~100µs for P-256 on the machines we
// measure), and the root is our own key, so it proves nothing. The result is
// parsed back with x509.ParseCertificate, and the interop tests hold it to
// openssl -x509_strict, Python's VERIFY_X509_STRICT, curl and Go.
func (a *Authority) issue(h hostName) (*tls.Certificate, error) {
	signer, err := keyutil.GenerateSigner("EC", "P-256", 0)
	if err != nil {
		return nil, fmt.Errorf("generating leaf key: %w", err)
	}
	key, ok := signer.(*ecdsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("generating leaf key: got %T, want *ecdsa.PrivateKey", signer)
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, err
	}
	// A leaf is valid exactly as long as its root, however long after the
	// root it is issued (leaves are issued at first use): a client whose
	// clock lags accepts it as it accepts the root.
	tbs, err := a.leafTBS(h, &key.PublicKey, serial, a.notBefore, a.notAfter)
	if err != nil {
		return nil, fmt.Errorf("encoding leaf certificate for %q: %w", h.name, err)
	}
	digest := sha256.Sum256(tbs)
	sig, err := a.key.Sign(rand.Reader, digest[:], crypto.SHA256)
	if err != nil {
		return nil, fmt.Errorf("signing leaf certificate for %q: %w", h.name, err)
	}
	var b cryptobyte.Builder
	b.AddASN1(asn1.SEQUENCE, func(b *cryptobyte.Builder) {
		b.AddBytes(tbs)
		addAlgorithm(b)
		b.AddASN1BitString(sig)
	})
	der, err := b.Bytes()
	if err != nil {
		return nil, fmt.Errorf("encoding leaf certificate for %q: %w", h.name, err)
	}
	// The builder's buffer has room to spare: keep an exact copy, for the
	// leaf lives as long as the session.
	der = slices.Clone(der)
	if _, err := x509.ParseCertificate(der); err != nil {
		return nil, fmt.Errorf("parsing the leaf certificate issued for %q: %w", h.name, err)
	}
	a.issued.Add(1)
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}

// leafTBS encodes the TBSCertificate of a leaf for h: v3, ECDSA-SHA256,
// issued by the root, SAN = h (critical when the subject is empty), key
// usage digitalSignature (critical), serverAuth, CA:false (critical), and
// subject and authority key identifiers.
func (a *Authority) leafTBS(h hostName, pub *ecdsa.PublicKey, serial *big.Int, notBefore, notAfter time.Time) ([]byte, error) {
	spki, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil, err
	}
	pubBytes, err := pub.Bytes()
	if err != nil {
		return nil, err
	}
	skid := sha1.Sum(pubBytes) // RFC 5280 4.2.1.2 method (1)
	var ip []byte
	if h.isIP() {
		ip = h.ip.AsSlice() // 4 bytes for IPv4, 16 for IPv6
	}
	var b cryptobyte.Builder
	b.AddASN1(asn1.SEQUENCE, func(b *cryptobyte.Builder) {
		b.AddASN1(asn1.Tag(0).Constructed().ContextSpecific(), func(b *cryptobyte.Builder) { b.AddASN1Int64(2) })
		b.AddASN1BigInt(serial)
		addAlgorithm(b)
		b.AddBytes(a.rawSubject)
		b.AddASN1(asn1.SEQUENCE, func(b *cryptobyte.Builder) {
			addTime(b, notBefore)
			addTime(b, notAfter)
		})
		// Subject: CN = host for DNS names; empty for IPs (OpenSSL would
		// check an IP-looking CN against the root's DNS name constraints).
		b.AddASN1(asn1.SEQUENCE, func(b *cryptobyte.Builder) {
			if ip != nil {
				return
			}
			b.AddASN1(asn1.SET, func(b *cryptobyte.Builder) {
				b.AddASN1(asn1.SEQUENCE, func(b *cryptobyte.Builder) {
					b.AddASN1ObjectIdentifier(oidCommonName)
					b.AddASN1(asn1.UTF8String, func(b *cryptobyte.Builder) { b.AddBytes([]byte(h.name)) })
				})
			})
		})
		b.AddBytes(spki)
		b.AddASN1(asn1.Tag(3).Constructed().ContextSpecific(), func(b *cryptobyte.Builder) {
			b.AddASN1(asn1.SEQUENCE, func(b *cryptobyte.Builder) {
				addExtension(b, oidKeyUsage, true, func(b *cryptobyte.Builder) {
					// digitalSignature only: one byte, 7 unused bits.
					b.AddASN1(asn1.BIT_STRING, func(b *cryptobyte.Builder) { b.AddBytes([]byte{7, 0x80}) })
				})
				addExtension(b, oidExtKeyUsage, false, func(b *cryptobyte.Builder) {
					b.AddASN1(asn1.SEQUENCE, func(b *cryptobyte.Builder) { b.AddASN1ObjectIdentifier(oidServerAuth) })
				})
				addExtension(b, oidBasicConstraints, true, func(b *cryptobyte.Builder) {
					b.AddASN1(asn1.SEQUENCE, func(*cryptobyte.Builder) {}) // cA FALSE (default)
				})
				addExtension(b, oidSubjectKeyID, false, func(b *cryptobyte.Builder) { b.AddASN1OctetString(skid[:]) })
				addExtension(b, oidAuthorityKeyID, false, func(b *cryptobyte.Builder) {
					b.AddASN1(asn1.SEQUENCE, func(b *cryptobyte.Builder) {
						b.AddASN1(asn1.Tag(0).ContextSpecific(), func(b *cryptobyte.Builder) { b.AddBytes(a.skid) })
					})
				})
				addExtension(b, oidSubjectAltName, ip != nil, func(b *cryptobyte.Builder) {
					b.AddASN1(asn1.SEQUENCE, func(b *cryptobyte.Builder) {
						if ip != nil {
							b.AddASN1(asn1.Tag(7).ContextSpecific(), func(b *cryptobyte.Builder) { b.AddBytes(ip) })
							return
						}
						b.AddASN1(asn1.Tag(2).ContextSpecific(), func(b *cryptobyte.Builder) { b.AddBytes([]byte(h.name)) })
					})
				})
			})
		})
	})
	return b.Bytes()
}

func addAlgorithm(b *cryptobyte.Builder) {
	b.AddASN1(asn1.SEQUENCE, func(b *cryptobyte.Builder) { b.AddASN1ObjectIdentifier(oidECDSAWithSHA256) })
}

// addTime encodes t as UTCTime through 2049 and GeneralizedTime after, as
// RFC 5280 4.1.2.5 requires.
func addTime(b *cryptobyte.Builder, t time.Time) {
	t = t.UTC().Truncate(time.Second)
	if t.Year() < 2050 {
		b.AddASN1UTCTime(t)
		return
	}
	b.AddASN1GeneralizedTime(t)
}

// addExtension encodes one Extension whose extnValue is what value writes.
func addExtension(b *cryptobyte.Builder, oid encasn1.ObjectIdentifier, critical bool, value func(*cryptobyte.Builder)) {
	b.AddASN1(asn1.SEQUENCE, func(b *cryptobyte.Builder) {
		b.AddASN1ObjectIdentifier(oid)
		if critical {
			b.AddASN1Boolean(true)
		}
		b.AddASN1(asn1.OCTET_STRING, value)
	})
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
