import { sql, type Kysely } from 'kysely';
import type { Database, NewWorkloadRow, WorkloadRow, WorkloadsTable } from './schema.js';

/** What an observation writes besides the generation it observed. */
export interface WorkloadObservation {
  observed_state: WorkloadsTable['observed_state'];
  endpoint?: string | null;
  driver_ref?: string | null;
  last_error: string | null;
  /** A new spec, observed with it (a warm-pool container handed to an environment is named otherwise). */
  spec?: string;
}

/** What a new workload's row is given by its caller: the rest follows from how it begins. */
type WorkloadIdentity = Pick<NewWorkloadRow, 'id' | 'tenant_id' | 'kind' | 'resource_id' | 'spec'>;

/**
 * The workloads' desired state and the controller's leases on it. Every write of the controller
 * is fenced by its lease (`lease_holder`): one whose lease lapsed and was taken over writes
 * nothing, whatever it was doing when it lost it.
 */
export class WorkloadStore {
  constructor(private readonly db: Kysely<Database>) {}

  /**
   * A new workload, to be run: generation 1, desired running, nothing observed yet. With `lease`,
   * claimed from the start by the request that inserts it (it may yet observe the workload
   * itself; the controller takes it once the lease is released or lapses).
   */
  async insertPending(
    w: WorkloadIdentity,
    now: number,
    lease?: { holder: string; untilMs: number },
  ): Promise<void> {
    await this.db
      .insertInto('workloads')
      .values(newRow(w, now, { desired_state: 'running', observed_generation: 0, observed_state: 'pending', lease_holder: lease?.holder ?? null, lease_expires_at_ms: lease?.untilMs ?? null }))
      .execute();
  }

  /**
   * A new workload that is to stay stopped and has never run (a service waiting for its first
   * build): desired and observed stopped at generation 1, so that the controller has nothing to
   * carry out. Nothing can run under its name yet (named after a resource created with it in the
   * same transaction); asking the engine to stop and remove it would find nothing, and its three
   * questions came while the upload that follows was being built (bench/build).
   */
  async insertNeverRun(w: WorkloadIdentity, now: number): Promise<void> {
    await this.db
      .insertInto('workloads')
      .values(newRow(w, now, { desired_state: 'stopped', observed_generation: 1, observed_state: 'stopped', lease_holder: null, lease_expires_at_ms: null }))
      .execute();
  }

  find(kind: WorkloadRow['kind'], resourceId: string): Promise<WorkloadRow | undefined> {
    return this.db.selectFrom('workloads').selectAll().where('kind', '=', kind).where('resource_id', '=', resourceId).executeTakeFirst();
  }

  /** The workload observed on this driver reference (a container id), of any kind. */
  findByDriverRef(ref: string): Promise<WorkloadRow | undefined> {
    return this.db.selectFrom('workloads').selectAll().where('driver_ref', '=', ref).executeTakeFirst();
  }

  findById(id: string): Promise<WorkloadRow | undefined> {
    return this.db.selectFrom('workloads').selectAll().where('id', '=', id).executeTakeFirst();
  }

  /**
   * A new request: the desired state, one generation on; the new generation, or null when there
   * is no such row, or (with `ifGeneration`) when it moved on since the caller read it (another
   * request, or another svcd acting on the same observation, came first). Resets the
   * engine-fault backoff; `retryAtMs` holds it back until then (a crash's restart delay).
   */
  async request(
    kind: WorkloadRow['kind'],
    resourceId: string,
    desired: WorkloadRow['desired_state'],
    now: number,
    o: { retryAtMs?: number; ifGeneration?: number } = {},
  ): Promise<number | null> {
    let q = this.db
      .updateTable('workloads')
      .set((eb) => ({ generation: eb('generation', '+', 1), desired_state: desired, retry_at_ms: o.retryAtMs ?? null, attempts: 0, updated_at: now }))
      .where('kind', '=', kind)
      .where('resource_id', '=', resourceId);
    if (o.ifGeneration !== undefined) q = q.where('generation', '=', o.ifGeneration);
    const row = await q.returning('generation').executeTakeFirst();
    return row ? row.generation : null;
  }

