import type { Kysely } from 'kysely';
import type { ActivityRow, Database, NewActivityRow } from './schema.js';

export interface ActivityFilter {
  tenantId: string;
  resourceType?: string;
  action?: string;
  serviceId?: string;
  since?: number;
  limit: number;
  offset: number;
}

export class ActivityStore {
  constructor(private readonly db: Kysely<Database>) {}

  async insert(row: NewActivityRow): Promise<void> {
    await this.db.insertInto('activity').values(row).execute();
  }

  /** Newest first, scoped to one tenant. */
  async list(f: ActivityFilter): Promise<ActivityRow[]> {
    let q = this.db.selectFrom('activity').selectAll().where('tenant_id', '=', f.tenantId);
    if (f.resourceType !== undefined) q = q.where('resource_type', '=', f.resourceType);
    if (f.action !== undefined) q = q.where('action', '=', f.action);
    if (f.serviceId !== undefined) q = q.where('service_id', '=', f.serviceId);
    if (f.since !== undefined) q = q.where('created_at', '>=', f.since);
    return q.orderBy('seq', 'desc').limit(f.limit).offset(f.offset).execute();
  }

  // Retention (retention/retention.ts): each call is one bounded statement.

  /** Deletes up to `limit` entries created before `cutoff`, oldest first. */
  async deleteCreatedBefore(cutoff: number, limit: number): Promise<number> {
    const batch = this.db.selectFrom('activity').select('seq').where('created_at', '<', cutoff).orderBy('created_at').limit(limit);
    const r = await this.db.deleteFrom('activity').where('seq', 'in', batch).executeTakeFirst();
    return Number(r.numDeletedRows);
  }

  /** The next tenant after `tenantId` (in id order) that has entries: one index seek. */
  async nextTenantAfter(tenantId: string): Promise<string | undefined> {
    const r = await this.db
      .selectFrom('activity')
      .select((eb) => eb.fn.min<string | null>('tenant_id').as('tenant_id'))
      .where('tenant_id', '>', tenantId)
      .executeTakeFirst();
    return r?.tenant_id ?? undefined;
  }

  /** The seq of the tenant's entry at `offset` in the feed (newest first); undefined when it has fewer. */
  async seqAt(tenantId: string, offset: number): Promise<number | undefined> {
    const r = await this.db.selectFrom('activity').select('seq').where('tenant_id', '=', tenantId).orderBy('seq', 'desc').limit(1).offset(offset).executeTakeFirst();
    // eslint-disable-next-line @typescript-eslint/no-unnecessary-type-conversion -- a database value: Number() stays for a driver that gives int8 as text
    return r === undefined ? undefined : Number(r.seq);
  }

  /** Deletes up to `limit` of the tenant's entries with seq <= `seq`, oldest first. */
  async deleteUpTo(tenantId: string, seq: number, limit: number): Promise<number> {
    const batch = this.db.selectFrom('activity').select('seq').where('tenant_id', '=', tenantId).where('seq', '<=', seq).orderBy('seq').limit(limit);
    const r = await this.db.deleteFrom('activity').where('seq', 'in', batch).executeTakeFirst();
    return Number(r.numDeletedRows);
  }
}
