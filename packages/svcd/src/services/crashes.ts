// Crash handling: an unexpected exit of a running service is a crash. svc restarts it after a
// growing delay (a new deployment whose workload generation the controller holds back until the
// delay is over, in the store, so any svcd carries it out); after 5 crashes within 10 minutes the
// circuit opens (status crashed, the workload observed failed) and nothing restarts it until the
// tenant resets the service.
import { type TimerHandle, unixSeconds } from '../clock.js';
import { LABELS, engineAnswers, type WorkloadExit } from '../runtime/index.js';
import type { ServiceRow, WorkloadRow } from '../store/index.js';
import { ENGINE_UNAVAILABLE, requestDeployment } from './deployer.js';
import type { WorkloadController } from '../workloads/controller.js';
import type { Platform } from '../platform.js';

export const CRASH_WINDOW_S = 600;
export const CRASH_LIMIT = 5;
export const BACKOFF_BASE_MS = 1_000;
export const BACKOFF_MAX_MS = 30_000;
/**
 * How long an exit waits before it is judged. An engine that shuts down (an upgrade, a restart)
 * stops every container first, and their exits arrive as events, then goes away: an exit
 * followed within this time by the engine going away is the engine's, not a crash.
 */
export const EXIT_SETTLE_MS = 2_000;
/**
 * The exit of a clean stop: by SIGTERM (128 + 15), or 0 (a program that handles SIGTERM and
 * ends well). svc did not ask for it (its own stops are not judged at all), so it is most
 * likely the engine stopping containers as it shuts down. The engine may take this long to go
 * away (it stops every container first, each with a grace period), so such an exit waits up to
 * this, asking the engine every second; a crash loop of such exits restarts that much slower.
 */
export const CLEAN_STOP_SETTLE_MS = 20_000;
const CLEAN_STOP_EXIT_CODES = new Set([0, 143]);
const ENGINE_POLL_MS = 1_000;

export interface CrashState {
  crash_count: number;
  crash_window_start: number;
  last_crash_at: number;
  circuitOpen: boolean;
}

/** The crash bookkeeping after one more crash at `now` (unix seconds). */
export function afterCrash(s: Pick<ServiceRow, 'crash_count' | 'crash_window_start'>, now: number): CrashState {
  const inWindow = s.crash_window_start !== null && now - s.crash_window_start < CRASH_WINDOW_S;
  const count = inWindow ? s.crash_count + 1 : 1;
  return {
    crash_count: count,
    crash_window_start: inWindow && s.crash_window_start !== null ? s.crash_window_start : now,
    last_crash_at: now,
    circuitOpen: count >= CRASH_LIMIT,
  };
}

/** 1 s, 2 s, 4 s, ... up to 30 s (scaled by base in tests). */
export function restartDelayMs(crashCount: number, baseMs = BACKOFF_BASE_MS): number {
  return Math.min(baseMs * 2 ** Math.max(0, crashCount - 1), (BACKOFF_MAX_MS * baseMs) / BACKOFF_BASE_MS);
}

/** What a CrashHandler is built from, by name. */
export interface CrashHandlerDeps extends Pick<Platform, 'store' | 'runtime' | 'activity' | 'clock' | 'timers' | 'log' | 'holder'> {
  controller: Pick<WorkloadController, 'kick'>;
  backoffBaseMs?: number;
  /** EXIT_SETTLE_MS (tests of crash loops: short). */
  exitSettleMs?: number;
  routesChanged: () => void;
}

export class CrashHandler {
  private readonly controller = new AbortController();
  private watching: Promise<void> | null = null;
  private retry: TimerHandle | null = null;
  /** Exits waiting out EXIT_SETTLE_MS, judged concurrently; close() waits for them. */
  private readonly settling = new Set<Promise<void>>();
  /** When this process last saw the engine's event stream break (ms). */
  private streamBrokeAtMs = Number.NEGATIVE_INFINITY;

  constructor(private readonly deps: CrashHandlerDeps) {}

