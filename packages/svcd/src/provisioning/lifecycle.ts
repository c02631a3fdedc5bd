// The life of a resource svcd runs for a tenant from an operator image (a database, a task
// board): `provisioning` -> `running` | `failed`; a suspension stops it (`stopped`, data kept)
// until it is used again; a lost container is brought back on its volume; on a cluster, a
// resource whose node is away is `unavailable` until it runs there again; delete takes the
// container and the volume. Each request writes the resource's record and its workload's desired
// state in one transaction; the workload controller (workloads/controller.ts) carries it out on
// whichever svcd claims it, and writes the outcome back here (observed). What differs between
// kinds (how to start it, how to tell it is ready) is the `provision` function the domain passes in.
import type { Activity } from '../activity/activity.js';
import { type Clock, unixSeconds } from '../clock.js';
import type { Applied } from '../runtime/index.js';
import type { Repositories, TenantRow, WorkloadRow } from '../store/index.js';
import type { WorkloadController, WorkloadOutcome, WorkloadRules, WorkloadSpecRecord } from '../workloads/controller.js';

/** The record fields every such resource has. */
export interface LifecycleRow {
  id: string;
  tenant_id: string;
  status: 'provisioning' | 'running' | 'stopped' | 'failed' | 'unavailable';
  desired_state: 'running' | 'stopped';
}

export interface LifecyclePatch {
  status?: LifecycleRow['status'];
  desired_state?: LifecycleRow['desired_state'];
  container_id?: string | null;
  last_error?: string | null;
  /** The cluster node its data is on (a swarm; none on a single engine). */
  node?: string;
  updated_at: number;
}

/** The store's repository of these records. */
export interface LifecycleRecords<R extends LifecycleRow> {
  findAny(id: string): Promise<R | undefined>;
  listForTenant(tenantId: string): Promise<R[]>;
  update(id: string, patch: LifecyclePatch): Promise<void>;
}

export interface LifecycleOptions<R extends LifecycleRow> {
  /** The workload kind; also names activity entries (`<kind>.failed`). */
  kind: 'database' | 'kanban';
  /** The records' repository, in or out of a transaction. */
  records(repos: Repositories): LifecycleRecords<R>;
  /** The engine name of the resource's container, also its volume's name. */
  workloadName(id: string): string;
  /** Applies the resource's workload and resolves once it is ready; throws with what went wrong. */
  provision(row: R, tenant: TenantRow, signal: AbortSignal): Promise<Applied>;
  controller: WorkloadController;
  store: Repositories & { transaction<T>(fn: (tx: Repositories) => Promise<T>): Promise<T> };
  activity: Activity;
  clock: Clock;
}

/** A record's last_error while the engine is away: svc provisions it again when the engine answers. */
export const ENGINE_UNAVAILABLE_NOW = 'container engine unavailable; svc starts it again when the engine answers';

/**
 * How long a suspension or a delete waits for the controller to have removed the containers: the
 * request answers within the API's 30 s either way, and the controller finishes the removal later.
 */
const SETTLE_TIMEOUT_MS = 10_000;

export class Lifecycle<R extends LifecycleRow> implements WorkloadRules {
  constructor(private readonly o: LifecycleOptions<R>) {
    o.controller.handle(o.kind, this);
  }

  /** Inside the transaction that inserts the record: its workload, to be run. */
  async added(tx: Repositories, row: R): Promise<void> {
    const spec: WorkloadSpecRecord = { name: this.o.workloadName(row.id), volumes: [this.o.workloadName(row.id)] };
    await tx.workloads.insertPending({ id: spec.name, tenant_id: row.tenant_id, kind: this.o.kind, resource_id: row.id, spec: JSON.stringify(spec) }, this.now());
  }

  /** After the transaction that inserted the record committed: the controller starts it now. */
  started(): void {
    this.o.controller.kick();
  }

