import type { Kysely } from 'kysely';

export const builds = {
  async up(db: Kysely<unknown>): Promise<void> {
    await db.schema
      .createTable('builds')
      .addColumn('id', 'text', (c) => c.primaryKey())
      .addColumn('tenant_id', 'text', (c) => c.notNull().references('tenants.id'))
      // A service's builds go with it.
      .addColumn('service_id', 'text', (c) => c.notNull().references('services.id').onDelete('cascade'))
      .addColumn('status', 'text', (c) => c.notNull())
      .addColumn('source_type', 'text', (c) => c.notNull())
      .addColumn('source_url', 'text', (c) => c.notNull())
      .addColumn('source_ref', 'text')
      .addColumn('image', 'text', (c) => c.notNull())
      .addColumn('commit_sha', 'text')
      .addColumn('last_error', 'text')
      .addColumn('deployment_id', 'text')
      // The svcd process running it and until when its lease holds (renewed while it runs).
      .addColumn('holder', 'text')
      .addColumn('lease_until_ms', 'bigint')
      .addColumn('log_bytes', 'bigint', (c) => c.notNull().defaultTo(0))
      .addColumn('log_truncated', 'integer', (c) => c.notNull().defaultTo(0))
      .addColumn('created_at', 'bigint', (c) => c.notNull())
      .addColumn('started_at', 'bigint')
      .addColumn('finished_at', 'bigint')
      .addColumn('duration_ms', 'bigint')
      .execute();
    await db.schema.createIndex('builds_service').on('builds').columns(['service_id', 'created_at']).execute();
    await db.schema.createIndex('builds_tenant').on('builds').columns(['tenant_id', 'created_at']).execute();
    await db.schema.createIndex('builds_status').on('builds').columns(['status', 'created_at']).execute();

    // Output in chunks as it came; the oldest chunks are dropped past the cap.
    await db.schema
      .createTable('build_logs')
      .addColumn('build_id', 'text', (c) => c.notNull().references('builds.id').onDelete('cascade'))
      .addColumn('seq', 'integer', (c) => c.notNull())
      .addColumn('chunk', 'text', (c) => c.notNull())
      .addPrimaryKeyConstraint('build_logs_pk', ['build_id', 'seq'])
      .execute();

    await db.schema.alterTable('deployments').addColumn('build_id', 'text').execute();
  },
};