  /** Follows the engine's exit events until close(); reconnects when the stream breaks. */
  watch(): void {
    if (this.controller.signal.aborted || this.watching) return;
    this.watching = (async () => {
      try {
        for await (const exit of this.deps.runtime.events(this.controller.signal)) {
          const judged = this.settleThenHandle(exit).catch((err: unknown) => this.deps.log.error({ err, exit }, 'crash handling failed'));
          this.settling.add(judged);
          void judged.finally(() => this.settling.delete(judged));
        }
      } catch (err) {
        if (!this.controller.signal.aborted) this.deps.log.warn({ err }, 'engine event stream broke; reconnecting');
      }
      if (!this.controller.signal.aborted) this.streamBrokeAtMs = this.deps.clock.now();
      this.watching = null;
      if (!this.controller.signal.aborted) this.retry = this.deps.timers.setTimeout(() => this.watch(), 1_000);
    })();
  }

  async close(): Promise<void> {
    this.controller.abort();
    this.retry?.cancel();
    await this.watching;
    await Promise.all(this.settling);
  }

  /**
   * The service whose running container this exit ended, or undefined: our own stops and
   * replacements (the service no longer points at this container, or is being deployed, or is
   * meant to be stopped), and other kinds of workload.
   */
  private async runningOn(exit: WorkloadExit): Promise<ServiceRow | undefined> {
    if (exit.labels[LABELS.kind] !== 'service') return undefined;
    const serviceId = exit.labels[LABELS.resource];
    const s = serviceId ? await this.deps.store.services.findAny(serviceId) : undefined;
    if (!s || s.container_id !== exit.id || s.desired_state !== 'running' || s.status !== 'running') return undefined;
    return s;
  }

  /** An exit from the event stream: judged after EXIT_SETTLE_MS, as the engine's or as a crash. */
  private async settleThenHandle(exit: WorkloadExit): Promise<void> {
    // Only an exit that could be a crash waits: svc's own stops and other workloads end here.
    if (!(await this.runningOn(exit))) return;
    const seenAtMs = this.deps.clock.now();
    const settleMs = exit.exitCode !== null && CLEAN_STOP_EXIT_CODES.has(exit.exitCode) ? CLEAN_STOP_SETTLE_MS : (this.deps.exitSettleMs ?? EXIT_SETTLE_MS);
    const until = seenAtMs + settleMs;
    let engineLeft = false;
    for (;;) {
      await this.pause(Math.min(ENGINE_POLL_MS, Math.max(0, until - this.deps.clock.now())));
      if (this.controller.signal.aborted) return;
      engineLeft = this.streamBrokeAtMs >= seenAtMs || !(await engineAnswers(this.deps.runtime));
      if (engineLeft || this.deps.clock.now() >= until) break;
    }
    if (engineLeft) await this.engineStopped(exit);
    else await this.handleExit(exit);
  }


  /** Resolves after `ms` on the injected timers, or at once when close() is called. */
  private pause(ms: number): Promise<void> {
    const signal = this.controller.signal;
    return new Promise<void>((resolve) => {
      if (signal.aborted) {
        resolve();
        return;
      }
      const timer = this.deps.timers.setTimeout(done, ms);
      signal.addEventListener('abort', done, { once: true });
      function done() {
        timer.cancel();
        signal.removeEventListener('abort', done);
        resolve();
      }
    });
  }

  /**
   * The engine stopped the service's container as it went away: no crash is counted. The
   * service waits as deploying, and reconcile deploys it again once the engine answers (deployer.ts, check).
   */
  private async engineStopped(exit: WorkloadExit): Promise<void> {
    const s = await this.runningOn(exit);
    if (!s) return;
    const patch = { status: 'deploying' as const, upstream: null, last_error: ENGINE_UNAVAILABLE, updated_at: unixSeconds(this.deps.clock) };
    if (!(await this.deps.store.services.updateIfRunning(s.id, exit.id, patch))) return;
    this.deps.log.warn({ service: s.id, container: exit.id }, 'the engine stopped a service as it went away; not counted as a crash');
    this.deps.routesChanged();
  }

  /** One exit: a crash when the service should be running on exactly this container. */
  async handleExit(exit: WorkloadExit): Promise<void> {
    const s = await this.runningOn(exit);
    if (!s) return;
    // Only a workload seen running at its latest generation, which nobody is applying.
    const w = await this.deps.store.workloads.find('service', s.id);
    if (!w || w.observed_generation !== w.generation || w.lease_holder !== null) return;
    // Each death is counted once, by whichever svcd sees it first.
    const lock = `exit:${exit.id}`;
    if (!(await this.deps.store.jobLocks.tryAcquire(lock, this.deps.holder, this.deps.clock.now(), 3_600_000))) return;
    try {
      await this.countCrash(s, w, exit);
    } catch (err) {
      // Not counted: the exit is judged again (by reconcile), not left unhandled for the lock's hour.
      await this.deps.store.jobLocks.release(lock, this.deps.holder).catch(() => {});
      throw err;
    }
  }