  /**
   * The workload seen running at `generation` failed for good outside an apply (a crash loop
   * opened its circuit): observed failed, so that reconcile leaves it alone until a new request.
   */
  async observeFailed(kind: WorkloadRow['kind'], resourceId: string, generation: number, error: string, now: number): Promise<boolean> {
    const r = await this.db
      .updateTable('workloads')
      .set({ observed_state: 'failed', last_error: error, updated_at: now })
      .where('kind', '=', kind)
      .where('resource_id', '=', resourceId)
      .where('generation', '=', generation)
      .whereRef('observed_generation', '=', 'generation')
      .where('observed_state', '=', 'running')
      .executeTakeFirst();
    return Number(r.numUpdatedRows) === 1;
  }

  /**
   * Extends the holder's lease only while the row is still at `generation`: a write made in the
   * same transaction after it is fenced (the row stays locked to the commit, on PostgreSQL).
   */
  async confirmHeld(id: string, holder: string, generation: number, nowMs: number, leaseMs: number): Promise<boolean> {
    const r = await this.db
      .updateTable('workloads')
      .set({ lease_expires_at_ms: nowMs + leaseMs })
      .where('id', '=', id)
      .where('lease_holder', '=', holder)
      .where('generation', '=', generation)
      .executeTakeFirst();
    return Number(r.numUpdatedRows) === 1;
  }

  /** Rows whose observed generation lags, with no live lease and no pending retry. */
  lagging(nowMs: number, limit: number): Promise<WorkloadRow[]> {
    return this.db
      .selectFrom('workloads')
      .selectAll()
      .whereRef('observed_generation', '<', 'generation')
      .where((eb) => eb.or([eb('lease_expires_at_ms', 'is', null), eb('lease_expires_at_ms', '<=', nowMs)]))
      .where((eb) => eb.or([eb('retry_at_ms', 'is', null), eb('retry_at_ms', '<=', nowMs)]))
      .orderBy('updated_at')
      .limit(limit)
      .execute();
  }

  /** Rows the controller last saw running at their current generation. */
  observedRunning(): Promise<WorkloadRow[]> {
    return this.db
      .selectFrom('workloads')
      .selectAll()
      .where('desired_state', '=', 'running')
      .where('observed_state', '=', 'running')
      .whereRef('observed_generation', '=', 'generation')
      .execute();
  }

  /**
   * Takes the row's lease when it is free, lapsed or already this holder's, and no retry time
   * lies ahead (one set between the list of lagging rows and this claim, a crash's restart delay
   * for one, holds).
   */
  async claim(id: string, holder: string, nowMs: number, leaseMs: number): Promise<boolean> {
    const r = await this.db
      .updateTable('workloads')
      .set({ lease_holder: holder, lease_expires_at_ms: nowMs + leaseMs })
      .where('id', '=', id)
      .where((eb) => eb.or([eb('retry_at_ms', 'is', null), eb('retry_at_ms', '<=', nowMs)]))
      .where((eb) => eb.or([eb('lease_expires_at_ms', 'is', null), eb('lease_expires_at_ms', '<=', nowMs), eb('lease_holder', '=', holder)]))
      .executeTakeFirst();
    return Number(r.numUpdatedRows) === 1;
  }

  /** Extends this holder's lease; false when it is no longer this holder's. */
  async renew(id: string, holder: string, nowMs: number, leaseMs: number): Promise<boolean> {
    const r = await this.db
      .updateTable('workloads')
      .set({ lease_expires_at_ms: nowMs + leaseMs })
      .where('id', '=', id)
      .where('lease_holder', '=', holder)
      .executeTakeFirst();
    return Number(r.numUpdatedRows) === 1;
  }

  /**
   * Records what the holder saw at `generation` and frees the lease; false when the lease is not
   * its own any more or a newer request moved the generation on (then nothing is written).
   */
  async observe(id: string, holder: string, generation: number, o: WorkloadObservation, now: number): Promise<boolean> {
    const r = await this.db
      .updateTable('workloads')
      .set({ ...o, observed_generation: generation, lease_holder: null, lease_expires_at_ms: null, retry_at_ms: null, attempts: 0, updated_at: now })
      .where('id', '=', id)
      .where('lease_holder', '=', holder)
      .where('generation', '=', generation)
      .executeTakeFirst();
    return Number(r.numUpdatedRows) === 1;
  }

