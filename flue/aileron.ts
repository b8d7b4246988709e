// Flue sandbox connector for aileron-proxy's long-lived sandboxes.
//
// A Flue agent's shell commands and file operations run in a sandbox started
// with `aileron-proxy sandbox up --json`: a locked-down Docker or Podman
// container whose only way out is aileron-proxy, so the agent gets credential
// injection, policy, approvals and audit. This file is the whole connector; it
// speaks the daemon's exec/files API (docs/api.md, "Long-lived sandboxes").
import * as http from 'node:http';
import * as https from 'node:https';
import { SandboxDiedError, sandboxFromDriver } from '@flue/runtime';
import type { FileStat, Sandbox, SandboxDriver, SandboxFactory, ShellResult } from '@flue/runtime';

/** What `aileron-proxy sandbox up --json` printed. */
export interface AileronOptions {
  /** The daemon's API base URL, without /v1 (`api_url`). */
  apiUrl: string;
  /** The sandbox's control token (`token`). */
  token: string;
  /** The sandbox's ID (`id`). */
  sandboxId: string;
}

/** An error of the sandbox's file system, shaped like Node's fs errors. */
export class AileronFsError extends Error {
  readonly code: string;
  readonly path: string;
  readonly status: number;
  constructor(code: string, message: string, path: string, status: number) {
    super(message);
    this.name = 'AileronFsError';
    this.code = code;
    this.path = path;
    this.status = status;
  }
}

interface Reply {
  status: number;
  body: Buffer;
}

/** The file errors of stat that mean no file can be at the path. */
const NOT_THERE = new Set(['ENOENT', 'ENOTDIR', 'ENAMETOOLONG', 'EINVAL']);

/**
 * exec's result: Flue's ShellResult, plus `truncated: true` when the
 * daemon's cap (16 MiB per stream) cut stdout or stderr; stderr then ends
 * with a note naming the cap.
 */
export interface AileronShellResult extends ShellResult {
  truncated?: true;
}

interface ErrorBody {
  error?: { code?: string; message?: string; path?: string };
}

/** The SandboxDriver over one sandbox's exec/files API. */
class AileronDriver implements SandboxDriver {
  private readonly base: URL;
  private readonly token: string;

  constructor(opts: AileronOptions) {
    if (!opts.apiUrl || !opts.token || !opts.sandboxId) {
      throw new TypeError('aileron(): apiUrl, token and sandboxId are required (the api_url, token and id printed by `aileron-proxy sandbox up --json`)');
    }
    this.base = new URL(`${opts.apiUrl.replace(/\/+$/, '')}/v1/sandboxes/${encodeURIComponent(opts.sandboxId)}/`);
    this.token = opts.token;
  }

