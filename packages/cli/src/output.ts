// How svc answers: tables for people, JSON with --json for scripts, the API's {error} message on
// stderr with exit code 1. Progress of long operations goes to stderr, so stdout stays data.
import { InvalidArgumentError } from 'commander';
import { ApiError } from '@svc/client';

export interface Output {
  /** --json was given. */
  json(): boolean;
  /** Tables for people: as a list view says (every field with --wide), or vertical for one object. */
  print(value: unknown, view?: ListView): void;
  /** A line for people on stderr (progress, confirmations); never part of the data. */
  note(text: string): void;
}

/** The columns a list shows people by default; `age` is derived from created_at. */
export interface ListView {
  columns: string[];
}

export interface OutputOptions {
  json: () => boolean;
  wide: () => boolean;
  /** Colours for statuses: only on a terminal, and never with NO_COLOR (no-color.org). */
  color: boolean;
  now?: () => number;
}

export function output(o: OutputOptions): Output {
  return {
    json: o.json,
    print(value, view) {
      const json = o.json();
      if (json || typeof value !== 'object' || value === null) {
        process.stdout.write(`${typeof value === 'string' && !json ? value : JSON.stringify(value, null, json ? 2 : undefined)}\n`);
        return;
      }
      const style: CellStyle = { color: o.color, now: o.now?.() ?? Date.now() };
      process.stdout.write(
        Array.isArray(value) ? table(value as Record<string, unknown>[], o.wide() ? undefined : view, style) : fields(value as Record<string, unknown>, style),
      );
    },
    note(text) {
      process.stderr.write(`${text}\n`);
    },
  };
}

/** Whether stdout gets colours: a terminal, and NO_COLOR unset or empty (no-color.org). */
export function colorWanted(env: NodeJS.ProcessEnv, isTTY: boolean): boolean {
  return isTTY && (env.NO_COLOR === undefined || env.NO_COLOR === '') && env.TERM !== 'dumb';
}

export interface CellStyle {
  color: boolean;
  /** ms, for "3 min ago". */
  now: number;
}

const ANSI = { green: '\u001b[32m', yellow: '\u001b[33m', red: '\u001b[31m', dim: '\u001b[2m', reset: '\u001b[0m' };
const STATUS_COLORS: Record<string, keyof typeof ANSI> = {
  running: 'green',
  succeeded: 'green',
  active: 'green',
  deploying: 'yellow',
  provisioning: 'yellow',
  queued: 'yellow',
  pending: 'yellow',
  creating: 'yellow',
  starting: 'yellow',
  failed: 'red',
  crashed: 'red',
  suspended: 'red',
  stopped: 'dim',
  cancelled: 'dim',
  expired: 'dim',
};

/** Unix seconds as a local date and time, to the minute. */
export function localTime(seconds: number): string {
  const d = new Date(seconds * 1000);
  const two = (n: number) => String(n).padStart(2, '0');
  return `${d.getFullYear()}-${two(d.getMonth() + 1)}-${two(d.getDate())} ${two(d.getHours())}:${two(d.getMinutes())}`;
}

/** How long ago (or how soon) unix seconds are from `nowMs`: "3 min ago", "in 2 h". */
export function relativeTime(seconds: number, nowMs: number): string {
  const diff = Math.round(nowMs / 1000 - seconds);
  const abs = Math.abs(diff);
  if (abs < 10) return 'just now';
  const amount = abs < 60 ? `${abs} s` : abs < 3600 ? `${Math.floor(abs / 60)} min` : abs < 86_400 ? `${Math.floor(abs / 3600)} h` : `${Math.floor(abs / 86_400)} d`;
  return diff > 0 ? `${amount} ago` : `in ${amount}`;
}

/** One value for people: times as dates, usage as used/max, statuses in colour, nested objects as compact JSON. */
export function cell(key: string, v: unknown, style: CellStyle): string {
  if (v === null || v === undefined) return '-';
  if (key.endsWith('_at') && typeof v === 'number') return `${localTime(v)} (${relativeTime(v, style.now)})`;
  if (typeof v === 'object') {
    if (!Array.isArray(v) && 'used' in v && 'max' in v && Object.keys(v).length === 2) return `${String(v.used)}/${String(v.max)}`;
    if (Array.isArray(v) && v.every((x) => typeof x !== 'object' || x === null)) return v.map(String).join(', ') || '-';
    return JSON.stringify(v);
  }
  // eslint-disable-next-line @typescript-eslint/no-base-to-string -- objects were handled above: what is left is a string, number or boolean
  const text = String(v);
  const color = key === 'status' ? STATUS_COLORS[text] : undefined;
  return style.color && color ? `${ANSI[color]}${text}${ANSI.reset}` : text;
}

/** What a column shows of a row: its field, or `age` (created_at, relative). */
function column(row: Record<string, unknown>, col: string, style: CellStyle): string {
  if (col === 'age') return typeof row.created_at === 'number' ? relativeTime(row.created_at, style.now).replace(/ ago$/, '') : '-';
  return cell(col, row[col], style);
}

