// The built launcher bin/svcd as a child process, for the tests that kill it or check its start-up.
import { spawn, type ChildProcess } from 'node:child_process';
import { join, resolve } from 'node:path';
import { freePort } from './harness.js';

export const BIN = join(process.env.SVC_BIN_DIR ?? resolve(import.meta.dirname, '../../../bin'), 'svcd');

/** Starts bin/svcd on a free loopback port and waits until it listens. */
export async function startSvcdProcess(args: string[], env: Record<string, string> = {}): Promise<{ proc: ChildProcess; url: string }> {
  const port = await freePort();
  const proc = spawn(BIN, [...args, '--listen', `127.0.0.1:${port}`, '--log-level', 'warn'], {
    env: { PATH: process.env.PATH, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  await listening(proc);
  return { proc, url: `http://127.0.0.1:${port}` };
}

/** Resolves when a starting svcd prints that it listens; rejects if it exits first. */
export function listening(proc: ChildProcess): Promise<void> {
  return new Promise<void>((res, rej) => {
    let out = '';
    proc.stdout!.on('data', (b: Buffer) => {
      out += b.toString();
      if (out.includes('svcd listening on')) res();
    });
    proc.on('exit', (code) => rej(new Error(`svcd exited with ${code} before listening`)));
  });
}

export function exited(proc: ChildProcess): Promise<number | null> {
  return new Promise((res) => (proc.exitCode !== null ? res(proc.exitCode) : proc.on('exit', (code) => res(code))));
}
