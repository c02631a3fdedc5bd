// The workload controller: brings what runs on the engine to what the store says should run.
// Requests (create, wake, suspend, delete) only write a workload's desired state and move its
// generation on, in the transaction of the resource's own record. The controller, on every svcd,
// claims rows whose observed generation lags under a lease on the row, renews the lease while
// it works, re-reads the generation while the driver applies (a newer request wins: the apply is
// aborted and the newer one applied), and writes back what it observed, fenced by its lease. A
// svcd killed at any point leaves a lease that lapses; any other svcd's controller takes the row
// over, and the driver's apply, idempotent by name, makes the result the same.
//
// Services (services/deployer.ts), databases and task boards (provisioning/lifecycle.ts) and
// environments (environments/workloads.ts) run under it.
import { type TimerHandle, unixSeconds } from '../clock.js';
import { LABELS, NodeUnavailableError, WARM_POOL_TENANT, connectionDropped, isSetAside, engineAnswers, isEngineFault, type Applied, type WorkloadDriver, type WorkloadInfo, type WorkloadKind } from '../runtime/index.js';
import type { Repositories, WorkloadObservation, WorkloadRow } from '../store/index.js';
import type { Platform } from '../platform.js';
import { Wakeups } from '../wakeups.js';

/** How often reconcile matches the store's workloads against the engine's (a periodic job). */
export const RECONCILE_EVERY_MS = 30_000;
/**
 * The same on a driver whose workloads move (Swarm reschedules a task to another node): a route
 * follows its workload within this (issue 21 asks for 10 s of the task running).
 */
export const MOVING_RECONCILE_EVERY_MS = 3_000;
/** How long a claim holds without renewal: another svcd takes the row over this long after this one died. */
export const WORKLOAD_LEASE_MS = 30_000;
/** How often a lagging row is looked for when nothing kicked the controller. */
const PASS_EVERY_MS = 1_000;
/** How often the generation is re-read while the driver applies. */
const GENERATION_CHECK_MS = 500;
/** Rows claimed per pass. */
const CLAIM_BATCH = 20;
/** After an engine fault: 1 s, 2 s, 4 s, ... up to 30 s before the next try. */
const RETRY_BASE_MS = 1_000;
const RETRY_MAX_MS = 30_000;
/**
 * While the node a workload's data is on is away, it is looked at again at least this often: a
 * node that is back is one listing of the nodes away, and its workload should follow in seconds.
 */
const NODE_RETRY_MAX_MS = 5_000;
/** Starts of one generation tried while the engine's connection drops mid-request (port.ts, connectionDropped). */
export const DROPPED_CONNECTION_TRIES = 3;
/** A dropped connection's message, as the last try wrote it into the row's last_error. */
const DROPPED_MESSAGE = /socket hang up|ECONNRESET|EPIPE/;

/** The part of a workload's spec the controller itself needs (the rest is the kind's, at apply time). */
export interface WorkloadSpecRecord {
  /** The engine name (also the name a removal goes by). */
  name: string;
  /** Named volumes that go with it when it is deleted. */
  volumes: string[];
  /** Stopped with this grace period before it is removed (the workload shuts down cleanly); absent: removed at once. */
  stopTimeoutS?: number;
  /**
   * Stopped, it keeps its container (an environment: what its commands installed outside the
   * workspace is still there when it starts again); removed only when it is to be absent.
   */
  keepStopped?: boolean;
}

/** What the controller observed, for the resource's own record. */
export type WorkloadOutcome =
  | { state: 'running'; applied: Applied }
  | { state: 'stopped' }
  | { state: 'absent' }
  /** The tenant's fault (an image that exits, a probe that never passes): not tried again until asked. */
  | { state: 'failed'; error: string }
  /**
   * The engine's fault, or (`nodeUnavailable`) the workload's node cannot run it now (its data is
   * there: a node down, drained or gone): tried again with backoff.
   */
  | { state: 'waiting'; error: string; nodeUnavailable?: boolean };

/** Runs `fn` in a transaction only while the work still holds its row (lease and generation); null when it does not. */
export type Fence = <T>(fn: (tx: Repositories) => Promise<T>) => Promise<T | null>;

