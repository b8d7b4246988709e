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
  '/w/long': [400, { error: { code: 'ENAMETOOLONG', message: 'ENAMETOOLONG: file name too long', path: '/w/long' } }],
  '/w/nul\0byte': [400, { error: { code: 'EINVAL', message: 'EINVAL: invalid argument', path: '/w/nul\0byte' } }],
  '/w/denied': [403, { error: { code: 'EACCES', message: 'EACCES: permission denied', path: '/w/denied' } }],
  '/w/unauthorized': [401, { error: { code: 'unauthorized', message: 'the sandbox token is not valid' } }],
  '/w/gone': [410, { error: { code: 'sandbox_gone', message: 'the sandbox is gone' } }],
};

/** The stand-in's exec answer: the command "cut" comes back as the daemon answers a capped output. */
function execReply(command: string): object {
  const cut = command === 'cut';
  const note = '\n[aileron] output truncated: stdout exceeded 3 bytes (0 MiB), the cap of each stream; the rest was dropped\n';
  return { stdout: 'aaa', stderr: cut ? note : '', exitCode: 0, timedOut: false, truncated: cut, durationMs: 1 };
}

const codeOf = (e: unknown) => (typeof e === 'object' && e !== null && 'code' in e ? String(e.code) : String(e));

/** Starts a stand-in daemon on loopback and a sandbox on it. */
async function standIn(): Promise<{ server: http.Server; sb: Sandbox }> {
  const server = http.createServer((req, res) => {
    let raw = '';
    req.on('data', (c: Buffer) => (raw += c.toString('utf8')));
    req.on('end', () => {
      const send = (status: number, body: object) => res.writeHead(status, { 'Content-Type': 'application/json' }).end(JSON.stringify(body));
      if (req.url === '/v1/sandboxes/sbx_t/') return send(200, { workdir: '/w' });
      if (req.url === '/v1/sandboxes/sbx_t/exec') return send(200, execReply((JSON.parse(raw) as { command: string }).command));
      if (req.url !== '/v1/sandboxes/sbx_t/fs/stat') return send(404, { error: { code: 'not_found', message: `no route ${req.url}` } });
      const { path } = JSON.parse(raw) as { path: string };
      const [status, body] = stats[path] ?? [404, { error: { code: 'ENOENT', message: 'ENOENT: no such file or directory', path } }];
      send(status, body);
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address() as AddressInfo;
  const sb = await aileron({ apiUrl: `http://127.0.0.1:${port}`, token: 't', sandboxId: 'sbx_t' }).createSandbox({ id: 'driver' });
  return { server, sb };
}

const close = (server: http.Server) => new Promise<void>((r) => server.close(() => r()));

let server: http.Server;
let sb: Sandbox;
before(async () => ({ server, sb } = await standIn()));
after(() => close(server));

describe('aileron() exists', () => {
  it('is true for a file and false where nothing can be (ENOENT, ENOTDIR, ENAMETOOLONG, EINVAL)', async () => {
    assert.equal(await sb.exists('/w/f'), true);
    assert.equal(await sb.exists('/w/missing'), false);
    assert.equal(await sb.exists('/w/f/under-a-file'), false);
    assert.equal(await sb.exists('/w/long'), false);
    assert.equal(await sb.exists('/w/nul\0byte'), false);
  });
  it('rejects on any other error: a denied path, a refused token, a dead sandbox', async () => {
    await assert.rejects(sb.exists('/w/denied'), (e: unknown) => e instanceof AileronFsError && e.code === 'EACCES' && e.status === 403);
    await assert.rejects(sb.exists('/w/unauthorized'), (e: unknown) => e instanceof AileronFsError && e.code === 'unauthorized' && e.status === 401);
    await assert.rejects(sb.exists('/w/gone'), SandboxDiedError);
  });
  it('rejects when the daemon is unreachable', async () => {
    const gone = await standIn();
    await close(gone.server);
    await assert.rejects(gone.sb.exists('/w/f'), (e: unknown) => codeOf(e) === 'ECONNREFUSED');
  });
});

describe('aileron() exec', () => {
  it('passes the daemon\'s truncated on, with the note on stderr; an uncut result has no flag', async () => {
    const cut = await sb.exec('cut');
    assert.equal((cut as { truncated?: unknown }).truncated, true);
    assert.match(cut.stderr, /output truncated: stdout exceeded 3 bytes/);
    assert.deepEqual(await sb.exec('whole'), { stdout: 'aaa', stderr: '', exitCode: 0 });
  });
});
