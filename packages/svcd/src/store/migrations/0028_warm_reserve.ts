import { sql, type Kysely } from 'kysely';

/**
 * Warm containers kept for a tenant (environments/warm-pool.ts): a tenant that took a container
 * of a template from the pool gets the next one of it started on its own network already, so its
 * next create hands over a container that needs no network move. `tenant_id` is whom a row is
 * kept for (null: the shared pool, on the pool's network), `address` where a ready container
 * answers. At most one row per tenant and template waits (the index): a claimed one has left.
 */
export const warmReserve = {
  async up(db: Kysely<unknown>): Promise<void> {
    await db.schema.alterTable('warm_environments').addColumn('tenant_id', 'text').execute();
    await db.schema.alterTable('warm_environments').addColumn('address', 'text').execute();
    // Partial: written as SQL, the same on SQLite and PostgreSQL.
    await sql`CREATE UNIQUE INDEX warm_environments_kept_for ON warm_environments (tenant_id, template_id) WHERE status <> 'claimed'`.execute(db);
  },
};