/** What a kind of resource tells the controller. */
export interface WorkloadRules {
  /**
   * Applies the resource's workload through the driver; resolves once it is ready. `fenced`
   * runs a write of the kind's own in a transaction that first confirms, holding the row, that
   * this apply still has the lease and the generation (null, nothing written, when it lost them).
   */
  apply(w: WorkloadRow, signal: AbortSignal, fenced: Fence): Promise<Applied>;
  /** Writes the outcome onto the resource's record, inside the observation's transaction. */
  observed(tx: Repositories, w: WorkloadRow, outcome: WorkloadOutcome): Promise<void>;
  /**
   * Reconcile of a workload seen running at its generation, with what the driver says of it now
   * (null: gone). Without it, one that no longer runs is marked lost and applied again; a kind
   * whose generations are records of their own (a service's deployments) requests a new one.
   */
  check?(w: WorkloadRow, info: WorkloadInfo | null): Promise<void>;
}

export interface WorkloadControllerDeps extends Pick<Platform, 'store' | 'runtime' | 'clock' | 'timers' | 'log' | 'holder'> {
  /** The lease on a claimed row (tests shorten it); renewed three times per lease. */
  leaseMs?: number;
}

/**
 * A newer request moved the generation on while this one was applied: the controller's own watch
 * aborts with it, and a kind's apply throws it when it made the newer request itself (a
 * deployment interrupted by a dead svcd is recorded so and a new one requested).
 */
export class Superseded extends Error {}

/** The workloads a rolling apply set aside for one resource (named after its spec's name) and has not removed yet. */
export async function setAsideOf(runtime: Pick<WorkloadDriver, 'list'>, w: { tenantId: string; kind: WorkloadKind; resourceId: string; name: string }): Promise<WorkloadInfo[]> {
  return (await runtime.list({ tenantId: w.tenantId, kind: w.kind })).filter((c) => c.labels[LABELS.resource] === w.resourceId && isSetAside(c.name, w.name));
}

export function parseSpecRecord(w: Pick<WorkloadRow, 'spec'>): WorkloadSpecRecord {
  return JSON.parse(w.spec) as WorkloadSpecRecord;
}

/** The workload a poll of the store waits on, as nextChange() files it and wakeWaiters() finds it. */
function waiterKey(kind: WorkloadRow['kind'], resourceId: string): string {
  return `${kind}/${resourceId}`;
}

export class WorkloadController {
  private readonly rules = new Map<WorkloadRow['kind'], WorkloadRules>();
  /** Rows this process works on now, to await them on close (ownership is the lease in the store). */
  private readonly working = new Map<string, { row: WorkloadRow; controller: AbortController; done: Promise<void> }>();
  /** Polls of the store (settled(), a service's ?wait) waiting to read it again, by the workload they wait on (`kind/resourceId`). */
  private readonly workEnded = new Wakeups();
  private ticker: TimerHandle | null = null;
  private pass: Promise<void> | null = null;
  private passAgain = false;
  private closed = false;

  constructor(private readonly deps: WorkloadControllerDeps) {}

  /** The rules of one kind of resource (registered at start-up, before start()). */
  handle(kind: WorkloadRow['kind'], rules: WorkloadRules): void {
    this.rules.set(kind, rules);
  }

  start(): void {
    this.ticker ??= this.deps.timers.setInterval(() => this.kick(), PASS_EVERY_MS);
    this.kick();
  }

  /**
   * Looks for lagging rows now (after a request of this process), or once more after the pass
   * under way; and re-reads the generation of the rows this process applies, so that a request
   * made here (a cancel, a newer deploy) stops an apply at once rather than at the next check.
   */
  kick(): void {
    if (this.closed) return;
    for (const w of this.working.values()) void this.checkGeneration(w.row, w.controller);
    if (this.pass) {
      this.passAgain = true;
      return;
    }
    this.pass = this.claimLagging()
      .catch((err: unknown) => this.deps.log.warn({ err }, 'workload controller pass failed'))
      .finally(() => {
        this.pass = null;
        if (this.passAgain) {
          this.passAgain = false;
          this.kick();
        }
      });
  }

