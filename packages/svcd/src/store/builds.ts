import { sql, type Kysely } from 'kysely';
import type { BuildRow, BuildStatus, BuildsTable, Database, NewBuildRow } from './schema.js';
import { nextServiceAfter, positionAt, type ListPosition } from './service-lists.js';

export class BuildStore {
  constructor(private readonly db: Kysely<Database>) {}

  async insert(row: NewBuildRow): Promise<void> {
    await this.db.insertInto('builds').values(row).execute();
  }

  /** Scoped by tenant and service: a foreign build and a missing one are the same undefined. */
  async find(tenantId: string, serviceId: string, id: string): Promise<BuildRow | undefined> {
    return this.db
      .selectFrom('builds')
      .selectAll()
      .where('id', '=', id)
      .where('tenant_id', '=', tenantId)
      .where('service_id', '=', serviceId)
      .executeTakeFirst();
  }

  async findAny(id: string): Promise<BuildRow | undefined> {
    return this.db.selectFrom('builds').selectAll().where('id', '=', id).executeTakeFirst();
  }

  /** Newest first. */
  async listForService(tenantId: string, serviceId: string, limit: number, offset: number): Promise<BuildRow[]> {
    return this.db
      .selectFrom('builds')
      .selectAll()
      .where('tenant_id', '=', tenantId)
      .where('service_id', '=', serviceId)
      .orderBy('created_at', 'desc')
      .orderBy('id', 'desc')
      .limit(limit)
      .offset(offset)
      .execute();
  }

  /** Newest first. */
  async listForTenant(tenantId: string, limit: number): Promise<BuildRow[]> {
    return this.db.selectFrom('builds').selectAll().where('tenant_id', '=', tenantId).orderBy('created_at', 'desc').orderBy('id', 'desc').limit(limit).execute();
  }

  async countWithStatus(tenantId: string, status: BuildStatus): Promise<number> {
    const r = await this.db
      .selectFrom('builds')
      .select((eb) => eb.fn.countAll<number | string>().as('n'))
      .where('tenant_id', '=', tenantId)
      .where('status', '=', status)
      .executeTakeFirstOrThrow();
    return Number(r.n);
  }

  /**
   * The base images (as recorded, JSON) of the service's latest build that recorded them, or,
   * for a service without one, of its tenant's latest: a guess at what its next build names.
   */
  async lastBaseImages(tenantId: string, serviceId: string): Promise<string | undefined> {
    const latest = (column: 'service_id' | 'tenant_id', id: string) =>
      this.db
        .selectFrom('builds')
        .select('base_images')
        .where(column, '=', id)
        .where('base_images', 'is not', null)
        .orderBy('created_at', 'desc')
        .orderBy('id', 'desc')
        .limit(1)
        .executeTakeFirst();
    const r = (await latest('service_id', serviceId)) ?? (await latest('tenant_id', tenantId));
    return r?.base_images ?? undefined;
  }

  /** Tenants with queued builds, each with its oldest queued build first. */
  async listQueued(limit: number): Promise<BuildRow[]> {
    return this.db.selectFrom('builds').selectAll().where('status', '=', 'queued').orderBy('created_at').orderBy('id').limit(limit).execute();
  }

  async listRunning(): Promise<BuildRow[]> {
    return this.db.selectFrom('builds').selectAll().where('status', '=', 'running').execute();
  }

  async listUnfinished(filter: { tenantId?: string; serviceId?: string }): Promise<BuildRow[]> {
    let q = this.db.selectFrom('builds').selectAll().where('status', 'in', ['queued', 'running']);
    if (filter.tenantId) q = q.where('tenant_id', '=', filter.tenantId);
    if (filter.serviceId) q = q.where('service_id', '=', filter.serviceId);
    return q.execute();
  }

  /** Moves a build only from one of `from`; false when it had moved on already (another process, a cancel). */
  async transition(id: string, from: BuildStatus[], patch: Partial<BuildsTable> & { status: BuildStatus }): Promise<boolean> {
    const r = await this.db.updateTable('builds').set(patch).where('id', '=', id).where('status', 'in', from).executeTakeFirst();
    return Number(r.numUpdatedRows) === 1;
  }

  /** Updates a running build held by `holder` (lease renewal, commit SHA); false when it is no longer so. */
  async updateRunning(id: string, holder: string, patch: Partial<BuildsTable>): Promise<boolean> {
    const r = await this.db.updateTable('builds').set(patch).where('id', '=', id).where('status', '=', 'running').where('holder', '=', holder).executeTakeFirst();
    return Number(r.numUpdatedRows) === 1;
  }

  // Output

