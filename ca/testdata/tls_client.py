"""TLS handshake probe used by the ca package tests.

usage: tls_client.py CAFILE CONNECT_HOST PORT SERVER_HOSTNAME

Trusts only CAFILE, with ssl.VERIFY_X509_STRICT on top of Python's defaults,
connects to CONNECT_HOST:PORT and verifies the certificate for
SERVER_HOSTNAME (a DNS name or an IP literal). Exit status: 0 handshake and
verification succeeded, 3 certificate verification failed, 1 anything else.
"""
import socket
import ssl
import sys


def main():
    cafile, host, port, server_hostname = sys.argv[1:5]
    ctx = ssl.create_default_context(cafile=cafile)
    ctx.verify_flags |= ssl.VERIFY_X509_STRICT
    assert ctx.verify_flags & ssl.VERIFY_X509_STRICT
    assert ctx.verify_mode == ssl.CERT_REQUIRED and ctx.check_hostname
    try:
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            with ctx.wrap_socket(sock, server_hostname=server_hostname) as tls:
                print("ok", tls.version(), ssl.OPENSSL_VERSION)
    except ssl.SSLCertVerificationError as e:
        print("verify failed:", e.verify_message)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