  /**
   * Waits until the controller (of any svcd) observed the resource's latest generation, or its
   * row is gone; false when that did not happen within timeoutMs, or when the controller tried
   * and will try again later (the engine refused or was away): the request stands, and is
   * carried out when it can be.
   */
  async settled(kind: WorkloadRow['kind'], resourceId: string, timeoutMs: number): Promise<boolean> {
    this.kick();
    // Real time, not the injected clock: this bounds how long a request waits on work done by
    // the engine or another process (as the driver's own readiness wait), which a test's clock
    // held still would never end.
    const until = Date.now() + timeoutMs;
    // 20 ms at first (a stop on this svcd takes about that), growing to half a second.
    for (let pauseMs = 20; ; pauseMs = Math.min(pauseMs * 2, 500)) {
      const w = await this.deps.store.workloads.find(kind, resourceId);
      if (!w || w.observed_generation >= w.generation) return true;
      if (w.attempts > 0 || Date.now() >= until || this.closed) return false;
      await this.nextChange(pauseMs, kind, resourceId);
    }
  }

  private wakeWaiters(w: WorkloadRow): void {
    this.workEnded.wake(waiterKey(w.kind, w.resource_id));
  }

  /**
   * A pause of a poll of the store (settled(), a service's ?wait), ended early when this
   * process's work on that workload ends (the store is read again then): a request answered by
   * its own svcd's controller does not wait out a pause. `signal` ends it too (the waiting request went).
   */
  nextChange(pauseMs: number, kind: WorkloadRow['kind'], resourceId: string, signal?: AbortSignal): Promise<void> {
    return this.workEnded.pause(pauseMs, waiterKey(kind, resourceId), signal);
  }

  /**
   * Workloads seen running whose container is no longer running (it vanished, the engine lost
   * it) are marked lost, which makes the controller apply them again on their volumes (or told to
   * their kind's check); containers of these kinds whose workload row is gone are removed. Run
   * on start and every 30 s under the job's lease; skipped while the engine does not answer
   * (every container would look vanished).
   */
  async reconcile(): Promise<void> {
    if (!(await engineAnswers(this.deps.runtime))) return;
    for (const w of await this.deps.store.workloads.observedRunning()) {
      if (this.working.has(w.id)) continue;
      // One workload's trouble (the store or the engine failing for it) does not hold up the rest.
      await this.reconcileOne(w).catch((err: unknown) => this.deps.log.warn({ err, workload: w.id }, 'reconcile of a workload failed; tried again on the next run'));
    }
    await this.removeOrphans();
    this.kick();
  }

  private async reconcileOne(w: WorkloadRow): Promise<void> {
    const info = await this.deps.runtime.inspect(w.driver_ref ?? parseSpecRecord(w).name);
    const rules = this.rules.get(w.kind);
    if (rules?.check) {
      await rules.check(w, info);
      return;
    }
    if (info?.state === 'running') return;
    const why = info ? `its container was found ${info.state}` : 'its container was gone';
    if (await this.deps.store.workloads.markLost(w.id, w.generation, why, unixSeconds(this.deps.clock))) {
      this.deps.log.warn({ workload: w.id, why }, 'a running workload was lost; applying it again');
    }
  }

  /**
   * Containers of the kinds under this controller whose workload row is gone (their resource
   * was deleted while a svcd died before removing them, or something outside svc started them
   * with svc's labels). A row is deleted only after its containers were removed, so a container
   * listed while its row exists is never taken. A container is its row's by the resource it is
   * labelled with, or by its name (the row's id: an environment's container from before
   * migration 0017 is labelled with its name). Warm-pool containers, labelled for no tenant, are
   * the warm pool's: it removes its own, and one handed to an environment keeps the pool's
   * labels (the environment's row has its id as driver_ref). And containers that a rolling apply
   * set aside and its svcd, dying, left running.
   */
  private async removeOrphans(): Promise<void> {
    for (const kind of this.rules.keys()) {
      // Warm-pool containers are labelled as the environments they become.
      if (kind === 'warm' || kind === 'warm-kept') continue;
      for (const c of await this.deps.runtime.list({ kind })) {
        const resourceId = c.labels[LABELS.resource];
        if (c.labels[LABELS.tenant] === WARM_POOL_TENANT) continue;
        const row = resourceId === undefined ? undefined : await this.deps.store.workloads.find(kind, resourceId);
        if (row) {
          const settled = row.observed_generation === row.generation && row.lease_holder === null;
          // A container a rolling apply set aside, left by a svcd that died before removing it:
          // removed once nothing applies the row (an apply under way still serves from it).
          if (settled && isSetAside(c.name, parseSpecRecord(row).name)) {
            await this.deps.runtime.remove(c.id);
            this.deps.log.info({ container: c.id, kind, resource: resourceId }, 'removed a container a redeploy set aside');
          }
          // A second workload under the row's name, not the one it runs: a driver whose names are
          // labels (a swarm) has one when two svcd raced to apply the row (one lost its lease
          // mid-way). Removed once the row is settled running on the other.
          // Only while the one it runs is there and running (as the engine names it: never c).
          if (settled && row.observed_state === 'running' && row.driver_ref !== null && c.id !== row.driver_ref && c.name === parseSpecRecord(row).name) {
            const live = await this.deps.runtime.inspect(row.driver_ref);
            if (live?.state !== 'running' || live.id === c.id) continue;
            await this.deps.runtime.remove(c.id);
            this.deps.log.info({ container: c.id, kind, resource: resourceId }, 'removed a second workload under the name of one that runs another');
          }
          continue;
        }
        if (await this.deps.store.workloads.findById(c.name)) continue;
        await this.deps.runtime.remove(c.id);
        this.deps.log.info({ container: c.id, kind, resource: resourceId }, 'removed an orphan container');
      }
    }
  }

