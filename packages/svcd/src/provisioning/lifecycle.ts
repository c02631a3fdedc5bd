// The life of a resource svcd runs for a tenant from an operator image (a database, a task
// board): `provisioning` -> `running` | `failed`; a suspension stops it (`stopped`, data kept)
// until it is used again; reconcile brings a lost container back on its volume; delete takes
// the container and the volume. What differs (how to start it, how to tell it is ready) is the
// `provision` function the domain passes in.
import type { Logger } from 'pino';
import type { Activity } from '../activity/activity.js';
import { type Clock, type Timers, unixSeconds } from '../clock.js';
import { engineAnswers, isEngineFault, type Runtime } from '../runtime/index.js';
import type { Repositories, TenantRow } from '../store/index.js';
import { waitUntilReady, type ReadinessOptions } from './readiness.js';

/** The record fields every such resource has. */
export interface LifecycleRow {
  id: string;
  tenant_id: string;
  status: 'provisioning' | 'running' | 'stopped' | 'failed';
  desired_state: 'running' | 'stopped';
}

export interface LifecyclePatch {
  status?: LifecycleRow['status'];
  desired_state?: LifecycleRow['desired_state'];
  container_id?: string | null;
  last_error?: string | null;
  updated_at: number;
}

/** The store's repository of these records. */
export interface LifecycleRecords<R extends LifecycleRow> {
  findAny(id: string): Promise<R | undefined>;
  listAll(): Promise<R[]>;
  listForTenant(tenantId: string): Promise<R[]>;
  update(id: string, patch: LifecyclePatch): Promise<void>;
}

export interface LifecycleOptions<R extends LifecycleRow> {
  /** Names activity entries (`<kind>.failed`) and log fields. */
  kind: 'database' | 'kanban';
  records: LifecycleRecords<R>;
  /** The engine name of the resource's container, also its volume's name. */
  workloadName(id: string): string;
  /** Starts the container and resolves once it is ready (waitReady); throws with what went wrong. */
  provision(row: R, tenant: TenantRow): Promise<void>;
  runtime: Runtime;
  store: Repositories;
  activity: Activity;
  clock: Clock;
  timers: Timers;
  log: Logger;
}

/** A record's last_error while the engine is away: svc provisions it again when the engine answers. */
export const ENGINE_UNAVAILABLE_NOW = 'container engine unavailable; svc starts it again when the engine answers';

/** How often a wait for readiness re-reads the record (deleted, suspended?) and the container (exited?). */
const STATE_CHECK_MS = 500;

export class Lifecycle<R extends LifecycleRow> {
  /** Provisionings in flight: create returns at once, and one runs per resource at a time. */
  private readonly provisioning = new Map<string, Promise<void>>();
  private closed = false;

  constructor(private readonly o: LifecycleOptions<R>) {}

  /** Provisions in the background, unless a provisioning of it runs already (or svcd is closing). */
  start(id: string): void {
    if (this.closed || this.provisioning.has(id)) return;
    const p = this.run(id)
      .catch((err: unknown) => this.o.log.error({ err, [this.o.kind]: id }, `${this.o.kind} provisioning failed`))
      .finally(() => this.provisioning.delete(id));
    this.provisioning.set(id, p);
  }

  /** A resource stopped by a suspension starts again: it is being used. */
  async wake(row: R): Promise<void> {
    if (row.desired_state !== 'stopped') return;
    await this.o.records.update(row.id, { desired_state: 'running', status: 'provisioning', last_error: null, updated_at: this.now() });
    this.start(row.id);
  }

  /** Suspension: containers stop (data kept); they stay stopped until used again. */
  async suspend(tenantId: string): Promise<void> {
    for (const r of await this.o.records.listForTenant(tenantId)) {
      await this.o.records.update(r.id, { desired_state: 'stopped', status: 'stopped', container_id: null, updated_at: this.now() });
      await this.provisioning.get(r.id);
      await this.o.runtime.removeWorkload(this.o.workloadName(r.id));
    }
  }

