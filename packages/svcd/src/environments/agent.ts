// The client of an environment's agent: svc-init inside the container runs the command itself
// (packages/svc-init/agent.go), so an exec costs an HTTP request to the container's address
// instead of a runtime process start through the engine (~80 ms under gVisor here). node:http,
// not fetch: svcd must know whether the agent was reached at all, since only a request that never
// reached it may go to the engine's exec instead (anything else could run the command twice).
import { createHmac, randomBytes } from 'node:crypto';
import { request, type IncomingMessage } from 'node:http';
import { pipeline, Transform, type Duplex, type TransformCallback } from 'node:stream';
import { StringDecoder } from 'node:string_decoder';
import type { ExecEvent, ExecSignal } from '@svc/contract';
import type { Timers } from '../clock.js';
import { ExecNotStartedError, type ExecOutcome, type ExecSpec } from '../runtime/index.js';

/** The port of every environment's agent, on the container's own address. */
export const AGENT_PORT = 49983;
/** A local bridge address (or a swarm node's published port, on the nodes' own network) answers a connect at once; one that does not is an agent that is not there. */
const CONNECT_TIMEOUT_MS = 2_000;
/** Past the command's own timeout, the agent has killed it and answers within the stray-output grace (5 s). */
const ANSWER_GRACE_MS = 15_000;

/** A new agent token: 32 random bytes, as a tenant's other secrets. */
export function newAgentToken(): string {
  return randomBytes(32).toString('base64url');
}

/** The agent was not reached (nothing ran): the engine's exec may run the command instead. */
export class AgentUnreachableError extends Error {}

export interface AgentAddress {
  host: string;
  port: number;
  token: string;
}

/**
 * Where an environment's agent answers: at AGENT_PORT of its container's address (one engine),
 * or at the port its node publishes it on (`published`, a swarm: the host is the node's).
 */
export function agentAddress(host: string, published: number | null, token: string): AgentAddress {
  return { host, port: published ?? AGENT_PORT, token };
}

/** The header the proxy names a preview's port in, to the agent's preview proxy (svc-init's preview.go). */
export const PREVIEW_PORT_HEADER = 'X-Svc-Preview-Port';
/** The header that carries previewToken. */
export const PREVIEW_TOKEN_HEADER = 'X-Svc-Preview-Token';

/**
 * What the proxy shows the agent to reach the preview's `port` through it: derived from the
 * agent's token (HMAC-SHA256 of `svc-preview:<port>`, base64url), so that the proxy's
 * configuration, which holds it, gives no way to run a command nor to reach another port;
 * svc-init derives the same.
 */
export function previewToken(agentToken: string, port: number): string {
  return createHmac('sha256', agentToken).update(`svc-preview:${String(port)}`).digest('base64url');
}

/** Runs the spec through the agent at `at`; rejects with AgentUnreachableError when it never got the request. */
export async function execThroughAgent(at: AgentAddress, spec: ExecSpec, timers: Timers): Promise<ExecOutcome> {
  const answer = await openExec(at, spec, false, timers);
  // Output comes as base64 (4 characters for 3 bytes): the answer is bounded by the caps it was given.
  const text = await readCapped(answer, 2 * Math.ceil((spec.maxOutputBytes * 4) / 3) + 64 * 1024, timers);
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    throw new Error('the agent answered an exec with no JSON');
  }
  const outcome = outcomeOf(parsed);
  if (outcome instanceof Error) throw outcome;
  return outcome;
}

/**
 * Starts the spec's command on the agent: resolves with the agent's answer once its headers came
 * (the whole outcome, or with `stream` a JSON line per piece of output as it comes). Rejects with
 * AgentUnreachableError when the agent never got the request, ExecNotStartedError when the
 * command could not start in its work_dir (nothing ran), and a plain Error otherwise (it may have
 * run). The whole answer's headers come when the command has ended; a stream's at once.
 */
export async function openExec(at: AgentAddress, spec: ExecSpec, stream: boolean, timers: Timers, commandId?: string): Promise<IncomingMessage> {
  try {
    return await callAgent(at, { method: 'POST', path: '/exec', body: execBody(spec, stream, commandId), contentType: 'application/json', headersWithinMs: stream ? ANSWER_GRACE_MS : answerDeadlineMs(spec) }, timers);
  } catch (err) {
    if (!(err instanceof AgentRefusal)) throw err;
    if (err.status === 422) throw new ExecNotStartedError(err.message);
    throw new Error(`the agent answered ${err.status}: ${err.message}`);
  }
}

