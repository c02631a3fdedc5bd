import type { Kysely } from 'kysely';

export const services = {
  async up(db: Kysely<unknown>): Promise<void> {
    // Facts about this installation (its id labels every workload it runs).
    await db.schema
      .createTable('settings')
      .addColumn('key', 'text', (c) => c.primaryKey())
      .addColumn('value', 'text', (c) => c.notNull())
      .execute();

    await db.schema
      .createTable('services')
      .addColumn('id', 'text', (c) => c.primaryKey())
      .addColumn('tenant_id', 'text', (c) => c.notNull().references('tenants.id'))
      .addColumn('name', 'text', (c) => c.notNull())
      .addColumn('name_key', 'text', (c) => c.notNull())
      .addColumn('image', 'text', (c) => c.notNull())
      .addColumn('port', 'integer', (c) => c.notNull())
      .addColumn('status', 'text', (c) => c.notNull())
      .addColumn('desired_state', 'text', (c) => c.notNull())
      .addColumn('dns_label', 'text', (c) => c.notNull())
      .addColumn('last_error', 'text')
      .addColumn('container_id', 'text')
      // host:port of the running container on its tenant network: what the proxy routes to.
      .addColumn('upstream', 'text')
      .addColumn('crash_count', 'integer', (c) => c.notNull().defaultTo(0))
      .addColumn('crash_window_start', 'bigint')
      .addColumn('last_crash_at', 'bigint')
      .addColumn('circuit_open_at', 'bigint')
      .addColumn('created_at', 'bigint', (c) => c.notNull())
      .addColumn('updated_at', 'bigint', (c) => c.notNull())
      .addUniqueConstraint('services_tenant_name', ['tenant_id', 'name_key'])
      .execute();
    await db.schema.createIndex('services_tenant').on('services').columns(['tenant_id', 'created_at']).execute();
    await db.schema.createIndex('services_dns_label').on('services').column('dns_label').execute();

    await db.schema
      .createTable('service_env')
      .addColumn('service_id', 'text', (c) => c.notNull().references('services.id').onDelete('cascade'))
      .addColumn('key', 'text', (c) => c.notNull())
      .addColumn('sealed_value', 'text', (c) => c.notNull())
      .addColumn('updated_at', 'bigint', (c) => c.notNull())
      .addPrimaryKeyConstraint('service_env_pk', ['service_id', 'key'])
      .execute();

    await db.schema
      .createTable('deployments')
      .addColumn('id', 'text', (c) => c.primaryKey())
      .addColumn('service_id', 'text', (c) => c.notNull().references('services.id').onDelete('cascade'))
      .addColumn('tenant_id', 'text', (c) => c.notNull())
      .addColumn('status', 'text', (c) => c.notNull())
      .addColumn('reason', 'text', (c) => c.notNull())
      .addColumn('image', 'text', (c) => c.notNull())
      .addColumn('pull', 'integer', (c) => c.notNull().defaultTo(0))
      .addColumn('last_error', 'text')
      .addColumn('created_at', 'bigint', (c) => c.notNull())
      .addColumn('started_at', 'bigint')
      .addColumn('finished_at', 'bigint')
      .execute();
    await db.schema.createIndex('deployments_service').on('deployments').columns(['service_id', 'created_at']).execute();
    await db.schema.createIndex('deployments_status').on('deployments').column('status').execute();
  },
};
