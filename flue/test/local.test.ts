// The contract suite on Flue's own local() sandbox: it proves the suite.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after } from 'node:test';
import { local } from '@flue/runtime/node';
import { contract } from './contract.ts';

const dir = mkdtempSync(join(tmpdir(), 'flue-local-'));
after(() => rmSync(dir, { recursive: true, force: true }));

contract('local()', async () => ({
  sandbox: await local({ cwd: dir }).createSandbox({ id: 'contract' }),
  beyondLocal: false,
}));