/** The agent's exec request for `spec` (whose stdin, if any, is bytes: see canRunOnAgent). */
function execBody(spec: ExecSpec, stream: boolean, commandId: string | undefined): string {
  return JSON.stringify({
    argv: spec.cmd,
    work_dir: spec.workDir,
    timeout_seconds: spec.timeoutSeconds,
    max_output_bytes: spec.maxOutputBytes,
    env: spec.env,
    stdin: Buffer.isBuffer(spec.stdin) ? spec.stdin.toString('base64') : undefined,
    stream,
    // The name a signal reaches the command by while it runs (signalCommand).
    id: commandId,
  });
}

/** The command did not run (any more) under its id: it ended, or never ran on this agent. */
export class CommandNotRunningError extends Error {}
/** The agent has no signal route: one started by an svc-init from before signals. */
export class AgentWithoutSignalsError extends Error {}

/**
 * Sends `signal` to the process group of the command the agent runs under `commandId`. Rejects
 * with CommandNotRunningError when none runs under it, AgentWithoutSignalsError when the agent
 * predates signals, AgentUnreachableError when the agent was not reached, and anything else
 * when it is unknown whether the signal was sent.
 */
export async function signalCommand(at: AgentAddress, commandId: string, signal: ExecSignal, timers: Timers): Promise<void> {
  try {
    const answer = await callAgent(at, { method: 'POST', path: '/signal', body: JSON.stringify({ id: commandId, signal }), contentType: 'application/json', headersWithinMs: ANSWER_GRACE_MS }, timers);
    answer.resume();
  } catch (err) {
    // The signal route's own 404 names the command; the router's (an older agent) does not.
    if (err instanceof AgentRefusal && err.status === 404) throw /no command runs/.test(err.message) ? new CommandNotRunningError(err.message) : new AgentWithoutSignalsError(err.message);
    throw err;
  }
}

/** The agent takes stdin as bytes in its request; a stream (sync's archive) goes through the engine. */
export function canRunOnAgent(spec: ExecSpec): boolean {
  return spec.stdin === undefined || Buffer.isBuffer(spec.stdin);
}

/** How long past its timeout a command's answer may take: the agent kills it at the timeout and answers within its grace. */
export function answerDeadlineMs(spec: ExecSpec): number {
  return spec.timeoutSeconds * 1000 + ANSWER_GRACE_MS;
}

/**
 * Resolves once the agent at `at` answers its health check with the token (an environment's
 * readiness: its first command must not find the agent still starting); rejects otherwise.
 */
export function agentAnswers(at: AgentAddress, timeoutMs: number): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    const req = request({ host: at.host, port: at.port, method: 'GET', path: '/health', headers: { authorization: `Bearer ${at.token}` }, agent: false, timeout: timeoutMs });
    req.on('timeout', () => req.destroy(new Error('the agent did not answer its health check in time')));
    req.on('error', reject);
    req.on('response', (res) => {
      // The status is the answer: nothing more is read.
      res.destroy();
      if (res.statusCode === 200) resolve();
      else reject(new Error(`the agent answered its health check with ${res.statusCode ?? 0}`));
    });
    req.end();
  });
}

function errorOf(answer: unknown): string {
  const error = (answer as { error?: unknown } | null)?.error;
  return typeof error === 'string' ? error : 'no reason given';
}

/** The answer's outcome (output sent as base64, decoded as the engine path decodes it), or what is wrong with it. */
function outcomeOf(answer: unknown): ExecOutcome | Error {
  if (typeof answer !== 'object' || answer === null) return new Error('the agent answered an exec with something that is not an object');
  const a = answer as Record<string, unknown>;
  const { exit_code: exitCode, stdout, stderr, truncated, timed_out: timedOut, duration_ms: durationMs } = a;
  const text = (v: unknown) => (v === null ? '' : typeof v === 'string' ? Buffer.from(v, 'base64').toString('utf8') : null);
  const out = text(stdout);
  const err = text(stderr);
  if (!Number.isInteger(exitCode) || (exitCode as number) < 0 || (exitCode as number) > 255 || !Number.isInteger(durationMs) || out === null || err === null || typeof truncated !== 'boolean' || typeof timedOut !== 'boolean') {
    return new Error('the agent answered an exec without its fields');
  }
  return { exitCode: exitCode as number, stdout: out, stderr: err, truncated, timedOut, durationMs: durationMs as number };
}

