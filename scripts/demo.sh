#!/usr/bin/env bash
# Live demo of aileron-proxy on a fresh machine, no setup needed beyond Go and
# curl: a throwaway $AILERON_HOME, a local HTTPS API standing in for a real
# upstream, the bundled demo connector, a credential the sandbox never sees,
# `serve`, a session, then curl through the proxy: one allowed call that
# arrives with the injected credential, one denied call, and the audit lines.
set -euo pipefail
cd "$(dirname "$0")/.."

BIN=${BIN:-bin/aileron-proxy}
[ -x "$BIN" ] || go build -o "$BIN" ./cmd/aileron-proxy
go build -o bin/demoapi ./examples/demoapi

work=$(mktemp -d)
export AILERON_HOME="$work/home"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

# Only the trust this demo means: never the machine's global CA variables.
unset SSL_CERT_FILE SSL_CERT_DIR CURL_CA_BUNDLE REQUESTS_CA_BUNDLE GIT_SSL_CAINFO \
  HTTPS_PROXY https_proxy HTTP_PROXY http_proxy ALL_PROXY all_proxy NO_PROXY no_proxy

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
wait_for() { for _ in $(seq 1 100); do [ -s "$1" ] && return 0; sleep 0.1; done; echo "timed out waiting for $1" >&2; exit 1; }

step "a local HTTPS API standing in for api.demo.localhost"
bin/demoapi -listen 127.0.0.1:0 -names api.demo.localhost -cert-out "$work/upstream.pem" -addr-out "$work/upstream.addr" &
pids+=($!)
wait_for "$work/upstream.addr"
upstream=$(cat "$work/upstream.addr")
echo "listening on $upstream"

step "install the bundled demo connector"
"$BIN" connector install configs/connectors/demo.aileron.connector.v1.json
"$BIN" connector list

step "store a credential on the host (the sandbox never sees it)"
DEMO_API_TOKEN="demo-$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')"
export DEMO_API_TOKEN
"$BIN" credential set local://aileron/demo --kind bearer --from-env DEMO_API_TOKEN
"$BIN" credential list

step "serve: MITM proxy + control API"
"$BIN" serve --proxy-listen 127.0.0.1:0 --api-listen 127.0.0.1:0 \
  --resolve "api.demo.localhost:8443=$upstream" --upstream-ca "$work/upstream.pem" \
  2>"$work/serve.log" &
pids+=($!)
wait_for "$AILERON_HOME/daemon.json"

step "create a session"
"$BIN" session create --json >"$work/session.json"
field() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$work/session.json" "$1"; }
proxy_url=$(field proxy_url)
ca_file=$(field ca_file)
echo "session $(field id), CA $ca_file"

step "allowed: GET https://api.demo.localhost:8443/v1/items through the proxy"
echo "\$ curl --proxy \$HTTPS_PROXY --cacert $ca_file https://api.demo.localhost:8443/v1/items"
curl -sS --proxy "$proxy_url" --cacert "$ca_file" https://api.demo.localhost:8443/v1/items | tee "$work/allowed.json"
want=$(printf 'Bearer %s' "$DEMO_API_TOKEN" | sha256sum | cut -c1-12)
got=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["request"]["authorization_sha256"])' "$work/allowed.json")
if [ "$want" = "$got" ]; then
  echo "-> the upstream received the injected credential (hash $got matches); curl never had it"
else
  echo "-> credential hash mismatch: want $want, got $got" >&2
  exit 1
fi

step "denied: DELETE https://api.demo.localhost:8443/v1/items/1 (not an operation of the connector)"
curl -sS -o "$work/denied.json" -w 'HTTP %{http_code}\n' -X DELETE --proxy "$proxy_url" --cacert "$ca_file" https://api.demo.localhost:8443/v1/items/1
python3 -m json.tool "$work/denied.json"

step "denied: CONNECT to a host no connector names"
curl -sS -o /dev/null -w 'CONNECT answered %{http_connect}\n' --proxy "$proxy_url" --cacert "$ca_file" https://example.com/ || true

step "audit trail ($AILERON_HOME/audit/audit.jsonl)"
"$BIN" audit tail -n 10

# The token goes to grep on stdin (printf is a builtin), never in an argv.
if printf '%s\n' "$DEMO_API_TOKEN" | grep -qF -f - "$work/serve.log" "$AILERON_HOME/audit/audit.jsonl" "$work/allowed.json" "$work/denied.json"; then
  echo "the credential leaked into a log, the audit trail or a response" >&2
  exit 1
fi
step "done: the secret appears in no log, audit line or response"
