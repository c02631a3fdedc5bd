// The soak benchmark (bench/soak/run.ts) in its smoke mode, so that it does not rot between the
// runs that measure: phases of 20 s, 5 well-behaved tenants and the misbehaving one, on the built
// bin/svcd (SVC_BIN_DIR, as the other process tests find it). It exits nonzero when the run did
// not work (no answers, no RSS samples, the misbehaving tenant idle) or broke; missed targets
// are the full run's to report, not this test's.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { resolve } from 'node:path';
import { test } from 'node:test';

const ROOT = resolve(import.meta.dirname, '../../..');

test('bench/soak --smoke runs to the end against bin/svcd and exits 0', { timeout: 280_000 }, async (t) => {
  const child = spawn(process.execPath, ['--import', 'tsx', 'bench/soak/run.ts', '--smoke'], {
    cwd: ROOT,
    env: process.env,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  // A test that times out leaves no bench behind: SIGTERM makes it clean up (svcd, containers) and exit.
  t.signal.addEventListener('abort', () => child.kill('SIGTERM'));
  let output = '';
  child.stdout.on('data', (b: Buffer) => (output += b.toString()));
  child.stderr.on('data', (b: Buffer) => (output += b.toString()));
  const code = await new Promise<number | null>((res) => child.on('exit', (c) => res(c)));
  assert.equal(code, 0, `bench/soak --smoke exited with ${code}:\n${output.slice(-6000)}`);
  assert.match(output, /smoke: the run worked/);
});
