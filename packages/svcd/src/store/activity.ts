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
}
