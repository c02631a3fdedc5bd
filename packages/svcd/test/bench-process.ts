// A bench (bench/<name>/run.ts) run with --smoke as a child process of a test, so that the
// benches do not rot between the runs that measure (bench-smoke.test.ts, bench-soak.test.ts).
// The bench runs on the built bin/svcd (SVC_BIN_DIR, inherited, as the other process tests find
// it) and the real engine; it exits nonzero when its run did not work, and missed speed targets
// are the full run's to report, not the test's.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { resolve } from 'node:path';
import type { TestContext } from 'node:test';

const ROOT = resolve(import.meta.dirname, '../../..');

/** Runs `bench/<bench>/run.ts --smoke` from the repository root; asserts exit 0 and the smoke line. */
export async function runSmokeBench(t: TestContext, bench: string): Promise<void> {
  const child = spawn(process.execPath, ['--import', 'tsx', `bench/${bench}/run.ts`, '--smoke'], {
    cwd: ROOT,
    env: process.env,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  // A test that times out leaves no bench behind: SIGTERM makes it stop its svcd (and, bench/soak,
  // clean up its containers) and exit.
  t.signal.addEventListener('abort', () => child.kill('SIGTERM'));
  let output = '';
  child.stdout.on('data', (b: Buffer) => (output += b.toString()));
  child.stderr.on('data', (b: Buffer) => (output += b.toString()));
  const code = await new Promise<number | null>((res) => child.on('exit', (c) => res(c)));
  assert.equal(code, 0, `bench/${bench} --smoke exited with ${code}:\n${output.slice(-6000)}`);
  assert.match(output, /smoke: the run worked/);
}
