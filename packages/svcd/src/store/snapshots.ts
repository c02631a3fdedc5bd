import type { Kysely } from 'kysely';
import type { Database, NewSnapshotRow, SnapshotRow } from './schema.js';

export class SnapshotStore {
  constructor(private readonly db: Kysely<Database>) {}

  async insert(row: NewSnapshotRow): Promise<void> {
    await this.db.insertInto('snapshots').values(row).execute();
  }

  async find(tenantId: string, id: string): Promise<SnapshotRow | undefined> {
    return this.db.selectFrom('snapshots').selectAll().where('id', '=', id).where('tenant_id', '=', tenantId).executeTakeFirst();
  }

  async list(tenantId: string, limit: number, offset: number): Promise<SnapshotRow[]> {
    return this.db
      .selectFrom('snapshots')
      .selectAll()
      .where('tenant_id', '=', tenantId)
      .orderBy('created_at', 'desc')
      .orderBy('id', 'desc')
      .limit(limit)
      .offset(offset)
      .execute();
  }

  /** How many snapshots the tenant keeps (its quota counts them). */
  async countForTenant(tenantId: string): Promise<number> {
    const r = await this.db
      .selectFrom('snapshots')
      .select((eb) => eb.fn.countAll<number | string>().as('n'))
      .where('tenant_id', '=', tenantId)
      .executeTakeFirstOrThrow();
    return Number(r.n);
  }

  async delete(tenantId: string, id: string): Promise<boolean> {
    const r = await this.db.deleteFrom('snapshots').where('id', '=', id).where('tenant_id', '=', tenantId).executeTakeFirst();
    return Number(r.numDeletedRows) === 1;
  }

  /** A deleted service leaves its snapshots, no longer pointing at it. */
  async detachService(serviceId: string): Promise<void> {
    await this.db.updateTable('snapshots').set({ service_id: null }).where('service_id', '=', serviceId).execute();
  }
}
