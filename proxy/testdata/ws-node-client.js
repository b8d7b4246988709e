// A client for TestWebSocketNode: Node's built-in WebSocket (undici) through
// the proxy. Node's WebSocket has no proxy support of its own, so this file
// installs, as undici's global dispatcher, the smallest dispatcher that
// speaks CONNECT to the proxy, TLS (trusting only CA_FILE) and the HTTP/1.1
// handshake, then hands the socket to the WebSocket. Everything after the
// handshake (framing, masking, fragments, close) is Node's own.
//
// Env: PROXY_ADDR host:port, PROXY_USER id:secret, CA_FILE, WS_URL and
// MESSAGES (JSON array of texts to send one by one, each after the answer to
// the previous). Prints one JSON line per event.
'use strict';
const net = require('node:net');
const tls = require('node:tls');
const fs = require('node:fs');

const out = (o) => process.stdout.write(JSON.stringify(o) + '\n');
const [proxyHost, proxyPort] = process.env.PROXY_ADDR.split(':');
const proxyAuth = Buffer.from(process.env.PROXY_USER).toString('base64');
const ca = fs.readFileSync(process.env.CA_FILE);

// readHead collects a socket's bytes up to the end of an HTTP head, then
// pauses it and puts back what follows.
function readHead(sock, done) {
  let buf = Buffer.alloc(0);
  const onData = (d) => {
    buf = Buffer.concat([buf, d]);
    const i = buf.indexOf('\r\n\r\n');
    if (i < 0) return;
    sock.pause();
    sock.removeListener('data', onData);
    const rest = buf.subarray(i + 4);
    if (rest.length) sock.unshift(rest);
    done(buf.toString('latin1', 0, i).split('\r\n'));
  };
  sock.on('data', onData);
}

globalThis[Symbol.for('undici.globalDispatcher.1')] = {
  dispatch(opts, handler) {
    const u = new URL(opts.origin);
    const host = u.hostname;
    const port = u.port || '443';
    if (handler.onConnect) handler.onConnect(() => {});
    const fail = (err) => handler.onError(err);
    const raw = net.connect(Number(proxyPort), proxyHost, () => {
      raw.write(`CONNECT ${host}:${port} HTTP/1.1\r\nHost: ${host}:${port}\r\nProxy-Authorization: Basic ${proxyAuth}\r\n\r\n`);
    });
    raw.on('error', fail);
    readHead(raw, (lines) => {
      if (!/^HTTP\/1\.[01] 200 /.test(lines[0])) return fail(new Error('CONNECT: ' + lines[0]));
      const sock = tls.connect({ socket: raw, servername: host, ca, ALPNProtocols: ['http/1.1'] }, () => {
        let req = `${opts.method} ${opts.path} HTTP/1.1\r\nHost: ${host}\r\nConnection: Upgrade\r\nUpgrade: ${opts.upgrade}\r\n`;
        const h = opts.headers;
        const entries = Array.isArray(h) ? h.reduce((a, v, i) => (i % 2 ? a[a.length - 1].push(v) : a.push([v]), a), []) : Object.entries(h);
        for (const [k, v] of entries) req += `${k}: ${v}\r\n`;
        sock.write(req + '\r\n');
      });
      sock.on('error', fail);
      readHead(sock, (head) => {
        const status = Number(head[0].split(' ')[1]);
        out({ handshake: status, extensions: head.filter((l) => /^sec-websocket-extensions:/i.test(l)) });
        if (status !== 101) {
          sock.destroy();
          return fail(new Error('handshake status ' + status));
        }
        const rawHeaders = [];
        for (const l of head.slice(1)) {
          const k = l.indexOf(':');
          rawHeaders.push(Buffer.from(l.slice(0, k)), Buffer.from(l.slice(k + 1).trim()));
        }
        handler.onUpgrade(101, rawHeaders, sock);
        process.nextTick(() => sock.resume());
      });
    });
    return true;
  },
  on() { return this; },
  once() { return this; },
  off() { return this; },
  close() { return Promise.resolve(); },
  destroy() { return Promise.resolve(); },
};

const messages = JSON.parse(process.env.MESSAGES || '[]');
const ws = new WebSocket(process.env.WS_URL);
ws.binaryType = 'arraybuffer';
const next = () => {
  if (messages.length === 0) return ws.close(1000, 'done');
  ws.send(messages.shift());
};
ws.onopen = () => { out({ open: true }); next(); };
ws.onmessage = (e) => { out({ message: String(e.data) }); next(); };
ws.onerror = () => out({ error: true });
ws.onclose = (e) => { out({ close: e.code }); process.exit(0); };
setTimeout(() => { out({ timeout: true }); process.exit(1); }, 20000).unref();
