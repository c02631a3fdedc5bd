import type { Kysely } from 'kysely';

/**
 * Usage samples and their rollups. The same tables serve in svc's own database (the default) and
 * in a separate metering database (--metering-database-url), which runs only this migration.
 */
export const metering = {
  async up(db: Kysely<unknown>): Promise<void> {
    await db.schema
      .createTable('usage_samples')
      .addColumn('container_id', 'text', (c) => c.notNull())
      .addColumn('sampled_at', 'bigint', (c) => c.notNull())
      .addColumn('tenant_id', 'text', (c) => c.notNull())
      .addColumn('kind', 'text', (c) => c.notNull())
      .addColumn('resource_id', 'text', (c) => c.notNull())
      .addColumn('seconds', 'bigint', (c) => c.notNull())
      .addColumn('cpu_micros', 'bigint', (c) => c.notNull())
      .addColumn('net_rx_bytes', 'bigint', (c) => c.notNull())
      .addColumn('net_tx_bytes', 'bigint', (c) => c.notNull())
      .addColumn('disk_read_bytes', 'bigint', (c) => c.notNull())
      .addColumn('disk_write_bytes', 'bigint', (c) => c.notNull())
      .addColumn('cpu_micros_delta', 'bigint', (c) => c.notNull())
      .addColumn('net_rx_delta', 'bigint', (c) => c.notNull())
      .addColumn('net_tx_delta', 'bigint', (c) => c.notNull())
      .addColumn('disk_read_delta', 'bigint', (c) => c.notNull())
      .addColumn('disk_write_delta', 'bigint', (c) => c.notNull())
      .addColumn('memory_bytes', 'bigint', (c) => c.notNull())
      .addPrimaryKeyConstraint('usage_samples_pk', ['container_id', 'sampled_at'])
      .execute();
    await db.schema.createIndex('usage_samples_time').on('usage_samples').column('sampled_at').execute();
    await db.schema
      .createTable('usage_rollups')
      .addColumn('tenant_id', 'text', (c) => c.notNull())
      .addColumn('service_id', 'text', (c) => c.notNull())
      .addColumn('period', 'text', (c) => c.notNull())
      .addColumn('bucket_start', 'bigint', (c) => c.notNull())
      .addColumn('cpu_seconds', 'double precision', (c) => c.notNull())
      .addColumn('memory_avg_bytes', 'bigint', (c) => c.notNull())
      .addColumn('memory_peak_bytes', 'bigint', (c) => c.notNull())
      .addColumn('net_rx_bytes', 'bigint', (c) => c.notNull())
      .addColumn('net_tx_bytes', 'bigint', (c) => c.notNull())
      .addColumn('disk_read_bytes', 'bigint', (c) => c.notNull())
      .addColumn('disk_write_bytes', 'bigint', (c) => c.notNull())
      .addColumn('running_seconds', 'bigint', (c) => c.notNull())
      .addColumn('ticks', 'bigint', (c) => c.notNull())
      .addPrimaryKeyConstraint('usage_rollups_pk', ['tenant_id', 'service_id', 'period', 'bucket_start'])
      .execute();
    await db.schema.createIndex('usage_rollups_time').on('usage_rollups').columns(['period', 'bucket_start']).execute();
  },
};
