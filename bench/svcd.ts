// Starts the built svcd (bin/svcd) as a child process for a benchmark and waits until it listens.
import { spawn, type ChildProcess } from 'node:child_process';
import { constants } from 'node:os';
import { resolve } from 'node:path';
import { BIN, exited, listening } from '../packages/svcd/test/svcd-process.js';

export const ROOT = resolve(import.meta.dirname, '..');

export const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? NaN;

/**
 * The svcd processes started here and still running. They do not outlive the bench: its exit
 * stops them. A bench stopped by a signal (the smoke test that timed out sends SIGTERM:
 * packages/svcd/test/bench-process.ts) exits through that too, unless it handles the signal itself
 * (bench/soak, which cleans up and exits on its own).
 */
const running = new Set<ChildProcess>();
process.on('exit', () => {
  for (const proc of running) proc.kill('SIGTERM');
});
function exitOnSignals(): void {
  for (const signal of ['SIGINT', 'SIGTERM'] as const) {
    if (process.listenerCount(signal) === 0) process.once(signal, () => process.exit(128 + constants.signals[signal]));
  }
}

export interface SpawnedSvcd {
  proc: ChildProcess;
  stop(): Promise<void>;
}

/** `pinToCore` runs svcd under taskset on that core (the load generator gets the other one). */
/** `env`: added to this process's environment for svcd (SVC_ADMIN_TOKEN, for one). */
export async function spawnSvcd(givenArgs: string[], pinToCore?: number, env: Record<string, string> = {}): Promise<SpawnedSvcd> {
  // svcd's default metrics address is one fixed port: a bench with two svcd (bench/env), or one
  // beside another svcd on the machine, would fail to start the second. Benches that read the
  // metrics (bench/soak) name a free port themselves.
  const args = givenArgs.includes('--metrics-listen') ? givenArgs : [...givenArgs, '--metrics-listen', 'off'];
  const options = { stdio: ['ignore', 'pipe', 'inherit'] as ['ignore', 'pipe', 'inherit'], env: { ...process.env, ...env } };
  const proc = pinToCore === undefined ? spawn(BIN, args, options) : spawn('taskset', ['-c', String(pinToCore), BIN, ...args], options);
  running.add(proc);
  proc.on('exit', () => running.delete(proc));
  exitOnSignals();
  await listening(proc);
  return {
    proc,
    stop: async () => {
      if (proc.exitCode !== null) return;
      proc.kill('SIGTERM');
      await exited(proc);
    },
  };
}
