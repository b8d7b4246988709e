// Package ca issues the TLS certificates of one proxy session: a private,
// in-memory root certificate authority whose name constraints limit it to the
// session's intercepted hosts, and one cached leaf certificate per host.
//
// Its one job is certificates. It knows nothing about HTTP, sessions or
// policy: callers hand it the list of hosts and ask for leaves. The root's
// private key leaves the Authority only through KeyDER, so that a session
// can outlive the process: aileron-proxy writes it nowhere but into its
// state store, sealed under the state key, and Restore rebuilds the same
// root from it (same certificate bytes), so leaves issued after a restart
// chain to the root a client already trusts.
//
// The root is ECDSA P-256 with a critical CA basic constraint (path length 0),
// critical key usage certSign|cRLSign, a subject key identifier and critical
// name constraints: the session's DNS names are permitted (and their
// subdomains excluded, unless another session host is one of them), its IP
// literals are permitted as /32 or /128 ranges, and a name type the session
// does not use is excluded entirely. Leaves are ECDSA P-256 with the host as
// their only subjectAltName and common name (IP leaves have an empty subject
// and a critical subjectAltName instead, because OpenSSL checks an IP-like
// common name against DNS name constraints), serverAuth, a random 128-bit
// serial and authority and subject key identifiers. Certificates are built
// with go.step.sm/crypto (x509util, keyutil) and pass OpenSSL's -x509_strict
// and Python's ssl.VERIFY_X509_STRICT checks.
package ca
