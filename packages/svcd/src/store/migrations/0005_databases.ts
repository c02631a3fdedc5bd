import type { Kysely } from 'kysely';

export const databases = {
  async up(db: Kysely<unknown>): Promise<void> {
    await db.schema
      .createTable('databases')
      .addColumn('id', 'text', (c) => c.primaryKey())
      .addColumn('tenant_id', 'text', (c) => c.notNull().references('tenants.id'))
      .addColumn('name', 'text', (c) => c.notNull())
      .addColumn('type', 'text', (c) => c.notNull())
      .addColumn('status', 'text', (c) => c.notNull())
      // What the tenant asked for: a suspension stops it, and it stays stopped until used.
      .addColumn('desired_state', 'text', (c) => c.notNull())
      .addColumn('image', 'text', (c) => c.notNull())
      .addColumn('username', 'text', (c) => c.notNull())
      .addColumn('database_name', 'text', (c) => c.notNull())
      .addColumn('sealed_password', 'text', (c) => c.notNull())
      // The loopback port of the host that reaches it; kept for the database's life.
      .addColumn('host_port', 'integer', (c) => c.notNull().unique())
      .addColumn('container_id', 'text')
      .addColumn('last_error', 'text')
      .addColumn('created_at', 'bigint', (c) => c.notNull())
      .addColumn('updated_at', 'bigint', (c) => c.notNull())
      .addUniqueConstraint('databases_tenant_name', ['tenant_id', 'name'])
      .execute();
  },
};