/** The agent answered, with a status other than success: what it said, for the caller to map. */
export class AgentRefusal extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

export interface AgentCall {
  method: 'GET' | 'POST' | 'PUT' | 'DELETE';
  /** Path and query. */
  path: string;
  body?: string | NodeJS.ReadableStream;
  contentType?: string;
  /** The answer's status and headers must come within this (the body then takes as long as it takes). */
  headersWithinMs: number;
  /** An upgrade to this protocol (the terminal): the connection itself is the answer. */
  upgrade?: 'svc-terminal';
}

/** The JSON error of a refusal is small; more is not read. */
const REFUSAL_MAX_BYTES = 64 * 1024;

/**
 * Sends one request to the agent and resolves with its answer once a success status and its
 * headers came, the body left to the caller (to stream or to read). Rejects with
 * AgentUnreachableError when the agent was not reached or refused the token (nothing was done),
 * with AgentRefusal for any other status, and with a plain Error when the connection failed after
 * it was reached.
 */
export async function callAgent(at: AgentAddress, call: AgentCall, timers: Timers): Promise<IncomingMessage> {
  const answer = await sendToAgent(at, call, timers);
  if ('response' in answer) return answer.response;
  answer.upgraded.destroy();
  throw new Error('the agent upgraded a plain request');
}

/** A request to the agent and its answer: a response with a success status, or the upgraded connection. */
function sendToAgent(at: AgentAddress, call: AgentCall, timers: Timers): Promise<{ response: IncomingMessage } | { upgraded: Duplex }> {
  return new Promise((resolve, reject) => {
    let connected = false;
    let settled = false;
    const req = request({
      host: at.host,
      port: at.port,
      method: call.method,
      path: call.path,
      headers: {
        authorization: `Bearer ${at.token}`,
        ...(call.contentType ? { 'content-type': call.contentType } : {}),
        ...(call.upgrade ? { connection: 'Upgrade', upgrade: call.upgrade } : {}),
      },
      agent: false,
    });
    const fail = (err: Error) => {
      if (settled) return;
      settled = true;
      connectTimer.cancel();
      headersTimer.cancel();
      req.destroy();
      reject(err);
    };
    const succeed = (answer: { response: IncomingMessage } | { upgraded: Duplex }) => {
      settled = true;
      connectTimer.cancel();
      headersTimer.cancel();
      resolve(answer);
    };
    const connectTimer = timers.setTimeout(() => {
      if (!connected) fail(new AgentUnreachableError(`the agent did not accept a connection within ${CONNECT_TIMEOUT_MS} ms`));
    }, CONNECT_TIMEOUT_MS);
    const headersTimer = timers.setTimeout(() => fail(new Error('the agent did not answer in time')), call.headersWithinMs);
    req.on('socket', (socket) => {
      socket.once('connect', () => {
        connected = true;
        connectTimer.cancel();
      });
    });
    req.on('error', (err) => fail(connected ? err : new AgentUnreachableError(err.message)));
    req.on('upgrade', (_res, socket, head) => {
      if (settled) {
        socket.destroy();
        return;
      }
      // Bytes that came with the answer's head are the first of the connection's.
      if (head.length > 0) socket.unshift(head);
      succeed({ upgraded: socket });
    });
    req.on('response', (res) => {
      connectTimer.cancel();
      headersTimer.cancel();
      const status = res.statusCode ?? 0;
      if (status >= 200 && status < 300) {
        succeed({ response: res });
        return;
      }
      readCapped(res, REFUSAL_MAX_BYTES, timers)
        .then((text) => {
          let answer: unknown = null;
          try {
            answer = JSON.parse(text);
          } catch {
            // No JSON: the status says it.
          }
          fail(status === 401 ? new AgentUnreachableError("the agent refused the environment's token") : new AgentRefusal(status, errorOf(answer)));
        })
        .catch((err: unknown) => fail(err instanceof Error ? err : new Error(String(err))));
    });
    if (call.body === undefined) req.end();
    else if (typeof call.body === 'string') req.end(call.body);
    else {
      // An upload: a failure of the source (the client went, the cap) ends the request, unfinished.
      pipeline(call.body, req, (err) => {
        if (err) fail(err);
      });
    }
  });
}

/** The agent's small answers (errors, metadata) come whole at once; one that trickles is given up. */
const SMALL_ANSWER_WITHIN_MS = 30_000;