  /** Kicks, and resolves once the passes that follow have claimed what they could (tests wait for a pass to have looked). */
  async passNow(): Promise<void> {
    this.kick();
    while (this.pass) await this.pass;
  }

  /** True while this process works on no row (tests wait for an aborted apply to have ended). */
  idle(): boolean {
    return this.working.size === 0;
  }

  /** Stops claiming; work under way is aborted and its leases freed, for another svcd to take over. */
  async close(): Promise<void> {
    this.closed = true;
    this.ticker?.cancel();
    for (const w of this.working.values()) w.controller.abort(new Error('svcd is shutting down'));
    await this.pass;
    await Promise.all([...this.working.values()].map((w) => w.done));
  }

  private async claimLagging(): Promise<void> {
    const now = this.deps.clock.now();
    for (const row of await this.deps.store.workloads.lagging(now, CLAIM_BATCH)) {
      if (this.closed || this.working.has(row.id) || !this.rules.has(row.kind)) continue;
      if (!(await this.deps.store.workloads.claim(row.id, this.deps.holder, now, this.leaseMs))) continue;
      let claimed: WorkloadRow | undefined;
      try {
        // Read again under the lease: a request may have come between the list and the claim.
        claimed = await this.deps.store.workloads.findById(row.id);
      } catch (err) {
        // Not left held until it lapses: another pass (here or elsewhere) takes it again.
        await this.deps.store.workloads.release(row.id, this.deps.holder, row.generation, null, null, unixSeconds(this.deps.clock)).catch(() => {});
        throw err;
      }
      if (!claimed) continue;
      // Another controller observed it between the list and the claim (nothing left to do), or
      // this one began closing meanwhile (close() no longer waits for work it did not see start).
      // eslint-disable-next-line @typescript-eslint/no-unnecessary-condition -- close() may have run during the awaits above
      if (claimed.observed_generation >= claimed.generation || this.closed) {
        await this.deps.store.workloads.release(row.id, this.deps.holder, claimed.generation, null, null, unixSeconds(this.deps.clock));
        continue;
      }
      const controller = new AbortController();
      const done = this.work(claimed, controller)
        // work() handles what the engine and the driver throw; what is left is the store failing.
        .catch((err: unknown) => this.deps.log.error({ err, workload: row.id }, 'workload work failed'))
        .finally(() => this.working.delete(row.id));
      this.working.set(row.id, { row: claimed, controller, done });
    }
  }

  /** How long a claim holds without renewal (--workload-lease-seconds). */
  get leaseMs(): number {
    return this.deps.leaseMs ?? WORKLOAD_LEASE_MS;
  }

