// Starts the built svcd (bin/svcd) as a child process for a benchmark and waits until it listens.
import { spawn, type ChildProcess } from 'node:child_process';
import { join, resolve } from 'node:path';

export const ROOT = resolve(import.meta.dirname, '..');

export const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? NaN;

export interface SpawnedSvcd {
  proc: ChildProcess;
  stop(): Promise<void>;
}

/** `pinToCore` runs svcd under taskset on that core (the load generator gets the other one). */
export async function spawnSvcd(args: string[], pinToCore?: number): Promise<SpawnedSvcd> {
  const bin = join(ROOT, 'bin/svcd');
  const proc = pinToCore === undefined
    ? spawn(bin, args, { stdio: ['ignore', 'pipe', 'inherit'] })
    : spawn('taskset', ['-c', String(pinToCore), bin, ...args], { stdio: ['ignore', 'pipe', 'inherit'] });
  await new Promise<void>((res, rej) => {
    proc.stdout!.on('data', (b: Buffer) => b.toString().includes('svcd listening') && res());
    proc.on('exit', (code) => rej(new Error(`svcd exited ${code}`)));
  });
  return {
    proc,
    stop: async () => {
      if (proc.exitCode !== null) return;
      proc.kill('SIGTERM');
      await new Promise((r) => proc.on('exit', r));
    },
  };
}