/** Reads a whole answer of at most `max` bytes as text within SMALL_ANSWER_WITHIN_MS; more, or later, is an error. */
export function readCapped(res: NodeJS.ReadableStream & { destroy(): void }, max: number, timers: Timers): Promise<string> {
  return new Promise<string>((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const timer = timers.setTimeout(() => {
      res.destroy();
      reject(new Error(`the agent's answer did not end within ${SMALL_ANSWER_WITHIN_MS} ms`));
    }, SMALL_ANSWER_WITHIN_MS);
    res.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size > max) {
        timer.cancel();
        res.destroy();
        reject(new AgentAnswerTooLarge(`the agent answered more than ${max} bytes`));
      } else chunks.push(chunk);
    });
    res.on('error', reject);
    res.on('end', () => {
      timer.cancel();
      resolve(Buffer.concat(chunks).toString('utf8'));
    });
    res.on('close', () => {
      timer.cancel();
      reject(new Error("the agent's connection closed before its answer ended"));
    });
  });
}

/** An answer past what svcd reads of one (a listing of a directory with very long names). */
export class AgentAnswerTooLarge extends Error {}

/**
 * Turns the agent's streamed exec (a JSON line per piece of output, base64, and one exit line)
 * into the API's ExecEvent lines: output as text, decoded per stream so that a character split
 * between two pieces comes whole, and an `error` event when the agent's answer ended without its
 * exit line (the outcome is unknown). A line longer than any the agent writes is an error too.
 */
export class AgentEventDecoder extends Transform {
  private pending = '';
  private readonly text = { stdout: new StringDecoder('utf8'), stderr: new StringDecoder('utf8') };
  private exited = false;

  constructor(private readonly onExit: (exit: Extract<ExecEvent, { type: 'exit' }>) => void) {
    super({ readableObjectMode: false });
  }

  override _transform(chunk: Buffer, _encoding: BufferEncoding, done: TransformCallback): void {
    this.pending += chunk.toString('latin1');
    let newline: number;
    while ((newline = this.pending.indexOf('\n')) >= 0) {
      const line = this.pending.slice(0, newline);
      this.pending = this.pending.slice(newline + 1);
      if (line.length > AGENT_LINE_MAX_BYTES) break;
      if (line.trim() !== '') this.line(line);
    }
    if (newline >= 0 || this.pending.length > AGENT_LINE_MAX_BYTES) {
      done(new Error('the agent streamed a line longer than it writes'));
      return;
    }
    done();
  }

  override _flush(done: TransformCallback): void {
    if (!this.exited) this.emitEvent({ type: 'error', error: "the environment's agent stopped answering before the command ended; its outcome is unknown" });
    done();
  }

  /** One line of the agent's: anything that is not one of its events is skipped (nothing here may throw). */
  private line(line: string): void {
    let parsed: unknown;
    try {
      parsed = JSON.parse(line);
    } catch {
      return;
    }
    // What comes after the exit is not the command's.
    if (typeof parsed !== 'object' || parsed === null || this.exited) return;
    const event = parsed as { type?: unknown; data?: unknown };
    if ((event.type === 'stdout' || event.type === 'stderr') && typeof event.data === 'string') {
      const data = this.text[event.type].write(Buffer.from(event.data, 'base64'));
      if (data !== '') this.emitEvent({ type: event.type, data });
      return;
    }
    if (event.type === 'exit') {
      const outcome = outcomeOf({ ...event, stdout: null, stderr: null });
      if (outcome instanceof Error) return;
      for (const stream of ['stdout', 'stderr'] as const) {
        const rest = this.text[stream].end();
        if (rest !== '') this.emitEvent({ type: stream, data: rest });
      }
      this.exited = true;
      const exit = { type: 'exit' as const, exit_code: outcome.exitCode, truncated: outcome.truncated, timed_out: outcome.timedOut, duration_ms: outcome.durationMs };
      this.onExit(exit);
      this.emitEvent(exit);
    }
  }

  private emitEvent(event: ExecEvent): void {
    this.push(`${JSON.stringify(event)}\n`);
  }
}

/** The agent reads output 32 KiB at a time: a line is that in base64 and a little JSON. */
const AGENT_LINE_MAX_BYTES = 64 * 1024;

export interface TerminalSize {
  cols: number;
  rows: number;
}

/** The frame types of the agent's terminal protocol (packages/svc-init/terminal.go). */
export const TERMINAL_FRAME = { data: 0, resize: 1, exit: 2 } as const;
/** The agent takes frames of at most this payload; larger input is sent in pieces. */
export const TERMINAL_FRAME_MAX_BYTES = 64 * 1024;

