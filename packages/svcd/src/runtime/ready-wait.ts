// The second half of every driver's apply: from "started" to "ready". One loop for every driver,
// so that readiness means the same on each: running, reachable at its endpoint, and passing its
// probe; an exit fails it at once, with the last lines the workload printed.
import { connect } from 'node:net';
import { pause, type Clock, type Timers } from '../clock.js';
import type { Endpoint, Readiness, WorkloadInfo } from './driver.js';
import { ProbeAnsweredError } from './port.js';

/** How often the workload's state is read while its probe is tried more often. */
export const STATE_EVERY_MS = 250;
/**
 * For this long after the wait begins, a workload not running yet has its state read every
 * EAGER_STATE_EVERY_MS instead: a Swarm task takes most of a second to run, and a quarter second
 * more before it was seen added a quarter to a deploy (bench/swarm). A workload still not running
 * after it (its node pulling a large image) is read at STATE_EVERY_MS again, sparing the engine
 * (a Swarm read is two questions to the manager: 40 a second for those 3 s at most, per deploy).
 */
export const EAGER_STATE_MS = 3_000;
export const EAGER_STATE_EVERY_MS = 50;
/** The default probe's connect timeout. */
const TCP_PROBE_TIMEOUT_MS = 1_000;

export interface ReadyWaitOptions {
  ref: string;
  /** The spec's port (null: ready once running). */
  port: number | null;
  ready: Readiness;
  signal: AbortSignal;
  clock: Clock;
  timers: Timers;
  inspect(ref: string): Promise<WorkloadInfo | null>;
  /** The last lines the workload printed, for the error when it exits ('' when none). */
  logTail(ref: string): Promise<string>;
}

/** The workload ended (or vanished) before it was ready. */
export class WorkloadEndedError extends Error {}

export async function waitUntilReady(o: ReadyWaitOptions): Promise<Endpoint> {
  const began = o.clock.now();
  const deadline = began + o.ready.timeoutMs;
  let endpoint: Endpoint | null = null;
  /** When the workload was first seen running at an endpoint (the eager probes' start). */
  let reachableSince: number | null = null;
  let stateReadAt = -Infinity;
  let last = 'not running yet';
  let lastAnswer: string | null = null;
  for (;;) {
    throwIfAborted(o.signal);
    const eager = endpoint === null && o.clock.now() - began < EAGER_STATE_MS;
    if (o.clock.now() - stateReadAt >= (eager ? EAGER_STATE_EVERY_MS : STATE_EVERY_MS)) {
      stateReadAt = o.clock.now();
      const info = await o.inspect(o.ref);
      if (!info) throw new WorkloadEndedError('container disappeared before it was ready');
      if (info.state === 'exited' || info.state === 'dead') {
        const tail = await o.logTail(o.ref).catch(() => '');
        throw new WorkloadEndedError(`container exited with code ${info.exitCode ?? '?'} before it was ready${tail ? `: ${tail}` : ''}`);
      }
      // The spec's port at its address, or the port its node publishes for it (Swarm).
      endpoint = info.state === 'running' && info.address ? { host: info.address.host, port: o.port === null ? null : info.address.published ? info.address.port : o.port } : null;
    }
    if (endpoint) {
      reachableSince ??= o.clock.now();
      const probe = o.ready.probe ?? defaultProbe;
      try {
        await within(o.timers, o.ready.probeTimeoutMs, probe(endpoint, o.timers));
        return endpoint;
      } catch (err) {
        last = (err as Error).message;
        if (err instanceof ProbeAnsweredError) lastAnswer = last;
      }
    }
    if (o.clock.now() >= deadline) {
      // Never running: what it printed, or why its driver could not start it (a swarm task's error).
      const tail = endpoint ? '' : await o.logTail(o.ref).catch(() => '');
      throw new Error(`not ready within ${Math.round(o.ready.timeoutMs / 1000)} s: ${lastAnswer ?? last}${tail ? ` (${tail})` : ''}`);
    }
    const eagerProbes = o.ready.eager;
    const probeEagerly = eagerProbes !== undefined && reachableSince !== null && o.clock.now() - reachableSince < eagerProbes.forMs;
    await pause(o.timers, probeEagerly ? eagerProbes.everyMs : o.ready.everyMs, o.signal);
  }
}

/** One try of a readiness's probe (its own, or the default) at an endpoint: whether it passed (a replica joining its route). */
export function probePasses(ready: Pick<Readiness, 'probe'>, endpoint: Endpoint, timers: Timers): Promise<boolean> {
  return (ready.probe ?? defaultProbe)(endpoint, timers).then(
    () => true,
    () => false,
  );
}

/** Without a probe of its own: a port must accept TCP; a workload without one is ready running. */
async function defaultProbe(endpoint: Endpoint): Promise<void> {
  if (endpoint.port === null) return;
  if (!(await tcpAccepts(endpoint.host, endpoint.port))) throw new Error(`no connection accepted on port ${endpoint.port}`);
}

/** Whether a TCP connect to host:port succeeds within timeoutMs (the default probe, and tests' reachability checks). */
export function tcpAccepts(host: string, port: number, timeoutMs = TCP_PROBE_TIMEOUT_MS): Promise<boolean> {
  return new Promise((resolve) => {
    const sock = connect({ host, port });
    const done = (ok: boolean) => {
      sock.destroy();
      resolve(ok);
    };
    sock.setTimeout(timeoutMs, () => done(false));
    sock.once('connect', () => done(true));
    sock.once('error', () => done(false));
  });
}

/** Rejects with the signal's reason, as an Error. */
export function throwIfAborted(signal: AbortSignal): void {
  if (!signal.aborted) return;
  const reason: unknown = signal.reason;
  throw reason instanceof Error ? reason : new Error(String(reason));
}

/** `p`, or a rejection after `ms`. */
function within<T>(timers: Timers, ms: number, p: Promise<T>): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const timer = timers.setTimeout(() => reject(new Error(`no answer within ${ms} ms`)), ms);
    p.then(resolve, reject).finally(() => timer.cancel());
  });
}
