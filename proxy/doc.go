// Package proxy is aileron-proxy's single enforcement point: an
// authenticating MITM forward proxy.
//
// A client (a sandbox tool, or the control API's run endpoint) sends
// CONNECT host:port with Proxy-Authorization: Basic base64(sessionID:secret).
// github.com/elazarl/goproxy parses and routes the CONNECT; the proxy then
// decides it:
//
//   - intercepted when the session's connectors list the host: the proxy
//     answers 200, terminates TLS itself with the session's leaf for the
//     CONNECT host (never goproxy's built-in CA, never an SNI-chosen name),
//     offers h2 and http/1.1 by ALPN, and serves every request of the tunnel
//     (HTTP/1.1 keep-alive and each HTTP/2 stream) through one handler;
//   - tunnelled blind when the host matches a configured passthrough glob;
//   - refused with 403 (or 407 without a valid proxy credential) otherwise.
//
// Inside an intercepted tunnel every request is pinned to the CONNECT target
// (421 otherwise), decided by a fresh policy snapshot, held for approval when
// its operation asks for it, and, when allowed, sent upstream with the
// client's Authorization, Proxy-* and hop-by-hop headers removed and the
// connector's credential injected: an HTTP/1.1 client's requests over a
// pooled HTTP/1.1 connection driven by the goroutine serving the client
// (serve_h1.go, upstream_h1.go), HTTP/2 streams and WebSockets over the
// pooled HTTP/2-capable transport. Sockets are read and written with raw
// system calls inside Go's poller (rawconn.go), and bulk bodies move in
// large reads and batched writes (batch.go). Responses stream back
// unbuffered; for credentialed operations every injected secret is scrubbed
// from response headers and bodies. Each decision produces one audit event and
// one log line; secrets, header values, query strings and bodies never reach
// either.
//
// A WebSocket handshake (HTTP/1.1 Upgrade or HTTP/2 extended CONNECT) is
// decided the same way; it is relayed only for an operation that declares
// "websocket": true, and refused with 403 websocket_not_allowed otherwise.
// The relay scrubs upstream frames' payloads and audits the close
// (websocket.go).
//
// Upstream addresses are resolved by the proxy and private, loopback,
// link-local, CGNAT, ULA, multicast and cloud-metadata addresses are refused
// unless the operator mapped the host with Config.Resolve; the proxy dials the
// address it checked.
//
// Responses the proxy originates carry X-Aileron-Decision ("denied" for
// refusals, "error" for upstream failures) and X-Aileron-Audit-Id; proxied
// responses carry X-Aileron-Audit-Id too, so the run endpoint can report it.
package proxy
