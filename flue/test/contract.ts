// One contract suite over Flue's Sandbox surface. local() from
// @flue/runtime/node proves it; aileron(...) must pass it too, and the
// stricter form of the checks marked beyondLocal, where local() falls short.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { describe, it, before, after } from 'node:test';
import type { Sandbox } from '@flue/runtime';

export interface Subject {
  sandbox: Sandbox;
  /** Whether the subject must pass the stricter form of the checks local() fails (measured with Flue 2.1.0); false asserts what local() does instead. */
  beyondLocal: boolean;
}

/** The error's code, Node style (ENOENT, ERR_FS_EISDIR...). */
function codeOf(e: unknown): string {
  return typeof e === 'object' && e !== null && 'code' in e ? String((e as { code: unknown }).code) : String(e);
}

async function rejectsWith(p: Promise<unknown>, code: RegExp, what: string): Promise<void> {
  try {
    await p;
  } catch (e) {
    assert.match(codeOf(e), code, `${what}: rejected with ${codeOf(e)}, want ${code}`);
    return;
  }
  assert.fail(`${what}: resolved, want a rejection with ${code}`);
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export function contract(name: string, subject: () => Promise<Subject>): void {
  describe(name, () => {
    let sb: Sandbox;
    let beyond = false;
    let root = '';
    let rel = '';
    before(async () => {
      const s = await subject();
      sb = s.sandbox;
      beyond = s.beyondLocal;
      rel = `contract-${randomBytes(4).toString('hex')}`;
      root = sb.resolvePath(rel);
      await sb.mkdir(root);
    });
    after(async () => {
      await sb?.rm(root, { recursive: true, force: true }).catch(() => {});
    });
    const p = (s: string) => `${root}/${s}`;

    describe('files', () => {
      it('round-trips all 256 byte values', async () => {
        const all = Uint8Array.from({ length: 256 }, (_, i) => i);
        await sb.writeFile(p('bytes.bin'), all);
        assert.deepEqual(Buffer.from(await sb.readFileBuffer(p('bytes.bin'))), Buffer.from(all));
      });
      it('writes and reads empty and 10 MiB files, and text', async () => {
        await sb.writeFile(p('empty'), '');
        assert.equal((await sb.readFileBuffer(p('empty'))).byteLength, 0);
        const big = randomBytes(10 << 20);
        await sb.writeFile(p('big'), big);
        assert.ok(Buffer.from(await sb.readFileBuffer(p('big'))).equals(big), '10 MiB differ');
        assert.equal((await sb.stat(p('big'))).size, 10 << 20);
        await sb.writeFile(`${rel}/text.txt`, 'héllo\n');
        assert.equal(await sb.readFile(p('text.txt')), 'héllo\n');
        await sb.writeFile(p('text.txt'), 'x');
        assert.equal(await sb.readFile(p('text.txt')), 'x', 'writeFile truncates');
      });
      it('fails to read a directory or a missing file', async () => {
        await rejectsWith(sb.readFile(root), /EISDIR/, 'readFile(dir)');
        await rejectsWith(sb.readFileBuffer(p('missing')), /ENOENT/, 'readFileBuffer(missing)');
      });
      it('writeFile creates missing parents (the Sandbox surface)', async () => {
        await sb.writeFile(p('a/b/c.txt'), 'deep');
        assert.equal(await sb.readFile(p('a/b/c.txt')), 'deep');
      });
    });

    describe('stat and links', () => {
      before(async () => {
        const r = await sb.exec(`cd '${root}' && mkdir -p dir && printf 12345 > f && ln -s f link && ln -s nowhere dangling && ln -s dir dirlink`);
        assert.equal(r.exitCode, 0, r.stderr);
      });
      it('describes files, directories and links', async () => {
        const f = await sb.stat(p('f'));
        assert.deepEqual([f.isFile, f.isDirectory, f.isSymbolicLink, f.size], [true, false, false, 5]);
        assert.ok(f.mtime instanceof Date && Math.abs(f.mtime.getTime() - Date.now()) < 600_000, `mtime ${f.mtime}`);
        const d = await sb.stat(p('dir'));
        assert.deepEqual([d.isFile, d.isDirectory, d.isSymbolicLink], [false, true, false]);
        const l = await sb.stat(p('link'));
        assert.deepEqual([l.isFile, l.isSymbolicLink, l.size], [true, true, 5]);
        await rejectsWith(sb.stat(p('dangling')), /ENOENT/, 'stat(dangling)');
        await rejectsWith(sb.stat(p('missing')), /ENOENT/, 'stat(missing)');
      });
      it('exists never throws', async () => {
        assert.equal(await sb.exists(p('f')), true);
        assert.equal(await sb.exists(p('dir')), true);
        assert.equal(await sb.exists(p('missing')), false);
        assert.equal(await sb.exists(p('dangling')), false);
      });
      it('exists is false where nothing can be: below a file, a name too long, a NUL byte', async () => {
        assert.equal(await sb.exists(p('f/under-a-file')), false, 'ENOTDIR');
        assert.equal(await sb.exists(p('n'.repeat(256))), false, 'ENAMETOOLONG');
        assert.equal(await sb.exists(p('nul\0byte')), false, 'EINVAL');
      });
    });

    it('readdir lists names: dotfiles, spaces, newlines, unicode', async () => {
      await sb.mkdir(p('names'));
      const names = ['.dot', 'with space', 'new\nline', 'ünïcødé', '日本'];
      for (const n of names) await sb.writeFile(p(`names/${n}`), n);
      await sb.mkdir(p('names/sub'));
      assert.deepEqual((await sb.readdir(p('names'))).sort(), [...names, 'sub'].sort());
      await rejectsWith(sb.readdir(p('missing')), /ENOENT/, 'readdir(missing)');
      await rejectsWith(sb.readdir(p('names/.dot')), /ENOTDIR/, 'readdir(file)');
    });

    it('mkdir matrix', async () => {
      await sb.mkdir(p('m'));
      await rejectsWith(sb.mkdir(p('m')), /EEXIST/, 'mkdir(existing)');
      await rejectsWith(sb.mkdir(p('x/y')), /ENOENT/, 'mkdir(missing parent)');
      await sb.mkdir(p('x/y'), { recursive: true });
      await sb.mkdir(p('x/y'), { recursive: true });
      assert.equal((await sb.stat(p('x/y'))).isDirectory, true);
      await sb.writeFile(p('file'), 'f');
      await rejectsWith(sb.mkdir(p('file')), /EEXIST/, 'mkdir(file)');
      await rejectsWith(sb.mkdir(p('file'), { recursive: true }), /EEXIST/, 'mkdir -p (file)');
    });

    it('rm matrix', async () => {
      await rejectsWith(sb.rm(p('missing')), /ENOENT/, 'rm(missing)');
      await sb.rm(p('missing'), { force: true });
      await sb.mkdir(p('r/s'), { recursive: true });
      await sb.writeFile(p('r/s/f'), 'f');
      await rejectsWith(sb.rm(p('r')), /EISDIR/, 'rm(dir)');
      await rejectsWith(sb.rm(p('r'), { force: true }), /EISDIR/, 'rm(dir, force)');
      await sb.writeFile(p('keep/k'), 'k');
      const r = await sb.exec(`ln -s '${p('keep')}' '${p('keeplink')}'`);
      assert.equal(r.exitCode, 0, r.stderr);
      await sb.rm(p('keeplink'), { recursive: true });
      assert.equal(await sb.readFile(p('keep/k')), 'k', 'rm followed a symlink');
      await sb.rm(p('r'), { recursive: true });
      assert.equal(await sb.exists(p('r')), false);
      await sb.rm(p('keep/k'));
      assert.equal(await sb.exists(p('keep/k')), false);
    });

    describe('exec', () => {
      it('resolves non-zero exits, keeps stdout and stderr apart', async () => {
        const r = await sb.exec('echo out; echo err >&2; exit 3');
        assert.deepEqual(r, { stdout: 'out\n', stderr: 'err\n', exitCode: 3 });
        assert.equal((await sb.exec('true')).exitCode, 0);
      });
      it('runs in the default, an absolute and a relative cwd', async () => {
        assert.equal((await sb.exec('pwd')).stdout.trim(), sb.cwd);
        assert.equal((await sb.exec('pwd', { cwd: root })).stdout.trim(), root);
        await sb.mkdir(p('cwd'));
        assert.equal((await sb.exec('pwd', { cwd: `${rel}/cwd` })).stdout.trim(), p('cwd'));
      });
      it('layers env over the sandbox environment', async () => {
        const r = await sb.exec('echo "$FOO|$BAR"; command -v sh >/dev/null && echo path-ok; [ -n "$HOME" ] && echo home-ok', { env: { FOO: 'foo', BAR: 'a b' } });
        assert.equal(r.stdout, 'foo|a b\npath-ok\nhome-ok\n');
        assert.equal((await sb.exec('echo "${FOO:-unset}"')).stdout, 'unset\n', 'env leaked into the next call');
      });
      it('gives 124 at timeoutMs and kills what the command started', async () => {
        const marker = p('timeout-marker');
        const start = Date.now();
        const r = await sb.exec(`(sleep 2; touch '${marker}') & sleep 30`, { timeoutMs: 500 });
        assert.equal(r.exitCode, 124, JSON.stringify(r));
        assert.ok(Date.now() - start < 4000, `answered after ${Date.now() - start} ms`);
        await sleep(3000);
        assert.equal(await sb.exists(marker), false, 'a backgrounded grandchild wrote its marker');
      });
      it('rejects a mid-flight abort quickly and the process dies', async () => {
        const marker = p('abort-marker');
        const ac = new AbortController();
        const start = Date.now();
        const run = sb.exec(`sleep 2; touch '${marker}'`, { signal: ac.signal });
        setTimeout(() => ac.abort(), 300);
        await assert.rejects(run);
        assert.ok(Date.now() - start < 1300, `abort answered after ${Date.now() - start} ms`);
        await sleep(3000);
        assert.equal(await sb.exists(marker), false, 'the aborted command kept running');
      });
      it('never runs with a pre-aborted signal', async () => {
        const marker = p('pre-aborted');
        const ac = new AbortController();
        ac.abort();
        await assert.rejects(sb.exec(`touch '${marker}'`, { signal: ac.signal }));
        await sleep(500);
        assert.equal(await sb.exists(marker), false);
      });
      it('keeps 5 MiB of output intact', async () => {
        const r = await sb.exec("head -c 5242880 /dev/zero | tr '\\0' a; echo; echo done >&2");
        assert.equal(r.stdout.length, (5 << 20) + 1);
        assert.ok(/^a+\n$/.test(r.stdout), 'output corrupted');
        assert.equal(r.stderr, 'done\n');
      });
    });

    // Where local() falls short, each check asserts what local() does
    // instead (measured with Flue 2.1.0), so every check runs on every
    // subject and none is counted as skipped or passing unrun.
    describe('beyond local()', () => {
      it('reports 124 even when the command traps SIGTERM, with a note on stderr', async () => {
        const r = await sb.exec("trap 'exit 0' TERM; sleep 30 & wait", { timeoutMs: 500 });
        if (!beyond) {
          assert.equal(r.exitCode, 0, `local() reports the trap handler's status: ${JSON.stringify(r)}`);
          return;
        }
        assert.equal(r.exitCode, 124, JSON.stringify(r));
        assert.match(r.stderr, /timed out/);
      });
      it('is not delayed by a child that left the process group', async () => {
        const start = Date.now();
        if (!beyond) {
          const r = await sb.exec('set -m; sleep 3 & echo started');
          assert.equal(r.stdout, 'started\n');
          assert.ok(Date.now() - start >= 2500, `local() waits for the stray child to close its output; answered after ${Date.now() - start} ms`);
          return;
        }
        const r = await sb.exec('set -m; sleep 8 & echo started');
        assert.equal(r.stdout, 'started\n');
        assert.ok(Date.now() - start < 3000, `answered after ${Date.now() - start} ms`);
        const marker = p('stray-marker');
        const t2 = Date.now();
        const r2 = await sb.exec(`set -m; (sleep 2; touch '${marker}') & sleep 30`, { timeoutMs: 500 });
        assert.equal(r2.exitCode, 124);
        assert.ok(Date.now() - t2 < 3000, `timeout answered after ${Date.now() - t2} ms`);
        await sleep(3000);
        assert.equal(await sb.exists(marker), false, 'a process that left the group survived the timeout');
      });
      it('marks a cut output: the prefix, a note on stderr naming the cap, truncated set', async () => {
        // 80 MiB: past local()'s cap (64 Mi characters of stdout and
        // stderr together) and the daemon's (16 MiB per stream).
        const printed = 80 << 20;
        const r = await sb.exec(`head -c ${printed} /dev/zero | tr '\\0' a; echo done >&2`);
        assert.ok(r.stdout.length > 0 && r.stdout.length < printed && /^a+$/.test(r.stdout), `stdout is not a prefix: ${r.stdout.length} characters`);
        const cap = /exceeded (\d+) bytes/.exec(r.stderr);
        assert.ok(cap, `no note naming the cap at the end of stderr: ${JSON.stringify(r.stderr.slice(-300))}`);
        const truncated = (r as { truncated?: unknown }).truncated;
        if (!beyond) {
          // local() kills the command at its cap and says so, with no flag.
          assert.equal(r.exitCode, 1, `local() reports the killed command as 1: ${r.exitCode}`);
          assert.equal(truncated, undefined);
          return;
        }
        assert.equal(truncated, true, 'truncated is not set');
        assert.equal(r.stdout.length, Number(cap[1]), 'the prefix is not the cap named in the note');
        assert.equal(r.exitCode, 0, 'the command\'s own exit status');
        assert.match(r.stderr, /^done\n\n\[aileron\] output truncated: stdout exceeded \d+ bytes .*\n$/);
      });
      it('an abort kills a command that ignores SIGTERM', async () => {
        const marker = p('ignore-term');
        const ac = new AbortController();
        const start = Date.now();
        const run = sb.exec(`trap '' TERM; sleep 4; touch '${marker}'`, { signal: ac.signal });
        setTimeout(() => ac.abort(), 300);
        await assert.rejects(run);
        // local() escalates to SIGKILL only after a grace period (~2 s).
        const within = beyond ? 1300 : 3500;
        assert.ok(Date.now() - start < within, `abort answered after ${Date.now() - start} ms, want < ${within}`);
        await sleep(5000);
        assert.equal(await sb.exists(marker), false, 'SIGKILL did not follow the ignored SIGTERM');
      });
    });
  });
}
