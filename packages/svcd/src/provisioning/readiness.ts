// Waiting for a workload to answer: a cheap protocol probe, often (it decides how soon a
// database or a board is reported running), and a costlier look at the record and the container
// less often (deleted? suspended? exited?).
import type { Clock, Timers } from '../clock.js';

export interface ReadinessOptions {
  clock: Clock;
  timers: Timers;
  /** Rejects until the workload answers properly. */
  probe(): Promise<void>;
  /** Throws to give up: the resource is no longer wanted or its container ended. Gets the last probe error. */
  check(lastProbeError: string): Promise<void>;
  timeoutMs: number;
  probeEveryMs: number;
  /** A probe that never settles must not outlast the deadline: each is bounded by this. */
  probeTimeoutMs: number;
  checkEveryMs: number;
}

export async function waitUntilReady(o: ReadinessOptions): Promise<void> {
  const deadline = o.clock.now() + o.timeoutMs;
  let last = 'no answer';
  let checkedAt = -Infinity;
  for (;;) {
    const checkNow = o.clock.now() - checkedAt >= o.checkEveryMs;
    if (checkNow) {
      checkedAt = o.clock.now();
      await o.check(last);
    }
    try {
      await within(o.timers, o.probeTimeoutMs, o.probe());
      return;
    } catch (err) {
      last = (err as Error).message;
    }
    if (o.clock.now() > deadline) throw new Error(`not ready within ${Math.round(o.timeoutMs / 1000)} s: ${last}`);
    await new Promise<void>((r) => o.timers.setTimeout(r, o.probeEveryMs));
  }
}

/** `p`, or a rejection after `ms`. */
export function within<T>(timers: Timers, ms: number, p: Promise<T>): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const timer = timers.setTimeout(() => reject(new Error(`no answer within ${ms} ms`)), ms);
    p.then(resolve, reject).finally(() => timer.cancel());
  });
}