  /** Sends one request; node:http, so no client-side timeout cuts a long command. */
  private request(method: string, path: string, body?: Uint8Array | string, signal?: AbortSignal): Promise<Reply> {
    const url = new URL(path, this.base);
    const mod = url.protocol === 'https:' ? https : http;
    const headers: Record<string, string> = { Authorization: `Bearer ${this.token}` };
    if (typeof body === 'string') headers['Content-Type'] = 'application/json';
    else if (body) headers['Content-Type'] = 'application/octet-stream';
    if (body !== undefined) headers['Content-Length'] = String(Buffer.byteLength(body));
    return new Promise((resolve, reject) => {
      // A proxy from the environment must not see the control token.
      const req = mod.request(url, { method, headers, signal, agent: false }, (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks) }));
        res.on('error', reject);
      });
      req.on('error', reject);
      req.end(body);
    });
  }

  /** Returns the reply, or throws its error: SandboxDiedError on 410. */
  private async call(operation: string, method: string, path: string, body?: Uint8Array | string, signal?: AbortSignal): Promise<Reply> {
    const reply = await this.request(method, path, body, signal);
    if (reply.status < 400) return reply;
    let e: ErrorBody['error'] = {};
    try {
      e = (JSON.parse(reply.body.toString('utf8')) as ErrorBody).error ?? {};
    } catch {
      // Not the daemon's JSON: keep the status.
    }
    if (reply.status === 410) throw new SandboxDiedError({ operation, reason: 'stopped' });
    const code = e.code ?? `HTTP_${reply.status}`;
    throw new AileronFsError(code, `${operation}: ${e.message ?? `HTTP ${reply.status}`}`, e.path ?? '', reply.status);
  }

  private async fs<T>(verb: string, args: { path: string; recursive?: boolean; force?: boolean }): Promise<T> {
    const reply = await this.call(verb, 'POST', `fs/${verb}`, JSON.stringify(args));
    return JSON.parse(reply.body.toString('utf8')) as T;
  }

  async readFile(path: string): Promise<string> {
    return Buffer.from(await this.readFileBuffer(path)).toString('utf8');
  }

  async readFileBuffer(path: string): Promise<Uint8Array> {
    const reply = await this.call('readFile', 'GET', `files?path=${encodeURIComponent(path)}`);
    return new Uint8Array(reply.body.buffer, reply.body.byteOffset, reply.body.byteLength);
  }

  async writeFile(path: string, content: string | Uint8Array): Promise<void> {
    const body = typeof content === 'string' ? Buffer.from(content, 'utf8') : content;
    await this.call('writeFile', 'PUT', `files?path=${encodeURIComponent(path)}`, body);
  }

  async stat(path: string): Promise<FileStat> {
    const s = await this.fs<{ isFile: boolean; isDirectory: boolean; isSymbolicLink: boolean; size: number; mtimeMs: number }>('stat', { path });
    return { isFile: s.isFile, isDirectory: s.isDirectory, isSymbolicLink: s.isSymbolicLink, size: s.size, mtime: new Date(s.mtimeMs) };
  }

  async readdir(path: string): Promise<string[]> {
    return (await this.fs<{ names: string[] }>('readdir', { path })).names;
  }

  /**
   * False when stat says nothing can be there: ENOENT, ENOTDIR (below a
   * file), ENAMETOOLONG, EINVAL (a NUL byte). Errors that say nothing about
   * the path, such as a dead sandbox, a refused token or an unreachable
   * daemon, reject.
   */
  async exists(path: string): Promise<boolean> {
    try {
      await this.fs('stat', { path });
      return true;
    } catch (e) {
      if (e instanceof AileronFsError && NOT_THERE.has(e.code)) return false;
      throw e;
    }
  }

  async mkdir(path: string, options?: { recursive?: boolean }): Promise<void> {
    await this.fs('mkdir', { path, recursive: options?.recursive ?? false });
  }

  async rm(path: string, options?: { recursive?: boolean; force?: boolean }): Promise<void> {
    await this.fs('rm', { path, recursive: options?.recursive ?? false, force: options?.force ?? false });
  }

  async exec(command: string, options?: { cwd?: string; env?: Record<string, string>; timeoutMs?: number; signal?: AbortSignal }): Promise<AileronShellResult> {
    const body = JSON.stringify({ command, cwd: options?.cwd, env: options?.env, timeoutMs: options?.timeoutMs });
    // Aborting closes the request; the daemon then kills the command's processes.
    const reply = await this.call('exec', 'POST', 'exec', body, options?.signal);
    const r = JSON.parse(reply.body.toString('utf8')) as ShellResult & { truncated?: boolean };
    const out: AileronShellResult = { stdout: r.stdout, stderr: r.stderr, exitCode: r.exitCode };
    if (r.truncated) out.truncated = true;
    return out;
  }

  /** GET / : the sandbox's workdir. */
  async workdir(): Promise<string> {
    const reply = await this.call('info', 'GET', '');
    return (JSON.parse(reply.body.toString('utf8')) as { workdir: string }).workdir;
  }
}

/**
 * Flue's sandbox factory for an aileron-proxy sandbox:
 * `useSandbox(aileron({ apiUrl, token, sandboxId }))`. The sandbox's working
 * directory is its workdir (the project). The connector does not manage the
 * sandbox's lifetime: `aileron-proxy sandbox down ID` does.
 */
export function aileron(options: AileronOptions): SandboxFactory {
  const driver = new AileronDriver(options);
  const create = async (): Promise<Sandbox> => sandboxFromDriver(driver, await driver.workdir());
  // createSessionEnv keeps runtimes older than createSandbox working.
  return { createSandbox: create, createSessionEnv: create };
}
