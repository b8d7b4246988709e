// The contract suite on aileron(...) over a real `serve` + `sandbox up`, on
// Docker and Podman. The Go test integration/flue_test.go starts them and
// passes each sandbox in AILERON_FLUE_SANDBOXES (a JSON list); run alone,
// this file skips.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { describe, it } from 'node:test';
import { SandboxDiedError } from '@flue/runtime';
import { aileron } from '../aileron.ts';
import { contract } from './contract.ts';

interface Target {
  runtime: string;
  apiUrl: string;
  token: string;
  sandboxId: string;
  /** A host service the sandbox must not reach (http URL via the gateway is built inside). */
  hostServicePort: string;
  /** argv prefix of `aileron-proxy --home HOME`, to run `sandbox down`. */
  cli: string[];
}

const raw = process.env.AILERON_FLUE_SANDBOXES;
const targets: Target[] = raw ? (JSON.parse(raw) as Target[]) : [];
if (targets.length === 0) {
  it('aileron(...) contract', (t) => t.skip('AILERON_FLUE_SANDBOXES is unset: run through `go test ./integration -run TestFlueConnector`'));
}

for (const target of targets) {
  const opts = { apiUrl: target.apiUrl, token: target.token, sandboxId: target.sandboxId };
  contract(`aileron() on ${target.runtime}`, async () => ({
    sandbox: await aileron(opts).createSandbox({ id: 'contract' }),
    beyondLocal: true,
  }));

  describe(`aileron() on ${target.runtime}: the lock and the end`, () => {
    it('an exec\'d curl to an allowed operation gets the injected credential; a host service is refused', async () => {
      const sb = await aileron(opts).createSandbox({ id: 'lock' });
      const ok = await sb.exec('curl -sS --max-time 30 https://api.example.test/v1/items');
      assert.match(ok.stdout, /"items":\[\{"id":"1"\}\]/, JSON.stringify(ok));
      const host = await sb.exec(`gw=\${AILERON_API_URL#http://}; gw=\${gw%%:*}; curl -sS --noproxy '*' --connect-timeout 5 --max-time 8 "http://$gw:${target.hostServicePort}/"`);
      assert.notEqual(host.exitCode, 0, JSON.stringify(host));
      assert.doesNotMatch(host.stdout, /host-service-reached/);
    });
    it('rejects with SandboxDiedError after `sandbox down`', async () => {
      const sb = await aileron(opts).createSandbox({ id: 'died' });
      const inflight = sb.exec('sleep 60').then(() => null, (e: unknown) => e);
      await new Promise((r) => setTimeout(r, 1000));
      const [bin, ...args] = target.cli;
      execFileSync(bin!, [...args, 'sandbox', 'down', target.sandboxId], { stdio: 'pipe' });
      assert.ok((await inflight) instanceof SandboxDiedError, 'the in-flight exec did not reject with SandboxDiedError');
      await assert.rejects(sb.exec('true'), SandboxDiedError);
      await assert.rejects(sb.readFile('x'), SandboxDiedError);
    });
  });
}