  /**
   * Frees the holder's lease without an observation, in one statement: to be tried again at
   * `retryAtMs` (null: at once), saying why, when the generation is still `generation`; a newer
   * request is tried at once, with nothing of the older one's trouble. True when the lease was
   * the holder's and the generation unchanged.
   */
  async release(id: string, holder: string, generation: number, retryAtMs: number | null, lastError: string | null, now: number): Promise<boolean> {
    const same = sql<boolean>`generation = ${generation}`;
    const row = await this.db
      .updateTable('workloads')
      .set({
        lease_holder: null,
        lease_expires_at_ms: null,
        retry_at_ms: sql`CASE WHEN ${same} THEN CAST(${retryAtMs} AS BIGINT) ELSE NULL END`,
        attempts: retryAtMs === null ? sql`attempts` : sql`CASE WHEN ${same} THEN attempts + 1 ELSE 0 END`,
        last_error: lastError === null ? sql`last_error` : sql`CASE WHEN ${same} THEN CAST(${lastError} AS TEXT) ELSE last_error END`,
        updated_at: now,
      })
      .where('id', '=', id)
      .where('lease_holder', '=', holder)
      .returning('generation')
      .executeTakeFirst();
    return row?.generation === generation;
  }

  /**
   * Deletes the row of a workload that is observed at its generation and that no controller
   * works on (a warm-pool container taken by an environment: from then on it is the
   * environment's); false when one does, or it moved on.
   */
  async forgetSettled(kind: WorkloadRow['kind'], resourceId: string): Promise<boolean> {
    const r = await this.db
      .deleteFrom('workloads')
      .where('kind', '=', kind)
      .where('resource_id', '=', resourceId)
      .where('lease_holder', 'is', null)
      .whereRef('observed_generation', '=', 'generation')
      .executeTakeFirst();
    return Number(r.numDeletedRows) === 1;
  }

  /** Deletes an absent workload the holder removed at its latest generation. */
  async deleteRemoved(id: string, holder: string, generation: number): Promise<boolean> {
    const r = await this.db
      .deleteFrom('workloads')
      .where('id', '=', id)
      .where('lease_holder', '=', holder)
      .where('generation', '=', generation)
      .where('desired_state', '=', 'absent')
      .executeTakeFirst();
    return Number(r.numDeletedRows) === 1;
  }

  /**
   * The workload seen running is gone (its container vanished, the engine lost it): observed
   * generation 0 makes it lag, and the controller applies it again. Only while nobody works on
   * it and nothing was requested since it was seen.
   */
  async markLost(id: string, generation: number, error: string, now: number): Promise<boolean> {
    const r = await this.db
      .updateTable('workloads')
      .set({ observed_generation: 0, observed_state: 'lost', last_error: error, updated_at: now })
      .where('id', '=', id)
      .where('generation', '=', generation)
      .whereRef('observed_generation', '=', 'generation')
      .where('lease_holder', 'is', null)
      .executeTakeFirst();
    return Number(r.numUpdatedRows) === 1;
  }

  /** Frees the leases an earlier run of the same instance held (holders are `<instance>/<boot>`). */
  async releaseEarlierBoots(instance: string, currentHolder: string): Promise<number> {
    const r = await this.db
      .updateTable('workloads')
      .set({ lease_holder: null, lease_expires_at_ms: null })
      .where('lease_holder', 'like', `${instance}/%`)
      .where('lease_holder', '!=', currentHolder)
      .executeTakeFirst();
    return Number(r.numUpdatedRows);
  }
}

/** A workload's row at generation 1, with nothing observed of it but what `state` says, and no error or retry. */
function newRow(
  w: WorkloadIdentity,
  now: number,
  state: Pick<NewWorkloadRow, 'desired_state' | 'observed_generation' | 'observed_state' | 'lease_holder' | 'lease_expires_at_ms'>,
): NewWorkloadRow {
  return { ...w, ...state, generation: 1, endpoint: null, driver_ref: null, retry_at_ms: null, last_error: null, created_at: now, updated_at: now };
}
