import type { Kysely } from 'kysely';

export const environments = {
  async up(db: Kysely<unknown>): Promise<void> {
    await db.schema
      .createTable('environments')
      .addColumn('id', 'text', (c) => c.primaryKey())
      .addColumn('tenant_id', 'text', (c) => c.notNull().references('tenants.id'))
      .addColumn('name', 'text', (c) => c.notNull())
      .addColumn('template_id', 'text', (c) => c.notNull())
      .addColumn('image', 'text', (c) => c.notNull())
      .addColumn('status', 'text', (c) => c.notNull())
      .addColumn('lease_expires_at', 'bigint', (c) => c.notNull())
      // Set at expiry: the workspace is removed 24 h later unless the lease is extended.
      .addColumn('expired_at', 'bigint')
      .addColumn('container_id', 'text')
      // The container's address on the tenant network while it runs (previews dial it).
      .addColumn('address', 'text')
      .addColumn('last_error', 'text')
      .addColumn('created_at', 'bigint', (c) => c.notNull())
      .addColumn('updated_at', 'bigint', (c) => c.notNull())
      .addUniqueConstraint('environments_tenant_name', ['tenant_id', 'name'])
      .execute();
    await db.schema
      .createTable('previews')
      .addColumn('id', 'text', (c) => c.primaryKey())
      .addColumn('environment_id', 'text', (c) => c.notNull().references('environments.id').onDelete('cascade'))
      .addColumn('tenant_id', 'text', (c) => c.notNull())
      .addColumn('name', 'text', (c) => c.notNull())
      .addColumn('port', 'integer', (c) => c.notNull())
      .addColumn('created_at', 'bigint', (c) => c.notNull())
      .addUniqueConstraint('previews_environment_name', ['environment_id', 'name'])
      .execute();
  },
};