  /** A resource stopped by a suspension starts again: it is being used. */
  async wake(row: R): Promise<void> {
    if (row.desired_state !== 'stopped') return;
    await this.o.store.transaction(async (tx) => {
      // The workload row first, in every transaction that writes both (the controller's commit
      // too): two transactions then wait on each other in one order, never in a deadlock.
      await tx.workloads.request(this.o.kind, row.id, 'running', this.now());
      await this.o.records(tx).update(row.id, { desired_state: 'running', status: 'provisioning', last_error: null, updated_at: this.now() });
    });
    this.o.controller.kick();
  }

  /** Suspension: containers stop (data kept); they stay stopped until used again. Waits until they are down. */
  async suspend(tenantId: string): Promise<void> {
    const rows = await this.o.records(this.o.store).listForTenant(tenantId);
    for (const r of rows) {
      await this.o.store.transaction(async (tx) => {
        await tx.workloads.request(this.o.kind, r.id, 'stopped', this.now());
        await this.o.records(tx).update(r.id, { desired_state: 'stopped', status: 'stopped', container_id: null, updated_at: this.now() });
      });
    }
    await Promise.all(rows.map((r) => this.o.controller.settled(this.o.kind, r.id, SETTLE_TIMEOUT_MS)));
  }

  /** Inside the transaction that deletes the record, before the delete: its workload is to go, with its volume. */
  async removing(tx: Repositories, id: string): Promise<void> {
    await tx.workloads.request(this.o.kind, id, 'absent', this.now());
  }

  /** After that transaction: waits until the container and the volume are gone (or the wait ends; the controller still removes them). */
  async removed(id: string): Promise<void> {
    await this.o.controller.settled(this.o.kind, id, SETTLE_TIMEOUT_MS);
  }

  async apply(w: WorkloadRow, signal: AbortSignal): Promise<Applied> {
    const r = await this.o.records(this.o.store).findAny(w.resource_id);
    if (!r) throw new Error(`the ${this.o.kind} record is gone`);
    // A tenant's record outlives its resources; none means the store was changed underneath.
    const tenant = await this.o.store.tenants.findById(r.tenant_id);
    if (!tenant) throw new Error('the tenant record is gone');
    return this.o.provision(r, tenant, signal);
  }

  async observed(tx: Repositories, w: WorkloadRow, outcome: WorkloadOutcome): Promise<void> {
    const records = this.o.records(tx);
    const now = this.now();
    switch (outcome.state) {
      case 'running':
        // Where it was placed, for good: its data is on that node from now on.
        await records.update(w.resource_id, { status: 'running', container_id: outcome.applied.ref, last_error: null, ...(outcome.applied.node === undefined ? {} : { node: outcome.applied.node }), updated_at: now });
        return;
      case 'stopped':
        await records.update(w.resource_id, { status: 'stopped', container_id: null, updated_at: now });
        return;
      case 'waiting':
        if (outcome.nodeUnavailable) {
          // Its node is away (the error names it): it runs there again once the node is back,
          // never elsewhere on an empty volume. Told once in the activity, when it begins.
          const before = await records.findAny(w.resource_id);
          await records.update(w.resource_id, { status: 'unavailable', last_error: outcome.error, updated_at: now });
          if (before && before.status !== 'unavailable') {
            await this.o.activity.record(tx, { tenantId: w.tenant_id, action: `${this.o.kind}.unavailable`, resourceType: this.o.kind, resourceId: w.resource_id, details: { error: outcome.error } });
          }
          return;
        }
        // The engine's fault, not the tenant's: the controller tries again once it answers.
        await records.update(w.resource_id, { status: 'provisioning', last_error: `${ENGINE_UNAVAILABLE_NOW}: ${outcome.error}`, updated_at: now });
        return;
      case 'failed':
        await records.update(w.resource_id, { status: 'failed', container_id: null, last_error: outcome.error, updated_at: now });
        await this.o.activity.record(tx, { tenantId: w.tenant_id, action: `${this.o.kind}.failed`, resourceType: this.o.kind, resourceId: w.resource_id, details: { error: outcome.error } });
        return;
      case 'absent':
        return;
    }
  }

  private now(): number {
    return unixSeconds(this.o.clock);
  }
}
