import type { Kysely } from 'kysely';
import type { Dialect } from '../dialect.js';

export function foundation(dialect: Dialect) {
  return {
    async up(db: Kysely<unknown>): Promise<void> {
      await db.schema
        .createTable('tenants')
        .addColumn('id', 'text', (c) => c.primaryKey())
        .addColumn('name', 'text', (c) => c.notNull())
        .addColumn('name_key', 'text', (c) => c.notNull().unique())
        .addColumn('email', 'text', (c) => c.notNull())
        .addColumn('email_key', 'text', (c) => c.notNull().unique())
        .addColumn('status', 'text', (c) => c.notNull())
        .addColumn('created_at', 'bigint', (c) => c.notNull())
        .addColumn('updated_at', 'bigint', (c) => c.notNull())
        .addColumn('max_services', 'integer', (c) => c.notNull())
        .addColumn('max_databases', 'integer', (c) => c.notNull())
        .addColumn('max_builds_concurrent', 'integer', (c) => c.notNull())
        .addColumn('max_env_vars_per_service', 'integer', (c) => c.notNull())
        .addColumn('max_environments', 'integer', (c) => c.notNull())
        .addColumn('max_memory_mb', 'integer', (c) => c.notNull())
        .addColumn('max_cpu_cores', 'double precision', (c) => c.notNull())
        .addColumn('max_disk_gb', 'integer', (c) => c.notNull())
        .addColumn('api_rate_limit', 'integer', (c) => c.notNull())
        .execute();
      await db.schema.createIndex('tenants_status').on('tenants').column('status').execute();

      await db.schema
        .createTable('api_keys')
        .addColumn('id', 'text', (c) => c.primaryKey())
        .addColumn('tenant_id', 'text', (c) => c.notNull().references('tenants.id'))
        .addColumn('name', 'text', (c) => c.notNull())
        .addColumn('prefix', 'text', (c) => c.notNull())
        .addColumn('secret_hash', 'text', (c) => c.notNull())
        .addColumn('created_at', 'bigint', (c) => c.notNull())
        .addColumn('last_used_at', 'bigint')
        .addColumn('expires_at', 'bigint')
        .addColumn('revoked_at', 'bigint')
        .execute();
      await db.schema.createIndex('api_keys_tenant').on('api_keys').columns(['tenant_id', 'revoked_at']).execute();

      await db.schema
        .createTable('activity')
        .addColumn('seq', dialect === 'postgres' ? 'bigserial' : 'integer', (c) =>
          dialect === 'postgres' ? c.primaryKey() : c.primaryKey().autoIncrement(),
        )
        .addColumn('id', 'text', (c) => c.notNull().unique())
        .addColumn('tenant_id', 'text', (c) => c.notNull())
        .addColumn('action', 'text', (c) => c.notNull())
        .addColumn('resource_type', 'text', (c) => c.notNull())
        .addColumn('resource_id', 'text', (c) => c.notNull())
        .addColumn('service_id', 'text')
        .addColumn('details', 'text', (c) => c.notNull())
        .addColumn('created_at', 'bigint', (c) => c.notNull())
        .execute();
      await db.schema.createIndex('activity_tenant_seq').on('activity').columns(['tenant_id', 'seq']).execute();

      await db.schema
        .createTable('idempotency_keys')
        .addColumn('tenant_id', 'text', (c) => c.notNull())
        .addColumn('key', 'text', (c) => c.notNull())
        .addColumn('method', 'text', (c) => c.notNull())
        .addColumn('path', 'text', (c) => c.notNull())
        .addColumn('body_hash', 'text', (c) => c.notNull())
        .addColumn('state', 'text', (c) => c.notNull())
        .addColumn('status_code', 'integer')
        .addColumn('content_type', 'text')
        .addColumn('response_body', 'text')
        .addColumn('created_at', 'bigint', (c) => c.notNull())
        .addColumn('expires_at', 'bigint', (c) => c.notNull())
        .addPrimaryKeyConstraint('idempotency_keys_pk', ['tenant_id', 'key'])
        .execute();
      await db.schema.createIndex('idempotency_keys_expiry').on('idempotency_keys').column('expires_at').execute();

      await db.schema
        .createTable('job_locks')
        .addColumn('name', 'text', (c) => c.primaryKey())
        .addColumn('holder', 'text', (c) => c.notNull())
        .addColumn('expires_at_ms', 'bigint', (c) => c.notNull())
        .execute();
    },
  };
}
