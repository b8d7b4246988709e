// aileron(...) against a stand-in for the daemon's exec/files API on
// loopback: how the connector reads the daemon's answers, without a
// container (test/aileron.test.ts runs the contract on real sandboxes).
import assert from 'node:assert/strict';
import * as http from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { SandboxDiedError } from '@flue/runtime';
import type { Sandbox } from '@flue/runtime';
import { AileronFsError, aileron } from '../aileron.ts';

/** The daemon's reply to fs/stat of each path; anything else is ENOENT. */
const stats: Record<string, [number, object]> = {
  '/w/f': [200, { isFile: true, isDirectory: false, isSymbolicLink: false, size: 1, mtimeMs: 0 }],
  '/w/f/under-a-file': [400, { error: { code: 'ENOTDIR', message: 'ENOTDIR: not a directory', path: '/w/f/under-a-file' } }],
  '/w/unauthorized': [401, { error: { code: 'unauthorized', message: 'the sandbox token is not valid' } }],
  '/w/gone': [410, { error: { code: 'sandbox_gone', message: 'the sandbox is gone' } }],
};

describe('aileron() exists', () => {
  let server: http.Server;
  let sb: Sandbox;
  before(async () => {
    server = http.createServer((req, res) => {
      let raw = '';
      req.on('data', (c: Buffer) => (raw += c.toString('utf8')));
      req.on('end', () => {
        const send = (status: number, body: object) => res.writeHead(status, { 'Content-Type': 'application/json' }).end(JSON.stringify(body));
        if (req.url === '/v1/sandboxes/sbx_t/') return send(200, { workdir: '/w' });
        if (req.url !== '/v1/sandboxes/sbx_t/fs/stat') return send(404, { error: { code: 'not_found', message: `no route ${req.url}` } });
        const { path } = JSON.parse(raw) as { path: string };
        const [status, body] = stats[path] ?? [404, { error: { code: 'ENOENT', message: 'ENOENT: no such file or directory', path } }];
        send(status, body);
      });
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const { port } = server.address() as AddressInfo;
    sb = await aileron({ apiUrl: `http://127.0.0.1:${port}`, token: 't', sandboxId: 'sbx_t' }).createSandbox({ id: 'exists' });
  });
  after(() => new Promise<void>((r) => server.close(() => r())));

  it('is true for a file and false when nothing is there (ENOENT, ENOTDIR)', async () => {
    assert.equal(await sb.exists('/w/f'), true);
    assert.equal(await sb.exists('/w/missing'), false);
    assert.equal(await sb.exists('/w/f/under-a-file'), false);
  });
  it('rejects on any other error: a refused token, a dead sandbox', async () => {
    await assert.rejects(sb.exists('/w/unauthorized'), (e: unknown) => e instanceof AileronFsError && e.code === 'unauthorized' && e.status === 401);
    await assert.rejects(sb.exists('/w/gone'), SandboxDiedError);
  });
});
