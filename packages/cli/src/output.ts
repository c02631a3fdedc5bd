// How svc answers: tables for people, JSON with --json for scripts, the API's {error} message on
// stderr with exit code 1. Progress of long operations goes to stderr, so stdout stays data.
import { InvalidArgumentError } from 'commander';
import { ApiError } from '@svc/client';

export interface Output {
  /** --json was given. */
  json(): boolean;
  print(value: unknown): void;
  /** A line for people on stderr (progress, confirmations); never part of the data. */
  note(text: string): void;
}

export function output(isJson: () => boolean): Output {
  return {
    json: isJson,
    print(value) {
      const json = isJson();
      if (json || typeof value !== 'object' || value === null) {
        process.stdout.write(`${typeof value === 'string' && !json ? value : JSON.stringify(value, null, json ? 2 : undefined)}\n`);
        return;
      }
      process.stdout.write(table(Array.isArray(value) ? (value as Record<string, unknown>[]) : [value as Record<string, unknown>]));
    },
    note(text) {
      process.stderr.write(`${text}\n`);
    },
  };
}

/** Rows as aligned columns under upper-case headers; objects inside cells as JSON. */
export function table(rows: Record<string, unknown>[]): string {
  if (rows.length === 0) return '(none)\n';
  const cols = [...new Set(rows.flatMap((r) => Object.keys(r)))];
  // eslint-disable-next-line @typescript-eslint/no-base-to-string -- objects went to JSON.stringify: String() gets no object (the type there is still `{}`)
  const cell = (v: unknown) => (v === null || v === undefined ? '-' : typeof v === 'object' ? JSON.stringify(v) : String(v));
  const widths = cols.map((c) => Math.max(c.length, ...rows.map((r) => cell(r[c]).length)));
  const line = (vals: string[]) => vals.map((v, i) => v.padEnd(widths[i] ?? 0)).join('  ').trimEnd();
  return [line(cols.map((c) => c.toUpperCase())), ...rows.map((r) => line(cols.map((c) => cell(r[c]))))].join('\n') + '\n';
}

/** Thrown by commands for a failure that is not an API error (a failed deploy with --wait). */
export class CommandFailed extends Error {
  constructor(
    message: string,
    readonly exitCode = 1,
  ) {
    super(message);
  }
}

/**
 * Wraps a command's action: what it returns is printed; errors become `svc: <message>` and a
 * non-zero exit (the API's message and status for API errors).
 */
export function action<A extends unknown[]>(out: Output, fn: (...args: A) => Promise<unknown>) {
  return async (...args: A) => {
    try {
      const value = await fn(...args);
      if (value !== undefined) out.print(value);
    } catch (err) {
      if (err instanceof ApiError) process.stderr.write(`svc: ${err.message} (HTTP ${err.status})\n`);
      else process.stderr.write(`svc: ${(err as Error).message}\n`);
      process.exitCode = err instanceof CommandFailed ? err.exitCode : 1;
    }
  };
}

/**
 * Polls `get` until `settled` says so, telling each new status on stderr, and resolves when it
 * settled as `success`; any other outcome fails the command with its last_error. Gives up after
 * `timeoutMs` (the operation goes on on the server).
 */
export async function waitUntil<T extends { status: string; last_error: string | null }>(
  out: Output,
  what: string,
  get: () => Promise<T>,
  settled: (v: T) => boolean,
  success: string,
  timeoutMs: number,
): Promise<T> {
  const until = Date.now() + timeoutMs;
  let last = '';
  for (;;) {
    const v = await get();
    if (v.status !== last) {
      out.note(`${what}: ${v.status}`);
      last = v.status;
    }
    if (settled(v)) {
      if (v.status !== success) throw new CommandFailed(`${what} ${v.status}${v.last_error ? `: ${v.last_error}` : ''}`);
      return v;
    }
    if (Date.now() > until) throw new CommandFailed(`${what} still ${v.status} after ${Math.round(timeoutMs / 1000)} s (it goes on; check again later)`);
    await new Promise((r) => setTimeout(r, 1000));
  }
}

/** Copies a response stream to stdout as it comes. */
export async function pipeToStdout(stream: ReadableStream<Uint8Array>): Promise<void> {
  for await (const chunk of stream as unknown as AsyncIterable<Uint8Array>) process.stdout.write(chunk);
}

/** KEY=VALUE arguments as an object; a malformed one is refused before anything is sent. */
export function keyValues(pairs: string[]): Record<string, string> {
  const out: Record<string, string> = {};
  for (const p of pairs) {
    const i = p.indexOf('=');
    if (i <= 0) throw new CommandFailed(`expected KEY=VALUE, got ${JSON.stringify(p)}`, 2);
    out[p.slice(0, i)] = p.slice(i + 1);
  }
  return out;
}

/** A whole number option, refused when it is not one. */
export function integer(value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n)) throw new InvalidArgumentError('not a whole number');
  return n;
}
