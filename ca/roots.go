package ca

import (
	"bytes"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
)

// systemRootPaths lists where operating systems keep their root bundle, in
// the order Go's crypto/x509 tries them on Linux, followed by the BSD and
// macOS locations.
func systemRootPaths() []string {
	return []string{
		"/etc/ssl/certs/ca-certificates.crt",                // Debian, Ubuntu, Gentoo, Arch, Alpine
		"/etc/pki/tls/certs/ca-bundle.crt",                  // Fedora, RHEL 6
		"/etc/ssl/ca-bundle.pem",                            // openSUSE
		"/etc/pki/tls/cacert.pem",                           // OpenELEC
		"/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem", // CentOS, RHEL 7
		"/etc/ssl/cert.pem",                                 // Alpine, macOS, OpenBSD
		"/usr/local/etc/ssl/cert.pem",                       // FreeBSD
		"/usr/local/share/certs/ca-root-nss.crt",            // FreeBSD
	}
}

// SystemRootsPEM returns the host's system root bundle: the CERTIFICATE
// blocks of the first standard bundle file that holds any, re-encoded as
// plain PEM. It deliberately ignores SSL_CERT_FILE and SSL_CERT_DIR, which
// may point at a bundle that already contains a session CA.
func SystemRootsPEM() ([]byte, error) {
	return readRoots(systemRootPaths())
}

// readRoots returns the certificates of the first file in paths that exists
// and contains at least one PEM CERTIFICATE block.
func readRoots(paths []string) ([]byte, error) {
	var problems []string
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			problems = append(problems, err.Error())
			continue
		}
		if certs := certificateBlocks(data); len(certs) > 0 {
			return certs, nil
		}
		problems = append(problems, fmt.Sprintf("%s: no PEM certificates", p))
	}
	msg := "reading system root bundle: no certificates in " + strings.Join(paths, ", ")
	if len(problems) > 0 {
		msg += " (" + strings.Join(problems, "; ") + ")"
	}
	return nil, errors.New(msg + "; install the ca-certificates package")
}

// certificateBlocks keeps only the CERTIFICATE blocks of data, each PEM
// encoded on its own lines; comments and other block types are dropped.
func certificateBlocks(data []byte) []byte {
	var out bytes.Buffer
	for {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			return out.Bytes()
		}
		if b.Type == "CERTIFICATE" && len(b.Headers) == 0 {
			_ = pem.Encode(&out, &pem.Block{Type: b.Type, Bytes: b.Bytes}) // writes to a bytes.Buffer cannot fail
		}
	}
}

// BundlePEM returns the session CA followed by the system roots, as one PEM
// bundle for clients that take a single CA file. Each part is separated by a
// newline even when the inputs lack a trailing one, and the result ends with
// a newline.
func BundlePEM(sessionCA []byte, systemRoots []byte) []byte {
	out := make([]byte, 0, len(sessionCA)+len(systemRoots)+2)
	for _, part := range [][]byte{sessionCA, systemRoots} {
		part = bytes.TrimLeft(part, "\r\n")
		if len(part) == 0 {
			continue
		}
		out = append(out, part...)
		if part[len(part)-1] != '\n' {
			out = append(out, '\n')
		}
	}
	return out
}
