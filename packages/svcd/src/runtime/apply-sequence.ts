// The order every driver's apply takes its steps in, written once: the tenant's network, the
// image when missing, whatever ran before under the spec's name (and the workload it replaces)
// removed (or, rolling, renamed aside to keep serving) once the image is here, the network and
// the name side by side; then the new one run, and the wait until it is ready (ready-wait.ts).
// A failure or an abort after the start removes what this apply started, by its own reference.
// A driver passes in how it does each step.
import type { Clock, Timers } from '../clock.js';
import type { Applied, ApplyRequest, WorkloadInfo, WorkloadSpec } from './driver.js';
import { setAsideName } from './port.js';
import { throwIfAborted, waitUntilReady } from './ready-wait.js';

export interface ApplySteps {
  clock: Clock;
  timers: Timers;
  /** The network the spec's workload joins (the tenant's, or the warm pool's), made when missing. */
  ensureNetwork(spec: WorkloadSpec): Promise<void>;
  hasImage(image: string): Promise<boolean>;
  pullImage(image: string, signal: AbortSignal): Promise<void>;
  /** Removes a workload by ref or name; a missing one is fine. */
  remove(ref: string): Promise<void>;
  /** Renames a workload, which runs on (drivers that can set a workload aside: `setAside`). */
  rename?(ref: string, name: string): Promise<void>;
  /** Creates and starts the spec's workload; its ref. */
  run(spec: WorkloadSpec): Promise<string>;
  inspect(ref: string): Promise<WorkloadInfo | null>;
  /** The last lines it printed, on one line ('' when none). */
  logTail(ref: string): Promise<string>;
}

export async function applyInOrder(request: ApplyRequest, steps: ApplySteps): Promise<Applied> {
  const { spec, signal } = request;
  throwIfAborted(signal);
  // The network and the name do not depend on each other: asked of the engine together (one after
  // another they were 4-6 ms of every deploy's way to its container, bench/build). An image to
  // pull comes before the name's clearing, as before: a pull can take long, and fail, and what
  // runs under the name keeps running until the image is here.
  if (request.pull === 'missing' && !(await steps.hasImage(spec.image))) {
    await allEnded([steps.ensureNetwork(spec), steps.pullImage(spec.image, signal)]);
    throwIfAborted(signal);
    await clearName(request, steps);
  } else {
    await allEnded([steps.ensureNetwork(spec), clearName(request, steps)]);
  }
  throwIfAborted(signal);
  const ref = await steps.run(spec);
  try {
    await request.started?.(ref);
    const endpoint = await waitUntilReady({
      ref,
      port: spec.port ?? null,
      ready: request.ready,
      signal,
      clock: steps.clock,
      timers: steps.timers,
      inspect: (id) => steps.inspect(id),
      logTail: (id) => steps.logTail(id),
    });
    return { ref, endpoint };
  } catch (err) {
    await steps.remove(ref).catch(() => {});
    throw err;
  }
}

/**
 * Steps taken side by side, each run to its end, failed or not, before the first failure is
 * thrown: a rename still under way when a failure's clean-up looks for what was set aside would
 * escape it.
 */
async function allEnded(steps: Promise<void>[]): Promise<void> {
  for (const step of await Promise.allSettled(steps)) if (step.status === 'rejected') throw step.reason as Error;
}

/** The spec's name free for the new workload: what ran under it set aside (rolling) or removed. */
async function clearName(request: ApplyRequest, steps: ApplySteps): Promise<void> {
  const { spec } = request;
  if (request.setAside) {
    // Rolling: what runs keeps serving under another name until the caller removes it; what
    // does not run under the name goes as it would otherwise. Nothing under it (a first deploy):
    // a removal would find nothing, one more question to the engine on the deploy's way to its
    // container. (After a rename the removal stays: a Swarm names the newest of two services
    // that two svcds' applies left under one name, and removes both by it.)
    if (!steps.rename) throw new Error('this driver cannot set a workload aside');
    const current = await steps.inspect(spec.name);
    if (current === null) return;
    if (current.state === 'running') await steps.rename(current.id, setAsideName(spec.name, current.id));
  } else if (request.replaces && request.replaces !== spec.name) {
    // Whatever ran before under this name, including a workload an interrupted apply left.
    await steps.remove(request.replaces);
  }
  await steps.remove(spec.name);
}
