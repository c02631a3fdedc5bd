// The client of an environment's agent: svc-init inside the container runs the command itself
// (packages/svc-init/agent.go), so an exec costs an HTTP request to the container's address
// instead of a runtime process start through the engine (~80 ms under gVisor here). node:http,
// not fetch: svcd must know whether the agent was reached at all, since only a request that never
// reached it may go to the engine's exec instead (anything else could run the command twice).
import { randomBytes } from 'node:crypto';
import { request } from 'node:http';
import type { Timers } from '../clock.js';
import { ExecNotStartedError, type ExecOutcome, type ExecSpec } from '../runtime/index.js';

/** The port of every environment's agent, on the container's own address. */
export const AGENT_PORT = 49983;
/** A local bridge address answers a connect at once; one that does not is an agent that is not there. */
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
  token: string;
}

/** Runs the spec through the agent at `at`; rejects with AgentUnreachableError when it never got the request. */
export function execThroughAgent(at: AgentAddress, spec: ExecSpec, timers: Timers): Promise<ExecOutcome> {
  const body = JSON.stringify({ argv: spec.cmd, work_dir: spec.workDir, timeout_seconds: spec.timeoutSeconds, max_output_bytes: spec.maxOutputBytes });
  // Output comes as base64 (4 characters for 3 bytes): the answer is bounded by the caps it was given.
  const maxAnswerBytes = 2 * Math.ceil((spec.maxOutputBytes * 4) / 3) + 64 * 1024;
  return new Promise<ExecOutcome>((resolve, reject) => {
    let connected = false;
    let settled = false;
    const req = request({
      host: at.host,
      port: AGENT_PORT,
      method: 'POST',
      path: '/exec',
      headers: { authorization: `Bearer ${at.token}`, 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) },
      // One connection per command: nothing is pooled towards containers that come and go.
      agent: false,
    });
    // Every way this ends settles it once, here, and lets go of the connection.
    const finish = (outcome: ExecOutcome | Error) => {
      if (settled) return;
      settled = true;
      connectTimer.cancel();
      answerTimer.cancel();
      req.destroy();
      if (outcome instanceof Error) reject(outcome);
      else resolve(outcome);
    };
    const connectTimer = timers.setTimeout(() => {
      if (!connected) finish(new AgentUnreachableError(`the agent did not accept a connection within ${CONNECT_TIMEOUT_MS} ms`));
    }, CONNECT_TIMEOUT_MS);
    const answerTimer = timers.setTimeout(() => finish(new Error('the agent did not answer in time')), spec.timeoutSeconds * 1000 + ANSWER_GRACE_MS);
    req.on('socket', (socket) => {
      socket.once('connect', () => {
        connected = true;
        connectTimer.cancel();
      });
    });
    req.on('error', (err) => finish(connected ? err : new AgentUnreachableError(err.message)));
    req.on('response', (res) => {
      const chunks: Buffer[] = [];
      let size = 0;
      res.on('data', (chunk: Buffer) => {
        size += chunk.length;
        if (size > maxAnswerBytes) finish(new Error('the agent answered more than the output caps allow'));
        else chunks.push(chunk);
      });
      res.on('error', (err) => finish(err));
      // The connection closed before the answer ended (the container stopped meanwhile).
      res.on('close', () => {
        if (!res.complete) finish(new Error('the agent\'s connection closed before its answer ended'));
      });
      res.on('end', () => {
        const status = res.statusCode ?? 0;
        let answer: unknown;
        try {
          answer = JSON.parse(Buffer.concat(chunks).toString('utf8'));
        } catch {
          finish(new Error(`the agent answered ${status} with no JSON`));
          return;
        }
        // The token refused (a container that is not this environment's any more): nothing ran.
        if (status === 401) finish(new AgentUnreachableError("the agent refused the environment's token"));
        else if (status === 422) finish(new ExecNotStartedError(errorOf(answer)));
        else if (status !== 200) finish(new Error(`the agent answered ${status}: ${errorOf(answer)}`));
        else finish(outcomeOf(answer));
      });
    });
    req.end(body);
  });
}

/**
 * Resolves once the agent at `at` answers its health check with the token (an environment's
 * readiness: its first command must not find the agent still starting); rejects otherwise.
 */
export function agentAnswers(at: AgentAddress, timeoutMs: number): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    const req = request({ host: at.host, port: AGENT_PORT, method: 'GET', path: '/health', headers: { authorization: `Bearer ${at.token}` }, agent: false, timeout: timeoutMs });
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
