import type { Kysely } from 'kysely';

/**
 * Two tables for the limits on what a tenant may hold at once:
 * - `session_slots`: one row per log stream, exec or sync in progress, so that a tenant's
 *   concurrency cap holds across every svcd on the store. A row carries its holder's lease; the
 *   holder renews it while the session lasts, and a crashed holder's rows simply expire.
 * - `tenant_disk`: the disk a tenant's workloads took at the last measurement (volumes and
 *   containers' writable layers), which the disk quota is judged by.
 */
export const resourceSafety = {
  async up(db: Kysely<unknown>): Promise<void> {
    await db.schema
      .createTable('session_slots')
      .addColumn('id', 'text', (c) => c.primaryKey())
      .addColumn('tenant_id', 'text', (c) => c.notNull())
      .addColumn('kind', 'text', (c) => c.notNull())
      .addColumn('holder', 'text', (c) => c.notNull())
      .addColumn('expires_at_ms', 'bigint', (c) => c.notNull())
      .execute();
    await db.schema.createIndex('session_slots_tenant_kind').on('session_slots').columns(['tenant_id', 'kind']).execute();
    await db.schema.createIndex('session_slots_holder').on('session_slots').column('holder').execute();
    await db.schema
      .createTable('tenant_disk')
      .addColumn('tenant_id', 'text', (c) => c.primaryKey())
      .addColumn('used_bytes', 'bigint', (c) => c.notNull())
      .addColumn('measured_at', 'bigint', (c) => c.notNull())
      .execute();
  },
};