/** Visible width: colour codes take none. */
const width = (s: string) => s.replace(/\u001b\[[0-9;]*m/g, '').length;

/** Rows as aligned columns under upper-case headers: the view's columns, or every field. */
export function table(rows: Record<string, unknown>[], view: ListView | undefined, style: CellStyle): string {
  if (rows.length === 0) return '(none)\n';
  const cols = view?.columns ?? [...new Set(rows.flatMap((r) => Object.keys(r)))];
  const cells = rows.map((r) => cols.map((c) => column(r, c, style)));
  const widths = cols.map((c, i) => Math.max(c.length, ...cells.map((r) => width(r[i] ?? ''))));
  const line = (vals: string[]) => vals.map((v, i) => v + ' '.repeat(Math.max(0, (widths[i] ?? 0) - width(v)))).join('  ').trimEnd();
  return [line(cols.map((c) => c.toUpperCase())), ...cells.map(line)].join('\n') + '\n';
}

/** One object for people: a field per line. */
export function fields(obj: Record<string, unknown>, style: CellStyle): string {
  const keys = Object.keys(obj);
  if (keys.length === 0) return '(empty)\n';
  const w = Math.max(...keys.map((k) => k.length));
  return keys.map((k) => `${k.padEnd(w)}  ${cell(k, obj[k], style)}`).join('\n') + '\n';
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
 * Wraps a command's action: what it returns is printed (a list as `view` says, for people);
 * errors become `svc: <message>` and a non-zero exit (the API's message and status for API errors).
 */
export function action<A extends unknown[]>(out: Output, fn: (...args: A) => Promise<unknown>, view?: ListView) {
  return async (...args: A) => {
    try {
      const value = await fn(...args);
      if (value !== undefined) out.print(value, view);
    } catch (err) {
      if (err instanceof ApiError) process.stderr.write(`svc: ${err.message} (HTTP ${err.status})\n`);
      else process.stderr.write(`svc: ${(err as Error).message}\n`);
      process.exitCode = err instanceof CommandFailed ? err.exitCode : 1;
    }
  };
}

/**
 * How often a wait asks (from one question to the next): every 50 ms for its first 2 s (a
 * deploy is often done within one, and a 100 ms poll's lag was a tenth of `svc deploy`'s time,
 * bench/build), then ten times a second until 10 s, then once a second. Its first 2 s take at
 * most 40 of the tenant's 200-request burst (spec 8: 100 a second); a 429 (other clients of the
 * tenant) is waited out, not a failure.
 */
const POLL_EAGER_MS = 50;
const POLL_EAGER_FOR_MS = 2_000;
const POLL_OFTEN_MS = 100;
const POLL_OFTEN_FOR_MS = 10_000;
const POLL_SLOW_MS = 1000;

/** The pause before a wait's next question, `elapsedMs` into it. */
export function pollPauseMs(elapsedMs: number): number {
  if (elapsedMs < POLL_EAGER_FOR_MS) return POLL_EAGER_MS;
  return elapsedMs < POLL_OFTEN_FOR_MS ? POLL_OFTEN_MS : POLL_SLOW_MS;
}

/**
 * Polls `get` until `settled` says so, telling each new status on stderr, and resolves when it
 * settled as `success`; any other outcome fails the command with its last_error. Gives up after
 * `timeoutMs` (the operation goes on on the server).
 */
export async function waitUntil<T extends { status: string; last_error: string | null }>(
  out: Output,
  what: string,
  /** Asks once; `leftMs` is what is left of the wait (for a question the server holds). */
  get: (leftMs: number) => Promise<T>,
  settled: (v: T) => boolean,
  success: string,
  timeoutMs: number,
  /** The status already known (and told here first): a wait whose answer the server holds says where it starts. */
  known?: string,
): Promise<T> {
  const until = Date.now() + timeoutMs;
  let last = known ?? '';
  if (known !== undefined) out.note(`${what}: ${known}`);
  const started = Date.now();
  const stillAfterTimeout = (status: string) => new CommandFailed(`${what} still ${status} after ${Math.round(timeoutMs / 1000)} s (it goes on; check again later)`);
  for (;;) {
    const askedAt = Date.now();
    const v = await get(until - askedAt).catch((err: unknown) => {
      // The tenant's rate limit (its other clients too): asked again after the wait it names,
      // within the wait's own time.
      if (!(err instanceof ApiError && err.status === 429)) throw err;
      if (Date.now() >= until) throw stillAfterTimeout(last || 'unknown');
      return rateLimited(err, until - Date.now());
    });
    if (v === null) continue;
    if (v.status !== last) {
      out.note(`${what}: ${v.status}`);
      last = v.status;
    }
    if (settled(v)) {
      if (v.status !== success) throw new CommandFailed(`${what} ${v.status}${v.last_error ? `: ${v.last_error}` : ''}`);
      return v;
    }
    if (Date.now() > until) throw stillAfterTimeout(v.status);
    // Counted from the question: after an answer the server held (a service's ?wait), the next
    // question goes at once.
    const pauseMs = pollPauseMs(Date.now() - started) - (Date.now() - askedAt);
    if (pauseMs > 0) await new Promise((r) => setTimeout(r, pauseMs));
  }
}

/** Waits out a 429's Retry-After (1 s when it names none; 50 ms to 10 s, and no longer than `leftMs`); null: ask again. */
async function rateLimited(err: ApiError, leftMs: number): Promise<null> {
  const seconds = Number(err.headers.get('retry-after'));
  const ms = Number.isFinite(seconds) && seconds > 0 ? Math.min(Math.max(seconds * 1000, 50), 10_000) : 1000;
  await new Promise((r) => setTimeout(r, Math.min(ms, Math.max(leftMs, 0))));
  return null;
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
