import { Kysely, PostgresDialect } from 'kysely';
import { Migrator } from 'kysely/migration';
import pg from 'pg';
import type { Database, RollupPeriod, UsageRollupRow, UsageSampleRow } from './schema.js';
import { metering } from './migrations/0009_metering.js';
import { migrationError } from './migrations/index.js';
import { pgTypes } from './pg-types.js';

/**
 * The metering store: usage samples and their rollups. By default the tables live in svc's own
 * database; with --metering-database-url they live in a PostgreSQL of their own, so that the
 * steady stream of sample writes never competes with the control plane's transactions, and an
 * outage of that database takes down metering only.
 */
export class MeteringStore {
  constructor(
    private readonly db: Kysely<Database>,
    /** Resolves once the tables exist (a separate store creates them on first use). */
    private readonly ready: () => Promise<void> = async () => {},
    /** Set for a store of its own, which close() then shuts. */
    private readonly own: boolean = false,
  ) {}

  /** Samples of one pass; a container's reading at the same second is kept once. */
  async insertSamples(rows: UsageSampleRow[]): Promise<void> {
    await this.ready();
    // Batches keep each statement well under SQLite's and PostgreSQL's parameter limits.
    for (let i = 0; i < rows.length; i += 200) {
      await this.db
        .insertInto('usage_samples')
        .values(rows.slice(i, i + 200))
        .onConflict((oc) => oc.columns(['container_id', 'sampled_at']).doNothing())
        .execute();
    }
  }

  /**
   * The newest sample of each of these containers (those that have one), whichever svcd's pass
   * wrote it: what a pass takes its deltas against. Read in batches among the samples since
   * `since` (unix seconds: a short range of each container's key, not its whole history), and
   * one by one for the containers with none since (new ones, and after a long gap).
   */
  async lastSamples(containerIds: readonly string[], since: number): Promise<Map<string, UsageSampleRow>> {
    await this.ready();
    const found = new Map<string, UsageSampleRow>();
    for (let i = 0; i < containerIds.length; i += 200) {
      const latest = this.db
        .selectFrom('usage_samples')
        .select((eb) => ['container_id', eb.fn.max('sampled_at').as('at')])
        .where('container_id', 'in', containerIds.slice(i, i + 200))
        .where('sampled_at', '>=', since)
        .groupBy('container_id')
        .as('latest');
      const rows = await this.db
        .selectFrom('usage_samples as s')
        .innerJoin(latest, (join) => join.onRef('latest.container_id', '=', 's.container_id').onRef('latest.at', '=', 's.sampled_at'))
        .selectAll('s')
        .execute();
      for (const r of rows) found.set(r.container_id, r);
    }
    for (const id of containerIds) {
      if (found.has(id)) continue;
      const older = await this.lastSample(id);
      if (older) found.set(id, older);
    }
    return found;
  }

  async lastSample(containerId: string): Promise<UsageSampleRow | undefined> {
    await this.ready();
    return this.db
      .selectFrom('usage_samples')
      .selectAll()
      .where('container_id', '=', containerId)
      .orderBy('sampled_at', 'desc')
      .limit(1)
      .executeTakeFirst();
  }

  /** Every sample taken in [from, to), unix seconds. */
  async samplesBetween(from: number, to: number): Promise<UsageSampleRow[]> {
    await this.ready();
    return this.db.selectFrom('usage_samples').selectAll().where('sampled_at', '>=', from).where('sampled_at', '<', to).execute();
  }

