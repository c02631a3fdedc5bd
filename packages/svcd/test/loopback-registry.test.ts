// The loopback registry that the examples' base images and the tests' images share
// (examples/loopback-registry.ts): started once, found again by the mark it answers with, and
// another registry on its address named rather than used (the swarm lab serves the storage its config names).
// Each case uses an address and a folder of its own, not the machine's registry.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { ensureLoopbackRegistry, LOOPBACK_REGISTRY } from '../../../examples/loopback-registry.js';
import { EXAMPLES_REGISTRY } from '../../../examples/base-images.js';
import { freePort } from './harness.js';
import { TEST_REGISTRY } from './images.js';

test("the examples' images and the tests' are in one registry", () => {
  assert.equal(EXAMPLES_REGISTRY, LOOPBACK_REGISTRY);
  assert.equal(TEST_REGISTRY, LOOPBACK_REGISTRY);
});

test('started when none answers, then found again by the mark it answers with', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'svc-loopback-registry-'));
  const place = { address: `127.0.0.1:${String(await freePort())}`, dir };
  const said: string[] = [];
  try {
    await ensureLoopbackRegistry((l) => said.push(l), place);
    assert.equal(said.length, 1, 'it says it started one');
    const answer = await fetch(`http://${place.address}/v2/`);
    assert.equal(answer.status, 200);
    assert.equal(answer.headers.get('x-svc-loopback-registry'), dir, 'it answers with its mark');
    // Again: the registry that answers is this one: nothing new started.
    await ensureLoopbackRegistry((l) => said.push(l), place);
    assert.equal(said.length, 1);
  } finally {
    // The registry outlives its starter by design: this one goes with its test.
    try {
      execFileSync('pkill', ['-f', `docker-registry serve ${join(dir, 'config.yml')}`]);
    } catch {
      // none left
    }
    rmSync(dir, { recursive: true, force: true });
  }
});

test('another registry on the address (an older svc\'s, with its own storage) is named, not used', async () => {
  const other = createServer((_req, res) => res.end('{}'));
  await new Promise<void>((r) => other.listen(0, '127.0.0.1', r));
  const address = `127.0.0.1:${String((other.address() as { port: number }).port)}`;
  const dir = mkdtempSync(join(tmpdir(), 'svc-loopback-registry-'));
  try {
    assert.equal((await fetch(`http://${address}/v2/`)).status, 200, 'the other registry answers');
    // Even with a config of svc's in the folder (left by an earlier run): the answer is not svc's registry's.
    writeFileSync(join(dir, 'config.yml'), 'version: 0.1\n');
    await assert.rejects(ensureLoopbackRegistry(() => {}, { address, dir }), /a registry answers on 127\.0\.0\.1:\d+ that is not svc's loopback registry .*ss -ltnp 'sport = :\d+'/);
  } finally {
    await new Promise((r) => other.close(r));
    rmSync(dir, { recursive: true, force: true });
  }
});