  /**
   * Appends a chunk of output and drops the oldest chunks while the total is over `maxBytes`
   * (the tail is what explains a failure). One transaction per call: callers batch output.
   */
  async appendLog(id: string, chunk: string, maxBytes: number): Promise<void> {
    const bytes = Buffer.byteLength(chunk);
    await this.db.transaction().execute(async (tx) => {
      const last = await tx.selectFrom('build_logs').select((eb) => eb.fn.max<number | null>('seq').as('seq')).where('build_id', '=', id).executeTakeFirst();
      // eslint-disable-next-line @typescript-eslint/no-unnecessary-type-conversion -- a database value: Number() stays for a driver that gives int8 as text
      await tx.insertInto('build_logs').values({ build_id: id, seq: Number(last?.seq ?? 0) + 1, chunk }).execute();
      const b = await tx
        .updateTable('builds')
        .set({ log_bytes: sql<number>`log_bytes + ${bytes}` })
        .where('id', '=', id)
        .returning(['log_bytes'])
        .executeTakeFirst();
      // eslint-disable-next-line @typescript-eslint/no-unnecessary-type-conversion -- a database value: Number() stays for a driver that gives int8 as text
      let total = Number(b?.log_bytes ?? 0);
      if (total <= maxBytes) return;
      const chunks = await tx.selectFrom('build_logs').select(['seq', 'chunk']).where('build_id', '=', id).orderBy('seq').execute();
      const drop: number[] = [];
      for (const c of chunks) {
        if (total <= maxBytes || drop.length === chunks.length - 1) break;
        drop.push(c.seq);
        total -= Buffer.byteLength(c.chunk);
      }
      if (drop.length) await tx.deleteFrom('build_logs').where('build_id', '=', id).where('seq', 'in', drop).execute();
      await tx.updateTable('builds').set({ log_bytes: total, log_truncated: 1 }).where('id', '=', id).execute();
    });
  }

  /** Chunks after `afterSeq`, in order. */
  /** Up to `limit` chunks of the log after `afterSeq`, in order. */
  async logChunks(id: string, afterSeq: number, limit: number): Promise<Array<{ seq: number; chunk: string }>> {
    return this.db.selectFrom('build_logs').select(['seq', 'chunk']).where('build_id', '=', id).where('seq', '>', afterSeq).orderBy('seq').limit(limit).execute();
  }

  // Retention (retention/retention.ts): each call is one bounded statement (or two in one
  // transaction). A build's log goes first and its row keeps log_pruned_at; rows go later, and
  // only once their log is gone, so that no delete cascades into megabytes of chunks.

  /** Finished builds that finished before `cutoff` and still have their log, oldest first. */
  async logsFinishedBefore(cutoff: number, limit: number): Promise<string[]> {
    const rows = await this.db
      .selectFrom('builds')
      .select('id')
      .where('finished_at', '<', cutoff)
      .where('log_pruned_at', 'is', null)
      .where('status', 'in', FINISHED)
      .orderBy('finished_at')
      .limit(limit)
      .execute();
    return rows.map((r) => r.id);
  }

  /** The next service after `serviceId` (in id order) that has builds. */
  nextServiceAfter(serviceId: string): Promise<string | undefined> {
    return nextServiceAfter(this.db, 'builds', serviceId);
  }

  /** The service's build at `offset` in its list (newest first); undefined when it has fewer. */
  positionAt(serviceId: string, offset: number): Promise<ListPosition | undefined> {
    return positionAt(this.db, 'builds', serviceId, offset);
  }

  /** Finished builds of the service at `last` or listed after it (older) that still have their log, oldest first. */
  async logsUpTo(serviceId: string, last: ListPosition, limit: number): Promise<string[]> {
    const rows = await this.finishedUpTo(serviceId, last, limit, { logPruned: false }).execute();
    return rows.map((r) => r.id);
  }

  /** Ids of the service's finished builds at `last` or listed after it, oldest first, whose log is (not) pruned. */
  private finishedUpTo(serviceId: string, last: ListPosition, limit: number, o: { logPruned: boolean }) {
    return this.db
      .selectFrom('builds')
      .select('id')
      .where('service_id', '=', serviceId)
      .where('log_pruned_at', o.logPruned ? 'is not' : 'is', null)
      .where('status', 'in', FINISHED)
      .where((eb) => eb(eb.refTuple('created_at', 'id'), '<=', eb.tuple(last.created_at, last.id)))
      .orderBy('created_at')
      .orderBy('id')
      .limit(limit);
  }

  /**
   * Deletes up to `chunkLimit` of a finished build's log chunks; once none are left, marks the
   * log pruned at `now` (in the same transaction as the last delete). True when the log is gone.
   */
  async pruneLog(id: string, now: number, chunkLimit: number): Promise<boolean> {
    return this.db.transaction().execute(async (tx) => {
      const batch = tx.selectFrom('build_logs').select('seq').where('build_id', '=', id).orderBy('seq').limit(chunkLimit);
      const r = await tx.deleteFrom('build_logs').where('build_id', '=', id).where('seq', 'in', batch).executeTakeFirst();
      if (Number(r.numDeletedRows) >= chunkLimit) return false;
      await tx
        .updateTable('builds')
        .set({ log_pruned_at: now, log_bytes: 0 })
        .where('id', '=', id)
        .where('status', 'in', FINISHED)
        .where('log_pruned_at', 'is', null)
        .execute();
      return true;
    });
  }

  /** Deletes up to `limit` finished builds of the service at `last` or listed after it whose log is already pruned. */
  async deletePrunedUpTo(serviceId: string, last: ListPosition, limit: number): Promise<number> {
    const batch = this.finishedUpTo(serviceId, last, limit, { logPruned: true });
    const r = await this.db.deleteFrom('builds').where('id', 'in', batch).executeTakeFirst();
    return Number(r.numDeletedRows);
  }
}

const FINISHED: BuildStatus[] = ['succeeded', 'failed', 'cancelled'];