  /**
   * Brings records and containers together (on start and every 30 s, under the store lease of
   * its job): one that should run but has no running container, or whose provisioning was
   * interrupted, is provisioned again on its volume.
   */
  async reconcile(): Promise<void> {
    for (const r of await this.o.records.listAll()) {
      if (r.desired_state !== 'running' || this.provisioning.has(r.id)) continue;
      const w = await this.o.runtime.inspectWorkload(this.o.workloadName(r.id));
      if (r.status === 'provisioning' || (r.status === 'running' && w?.state !== 'running')) this.start(r.id);
    }
  }

  /** After its record is gone: the container, the volume with the data, and an unused tenant network. */
  async removeAll(tenantId: string, id: string): Promise<void> {
    await this.provisioning.get(id);
    await this.o.runtime.removeWorkload(this.o.workloadName(id));
    await this.o.runtime.removeVolume(this.o.workloadName(id));
    await this.o.runtime.releaseTenantIfUnused(tenantId);
  }

  /** waitReady's check: gives up when the resource is no longer wanted or its container ended. */
  private stillStarting(id: string, what: string): (lastProbeError: string) => Promise<void> {
    return async (last) => {
      if (!(await this.stillWanted(id))) throw new Error('stopped');
      const w = await this.o.runtime.inspectWorkload(this.o.workloadName(id));
      if (w && w.state !== 'running' && w.state !== 'restarting' && w.state !== 'created') {
        throw new Error(`the ${what} container exited (${w.exitCode}) before it was ready: ${last}`);
      }
    };
  }

  async close(): Promise<void> {
    this.closed = true;
    await Promise.all([...this.provisioning.values()]);
  }

  /**
   * Waits until `probe` passes, giving up when the resource is no longer wanted (deleted,
   * suspended) or its container ended first (`what` names it in that error).
   */
  waitReady(id: string, what: string, o: Pick<ReadinessOptions, 'probe' | 'timeoutMs' | 'probeEveryMs' | 'probeTimeoutMs'>): Promise<void> {
    return waitUntilReady({ ...o, clock: this.o.clock, timers: this.o.timers, check: this.stillStarting(id, what), checkEveryMs: STATE_CHECK_MS });
  }

  private async run(id: string): Promise<void> {
    const r = await this.o.records.findAny(id);
    if (!r) return;
    // A tenant's record outlives its resources; none means the store was changed underneath.
    const tenant = await this.o.store.tenants.findById(r.tenant_id);
    if (!tenant) return;
    try {
      await this.o.provision(r, tenant);
      if (!(await this.stillWanted(id))) return;
      await this.o.records.update(id, { status: 'running', last_error: null, updated_at: this.now() });
      this.o.log.info({ [this.o.kind]: id }, `${this.o.kind} running`);
    } catch (err) {
      // Deleted or suspended meanwhile: whoever did that owns the container now.
      if (!(await this.stillWanted(id))) return;
      const message = (err as Error).message;
      if (isEngineFault(err) || !(await engineAnswers(this.o.runtime))) {
        // The engine's fault, not the tenant's: provisioning again is the reconciler's, once
        // the engine answers (reconcile() takes up records left provisioning).
        await this.o.records.update(id, { status: 'provisioning', last_error: `${ENGINE_UNAVAILABLE_NOW}: ${message}`, updated_at: this.now() });
        this.o.log.warn({ err, [this.o.kind]: id }, `${this.o.kind} waits for the container engine`);
        return;
      }
      await this.o.records.update(id, { status: 'failed', last_error: message, updated_at: this.now() });
      await this.o.runtime.removeWorkload(this.o.workloadName(id)).catch(() => {});
      await this.o.activity.record(this.o.store, { tenantId: r.tenant_id, action: `${this.o.kind}.failed`, resourceType: this.o.kind, resourceId: id, details: { error: message } });
    }
  }


  private async stillWanted(id: string): Promise<boolean> {
    const now = await this.o.records.findAny(id);
    return !!now && now.desired_state === 'running';
  }

  private now(): number {
    return unixSeconds(this.o.clock);
  }
}
