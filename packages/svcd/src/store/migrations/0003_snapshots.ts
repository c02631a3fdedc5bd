import type { Kysely } from 'kysely';

export const snapshots = {
  async up(db: Kysely<unknown>): Promise<void> {
    await db.schema
      .createTable('snapshots')
      .addColumn('id', 'text', (c) => c.primaryKey())
      .addColumn('tenant_id', 'text', (c) => c.notNull().references('tenants.id'))
      // No foreign key: a snapshot outlives its service (that is what it is for).
      .addColumn('service_id', 'text')
      .addColumn('name', 'text', (c) => c.notNull())
      .addColumn('description', 'text', (c) => c.notNull())
      .addColumn('image', 'text', (c) => c.notNull())
      .addColumn('port', 'integer', (c) => c.notNull())
      .addColumn('sealed_env', 'text', (c) => c.notNull())
      .addColumn('env_keys', 'text', (c) => c.notNull())
      .addColumn('created_at', 'bigint', (c) => c.notNull())
      .execute();
    await db.schema.createIndex('snapshots_tenant').on('snapshots').columns(['tenant_id', 'created_at']).execute();
  },
};