  private async work(w: WorkloadRow, controller: AbortController): Promise<void> {
    const rules = this.rules.get(w.kind);
    if (!rules) return;
    const { signal } = controller;
    const lease = { renewedAtMs: this.deps.clock.now() };
    const renewal = this.deps.timers.setInterval(() => void this.renew(w.id, controller, lease), this.leaseMs / 3);
    const watch = this.deps.timers.setInterval(() => void this.checkGeneration(w, controller), GENERATION_CHECK_MS);
    try {
      let observation: { row: WorkloadObservation; outcome: WorkloadOutcome } | 'deleted';
      try {
        observation = await this.carryOut(w, rules, signal);
      } catch (err) {
        await this.failed(w, rules, err, signal);
        return;
      }
      if (observation === 'deleted') return;
      try {
        await this.commit(w, rules, observation.row, observation.outcome);
        // A request waiting on this row reads it now, not after the lease is released.
        this.wakeWaiters(w);
      } catch (err) {
        // The store's trouble, not the workload's: tried again after a pause, not at once.
        const retryAt = this.deps.clock.now() + Math.min(RETRY_BASE_MS * 2 ** w.attempts, RETRY_MAX_MS);
        await this.deps.store.workloads.release(w.id, this.deps.holder, w.generation, retryAt, (err as Error).message, unixSeconds(this.deps.clock));
      }
    } finally {
      renewal.cancel();
      watch.cancel();
      // Whatever is left of the lease (an outcome not written, a row that moved on) is freed.
      await this.deps.store.workloads.release(w.id, this.deps.holder, w.generation, null, null, unixSeconds(this.deps.clock)).catch(() => {});
      this.wakeWaiters(w);
      if (!this.closed) this.kick();
    }
  }

  /** Brings the engine to the row's desired state; what to write back (or 'deleted': the row went with it). */
  private async carryOut(w: WorkloadRow, rules: WorkloadRules, signal: AbortSignal): Promise<{ row: WorkloadObservation; outcome: WorkloadOutcome } | 'deleted'> {
    if (w.desired_state === 'running') {
      const fenced: Fence = (fn) =>
        this.deps.store.transaction(async (tx) => {
          if (!(await tx.workloads.confirmHeld(w.id, this.deps.holder, w.generation, this.deps.clock.now(), this.leaseMs))) return null;
          return fn(tx);
        });
      const applied = await rules.apply(w, signal, fenced);
      const endpoint = `${applied.endpoint.host}${applied.endpoint.port === null ? '' : `:${applied.endpoint.port}`}`;
      return { row: { observed_state: 'running', endpoint, driver_ref: applied.ref, last_error: null }, outcome: { state: 'running', applied } };
    }
    const spec = parseSpecRecord(w);
    if (spec.stopTimeoutS !== undefined) await this.deps.runtime.stop(w.driver_ref ?? spec.name, spec.stopTimeoutS);
    if (w.desired_state === 'stopped' && spec.keepStopped) {
      return { row: { observed_state: 'stopped', endpoint: null, driver_ref: w.driver_ref, last_error: null }, outcome: { state: 'stopped' } };
    }
    await this.deps.runtime.remove(w.driver_ref ?? spec.name);
    if (w.driver_ref) await this.deps.runtime.remove(spec.name);
    // What a rolling apply set aside and had not removed yet (it was stopped or deleted meanwhile):
    // only services are applied rolling (deployer.ts).
    if (w.kind === 'service') {
      for (const c of await setAsideOf(this.deps.runtime, { tenantId: w.tenant_id, kind: w.kind, resourceId: w.resource_id, name: spec.name })) await this.deps.runtime.remove(c.id);
    }
    if (w.desired_state === 'stopped') return { row: { observed_state: 'stopped', endpoint: null, driver_ref: null, last_error: null }, outcome: { state: 'stopped' } };
    for (const v of spec.volumes) await this.deps.runtime.removeVolume(v);
    await this.deps.runtime.releaseTenant(w.tenant_id);
    await this.deps.store.transaction(async (tx) => {
      if (await tx.workloads.deleteRemoved(w.id, this.deps.holder, w.generation)) await rules.observed(tx, w, { state: 'absent' });
    });
    return 'deleted';
  }

  /**
   * Writes the observation and the record's outcome in one transaction, only while the lease and
   * the generation are this work's: the fenced update comes first and holds the row, so a request
   * committing meanwhile (it writes the workload row first too) is either before it (and nothing
   * is written) or after it.
   */
  private async commit(w: WorkloadRow, rules: WorkloadRules, observation: WorkloadObservation, outcome: WorkloadOutcome): Promise<void> {
    await this.deps.store.transaction(async (tx) => {
      if (!(await tx.workloads.observe(w.id, this.deps.holder, w.generation, observation, unixSeconds(this.deps.clock)))) return;
      await rules.observed(tx, w, outcome);
    });
  }