/** One frame of the agent's terminal protocol: a type byte, a big-endian uint32 length, the payload. */
export function terminalFrame(type: number, payload: Buffer): Buffer {
  const header = Buffer.alloc(5);
  header.writeUInt8(type, 0);
  header.writeUInt32BE(payload.length, 1);
  return Buffer.concat([header, payload]);
}

/**
 * Opens a terminal on the agent at `at`: resolves with the upgraded connection, carrying the
 * agent's frames both ways, once the command runs on its pseudo-terminal. Rejects as callAgent
 * does (AgentUnreachableError when nothing was reached, AgentRefusal for a refusal).
 */
export async function openAgentTerminal(at: AgentAddress, o: TerminalSize & { workDir: string }, timers: Timers): Promise<Duplex> {
  const query = new URLSearchParams({ cols: String(o.cols), rows: String(o.rows), work_dir: o.workDir });
  const answer = await sendToAgent(at, { method: 'GET', path: `/terminal?${query.toString()}`, upgrade: 'svc-terminal', headersWithinMs: ANSWER_GRACE_MS }, timers);
  if ('upgraded' in answer) return answer.upgraded;
  answer.response.destroy();
  throw new Error('the agent answered a terminal without opening it');
}

/**
 * Reads the agent's terminal frames (output, exit) from its connection: hands output on as it
 * comes and the exit code once. A frame larger than the agent writes ends the reading with an error.
 */
export class TerminalFrameReader extends Transform {
  private pending: Buffer = Buffer.alloc(0);

  constructor(private readonly onExit: (exitCode: number) => void) {
    super({ readableObjectMode: false });
  }

  override _transform(chunk: Buffer, _encoding: BufferEncoding, done: TransformCallback): void {
    this.pending = this.pending.length === 0 ? chunk : Buffer.concat([this.pending, chunk]);
    while (this.pending.length >= 5) {
      const type = this.pending.readUInt8(0);
      const size = this.pending.readUInt32BE(1);
      // The agent reads the terminal 32 KiB at a time.
      if (size > TERMINAL_FRAME_MAX_BYTES) {
        done(new Error('the agent sent a terminal frame larger than it writes'));
        return;
      }
      if (this.pending.length < 5 + size) break;
      const payload = this.pending.subarray(5, 5 + size);
      this.pending = this.pending.subarray(5 + size);
      if (type === TERMINAL_FRAME.data) this.push(Buffer.from(payload));
      else if (type === TERMINAL_FRAME.exit && size === 4) this.onExit(payload.readInt32BE(0));
    }
    done();
  }
}

/**
 * A terminal open on an agent, as the API sees it: output bytes as they come (a stream, paused by
 * whoever cannot take more), input and resizes, the exit code once the command ended (null while
 * it runs, and when the connection ended without one), and close.
 */
export class AgentTerminal {
  readonly output: Transform;
  exitCode: number | null = null;

  constructor(private readonly connection: Duplex) {
    this.output = new TerminalFrameReader((code) => (this.exitCode = code));
    connection.on('error', () => this.output.destroy());
    // A frame the agent does not write (past the cap) fails the reader: the connection goes, and
    // nothing is thrown (the bridge, when there is one, closes the client's side).
    this.output.on('error', () => connection.destroy());
    connection.pipe(this.output);
  }

  /** Sends input; false when the connection's buffer is full (wait for onDrain before more). */
  write(input: Buffer): boolean {
    let room = true;
    for (let at = 0; at < input.length; at += TERMINAL_FRAME_MAX_BYTES) {
      room = this.connection.write(terminalFrame(TERMINAL_FRAME.data, input.subarray(at, at + TERMINAL_FRAME_MAX_BYTES)));
    }
    return room;
  }

  onDrain(fn: () => void): void {
    this.connection.once('drain', fn);
  }

  resize(size: TerminalSize): void {
    const payload = Buffer.alloc(4);
    payload.writeUInt16BE(size.cols, 0);
    payload.writeUInt16BE(size.rows, 2);
    this.connection.write(terminalFrame(TERMINAL_FRAME.resize, payload));
  }

  /** Hangs the terminal up (the agent sends SIGHUP to its command). */
  close(): void {
    this.connection.destroy();
  }

  onClose(fn: () => void): void {
    this.connection.once('close', fn);
  }
}