  /** The crash of `s` on its workload seen running at `w`'s generation: the circuit opens, or a restart after the backoff. */
  private async countCrash(s: ServiceRow, w: WorkloadRow, exit: WorkloadExit): Promise<void> {
    const now = unixSeconds(this.deps.clock);
    const next = afterCrash(s, now);
    const code = exit.exitCode ?? '?';
    const crash = { crash_count: next.crash_count, crash_window_start: next.crash_window_start, last_crash_at: now, updated_at: now };
    const details = { exit_code: exit.exitCode, crash_count: next.crash_count };
    if (next.circuitOpen) {
      const error = `container exited with code ${code}; ${next.crash_count} crashes in 10 minutes opened the circuit: reset the service to deploy it again`;
      const opened = await this.deps.store.transaction(async (tx) => {
        // Observed failed: reconcile leaves it alone (its exited container stays, for its logs).
        if (!(await tx.workloads.observeFailed('service', s.id, w.generation, error, now))) return false;
        await tx.services.update(s.id, { ...crash, status: 'crashed', upstream: null, circuit_open_at: now, last_error: error });
        await this.deps.activity.record(tx, { tenantId: s.tenant_id, action: 'service.crashed', resourceType: 'service', resourceId: s.id, serviceId: s.id, details });
        await this.deps.activity.record(tx, { tenantId: s.tenant_id, action: 'service.circuit_opened', resourceType: 'service', resourceId: s.id, serviceId: s.id, details });
        return true;
      });
      // Not opened here: the workload moved on (a newer request) since the exit was read.
      if (!opened) return;
      this.deps.log.warn({ service: s.id }, 'crash circuit opened');
      // An engine that restarts what exits on its own (Swarm's restart policy) would run it again
      // behind the open circuit: it is stopped (a no-op for the exited container of one engine,
      // which stays for its logs).
      if (s.container_id) await this.deps.runtime.stop(s.container_id).catch((err: unknown) => this.deps.log.warn({ err, service: s.id }, 'stopping a service whose circuit opened failed'));
      this.deps.routesChanged();
      return;
    }
    // One replica of several while others still serve: counted, and the service keeps running on
    // them. The driver runs that replica again itself (Swarm's restart policy), and its route
    // follows (deployer.ts, check): a redeploy would stop the replicas that serve.
    if (s.replicas > 1 && (await this.deps.runtime.inspect(exit.id))?.state === 'running') {
      await this.deps.store.transaction(async (tx) => {
        if ((await tx.workloads.find('service', s.id))?.generation !== w.generation) return;
        const error = `a replica exited with code ${code} (crash ${next.crash_count} of ${CRASH_LIMIT} allowed in 10 minutes); it is started again, and the running replicas serve meanwhile`;
        await tx.services.update(s.id, { ...crash, last_error: error });
        await this.deps.activity.record(tx, { tenantId: s.tenant_id, action: 'service.crashed', resourceType: 'service', resourceId: s.id, serviceId: s.id, details });
      });
      return;
    }
    const delay = restartDelayMs(next.crash_count, (this.deps.backoffBaseMs ?? BACKOFF_BASE_MS));
    await this.deps.store.transaction(async (tx) => {
      const retryAtMs = this.deps.clock.now() + delay;
      const dep = await requestDeployment(tx, this.deps, { tenantId: s.tenant_id, serviceId: s.id, image: s.image, reason: 'crash', retryAtMs, ifGeneration: w.generation });
      if (!dep) return;
      await tx.services.update(s.id, {
        ...crash,
        status: 'deploying',
        upstream: null,
        last_error: `container exited with code ${code} (crash ${next.crash_count} of ${CRASH_LIMIT} allowed in 10 minutes); restarting in ${Math.round(delay / 100) / 10} s`,
      });
      await this.deps.activity.record(tx, { tenantId: s.tenant_id, action: 'service.crashed', resourceType: 'service', resourceId: s.id, serviceId: s.id, details });
    });
    this.deps.routesChanged();
    // Claimed by the controller's pass once the delay is over (every svcd looks each second).
    this.deps.controller.kick();
  }
}