  private async failed(w: WorkloadRow, rules: WorkloadRules, err: unknown, signal: AbortSignal): Promise<void> {
    const now = unixSeconds(this.deps.clock);
    // Superseded, the lease lost, or svcd closing: the lease is freed (by work) and the row
    // applied again at its latest generation, here or by another svcd.
    if (signal.aborted || err instanceof Superseded) {
      const reason: unknown = signal.aborted ? signal.reason : err;
      this.deps.log.info({ workload: w.id, reason: reason instanceof Error ? reason.message : String(reason) }, 'workload apply stopped');
      return;
    }
    const message = (err as Error).message;
    // A stop or a removal is never given up on: the engine is asked again until it is done.
    // Starting fails for good only on the tenant's account (an image that exits, a probe that
    // never passes), not while the engine is away.
    // The engine's connection dropped mid-request (restarting under it, or too slow for the
    // client): tried again, unless the try before dropped too and this is the generation's
    // DROPPED_CONNECTION_TRIES-th try or later. A first drop is always tried again, so tries while
    // the engine was away (before it came back) never end it; only the last try's error is kept.
    const droppedInARow = w.attempts > 0 && w.last_error !== null && DROPPED_MESSAGE.test(w.last_error);
    // Its node away is neither the tenant's fault nor for good: it runs again when the node is back.
    const nodeUnavailable = err instanceof NodeUnavailableError;
    const retry =
      nodeUnavailable ||
      w.desired_state !== 'running' ||
      isEngineFault(err) ||
      (connectionDropped(err) && !(droppedInARow && w.attempts + 1 >= DROPPED_CONNECTION_TRIES)) ||
      !(await engineAnswers(this.deps.runtime));
    if (retry) {
      const retryAt = this.deps.clock.now() + Math.min(RETRY_BASE_MS * 2 ** w.attempts, nodeUnavailable ? NODE_RETRY_MAX_MS : RETRY_MAX_MS);
      await this.deps.store.transaction(async (tx) => {
        if (!(await tx.workloads.release(w.id, this.deps.holder, w.generation, retryAt, message, now))) return;
        if (w.desired_state === 'running') await rules.observed(tx, w, { state: 'waiting', error: message, ...(nodeUnavailable ? { nodeUnavailable } : {}) });
      });
      this.deps.log.warn({ err, workload: w.id, desired: w.desired_state }, 'workload not brought to its desired state; tried again later');
      return;
    }
    await this.commit(w, rules, { observed_state: 'failed', endpoint: null, driver_ref: null, last_error: message }, { state: 'failed', error: message });
    this.deps.log.warn({ workload: w.id, error: message }, 'workload failed');
  }

  /**
   * Extends the lease. Lost (another svcd holds it), or not renewed for so long that it may have
   * lapsed (the store did not answer): the work stops before another svcd's can overlap it.
   */
  private async renew(id: string, controller: AbortController, lease: { renewedAtMs: number }): Promise<void> {
    const now = this.deps.clock.now();
    // Checked before each try too: a renewal that hangs must not keep the work going past its lease.
    if (now - lease.renewedAtMs >= (this.leaseMs * 2) / 3) controller.abort(new Error('the workload lease could not be renewed: stopped before it lapsed'));
    if (controller.signal.aborted) return;
    try {
      if (await this.deps.store.workloads.renew(id, this.deps.holder, now, this.leaseMs)) lease.renewedAtMs = now;
      else controller.abort(new Error('another svcd took this workload over: its lease was not renewed in time'));
    } catch (err) {
      this.deps.log.warn({ err, workload: id }, 'workload lease renewal failed');
      // One more renewal is due before the lease lapses; past that, stop first.
      if (now - lease.renewedAtMs >= (this.leaseMs * 2) / 3) controller.abort(new Error('the workload lease could not be renewed: stopped before it lapsed'));
    }
  }

  private async checkGeneration(w: WorkloadRow, controller: AbortController): Promise<void> {
    try {
      const now = await this.deps.store.workloads.findById(w.id);
      if (!now || now.generation !== w.generation) controller.abort(new Superseded('a newer request for this workload came in'));
    } catch {
      // Read again at the next check.
    }
  }
}
