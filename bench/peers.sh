#!/bin/sh
# peers.sh installs the peer proxies the benchmark compares aileron-proxy
# with: squid with ssl-bump (Debian's squid-openssl) and mitmproxy (Debian's
# mitmproxy). `make bench` detects them and otherwise prints
# "skipped: not installed (make bench-peers)".
#
# It also stops the squid service Debian starts on install (it would hold
# 127.0.0.1:3128, aileron-proxy's default proxy port): the harness runs its own
# squid and mitmdump on free loopback ports, with configs it writes per run
# (a per-run ECDSA CA, the origin's port and CA) under its temporary run
# directory; `make bench BENCHFLAGS=-keep` keeps that directory to read them.
set -eu

if [ "$(id -u)" -eq 0 ]; then SUDO=""; else SUDO="sudo"; fi

echo "== apt-cache policy squid-openssl mitmproxy"
apt-cache policy squid-openssl mitmproxy

missing=""
for pkg in squid-openssl mitmproxy; do
	cand=$(apt-cache policy "$pkg" | awk '/Candidate:/ {print $2}')
	if [ -z "$cand" ] || [ "$cand" = "(none)" ]; then
		echo "peers.sh: package $pkg is not available from the configured apt sources; the bench will skip it" >&2
		missing="$missing $pkg"
	fi
done

want=""
for pkg in squid-openssl mitmproxy; do
	case " $missing " in *" $pkg "*) continue ;; esac
	want="$want $pkg"
done

if [ -n "$want" ]; then
	echo "== apt-get install$want"
	$SUDO apt-get update -qq
	# shellcheck disable=SC2086 # word splitting of the package list is wanted
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $want
fi

# Debian's postinst starts squid as a service; the bench starts its own.
if command -v squid >/dev/null 2>&1; then
	if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
		$SUDO systemctl disable --now squid >/dev/null 2>&1 || true
	elif command -v service >/dev/null 2>&1; then
		$SUDO service squid stop >/dev/null 2>&1 || true
	fi
fi

echo "== installed peers"
if command -v squid >/dev/null 2>&1; then
	squid -v | head -n 1
	if [ -x /usr/lib/squid/security_file_certgen ]; then
		echo "security_file_certgen: /usr/lib/squid/security_file_certgen"
	else
		echo "peers.sh: /usr/lib/squid/security_file_certgen is missing; squid cannot ssl-bump (install squid-openssl, not squid)" >&2
	fi
	squid -v | grep -q -- '--with-openssl' || echo "peers.sh: this squid was built without OpenSSL; install squid-openssl" >&2
else
	echo "squid: not installed"
fi
if command -v mitmdump >/dev/null 2>&1; then
	mitmdump --version 2>/dev/null | head -n 1
else
	echo "mitmdump: not installed"
fi
echo "Now run: make bench"