  /**
   * Replaces one bucket's rollups of every tenant at once (a rollup is recomputed, never added to).
   * Two passes may replace the same bucket at once (the scheduled pass and one run by hand, or two
   * svcds): on PostgreSQL neither sees the other's uncommitted rows when it deletes, so the rows go
   * in as upserts, and the later pass overwrites the earlier's instead of failing on the key; in
   * key order, so that two passes never wait on each other's rows crosswise (a deadlock). Rows
   * only the earlier pass wrote stay until the next pass, a minute later, replaces the bucket.
   */
  async replaceRollups(period: RollupPeriod, bucketStart: number, rows: UsageRollupRow[]): Promise<void> {
    await this.ready();
    const key = (r: UsageRollupRow) => `${r.tenant_id}\u0000${r.service_id}`;
    const inKeyOrder = [...rows].sort((a, b) => (key(a) < key(b) ? -1 : key(a) > key(b) ? 1 : 0));
    await this.db.transaction().execute(async (trx) => {
      await trx.deleteFrom('usage_rollups').where('period', '=', period).where('bucket_start', '=', bucketStart).execute();
      for (let i = 0; i < inKeyOrder.length; i += 200) {
        await trx
          .insertInto('usage_rollups')
          .values(inKeyOrder.slice(i, i + 200))
          .onConflict((oc) =>
            oc.columns(['tenant_id', 'service_id', 'period', 'bucket_start']).doUpdateSet((eb) => ({
              cpu_seconds: eb.ref('excluded.cpu_seconds'),
              memory_avg_bytes: eb.ref('excluded.memory_avg_bytes'),
              memory_peak_bytes: eb.ref('excluded.memory_peak_bytes'),
              net_rx_bytes: eb.ref('excluded.net_rx_bytes'),
              net_tx_bytes: eb.ref('excluded.net_tx_bytes'),
              disk_read_bytes: eb.ref('excluded.disk_read_bytes'),
              disk_write_bytes: eb.ref('excluded.disk_write_bytes'),
              running_seconds: eb.ref('excluded.running_seconds'),
              ticks: eb.ref('excluded.ticks'),
            })),
          )
          .execute();
      }
    });
  }

  /** Rollups in [from, to), oldest first: of every tenant, or of one ('' service: its totals). */
  async rollupsBetween(period: RollupPeriod, from: number, to: number, owner?: { tenantId: string; serviceId: string }): Promise<UsageRollupRow[]> {
    await this.ready();
    return this.db
      .selectFrom('usage_rollups')
      .selectAll()
      .where('period', '=', period)
      .where('bucket_start', '>=', from)
      .where('bucket_start', '<', to)
      .$if(owner !== undefined, (q) => q.where('tenant_id', '=', owner?.tenantId ?? '').where('service_id', '=', owner?.serviceId ?? ''))
      .orderBy('bucket_start')
      .execute();
  }

  async prune(cutoffs: { samplesBefore: number; hourlyBefore: number; dailyBefore: number }): Promise<void> {
    await this.ready();
    await this.db.deleteFrom('usage_samples').where('sampled_at', '<', cutoffs.samplesBefore).execute();
    await this.db.deleteFrom('usage_rollups').where('period', '=', 'hourly').where('bucket_start', '<', cutoffs.hourlyBefore).execute();
    await this.db.deleteFrom('usage_rollups').where('period', '=', 'daily').where('bucket_start', '<', cutoffs.dailyBefore).execute();
  }

  async close(): Promise<void> {
    if (this.own) await this.db.destroy();
  }
}

/**
 * A metering store in a PostgreSQL of its own. Its tables are created by the same migration as in
 * svc's database, tracked in its own migration table. The pool connects lazily, so svcd starts
 * while that database is down (metering answers 503 until it is back); the migration is retried
 * on each use until it has run.
 */
export function openMeteringStore(databaseUrl: string, onConnectionError: (err: Error) => void): MeteringStore {
  const pool = new pg.Pool({ connectionString: databaseUrl, max: 4, types: pgTypes });
  pool.on('error', onConnectionError);
  const db = new Kysely<Database>({ dialect: new PostgresDialect({ pool }) });
  let migrated: Promise<void> | null = null;
  const ready = () => {
    migrated ??= new Migrator({
      db,
      provider: { getMigrations: () => Promise.resolve({ '0001_metering': metering }) },
      migrationTableName: 'svc_metering_migration',
      migrationLockTableName: 'svc_metering_migration_lock',
    })
      .migrateToLatest()
      .then(({ error }) => {
        if (error) throw migrationError(error);
      })
      .catch((err: unknown) => {
        migrated = null; // tried again on the next use
        throw err;
      });
    return migrated;
  };
  return new MeteringStore(db, ready, true);
}
