// The store: every SQL statement of svcd lives below this folder. One typed query layer
// (Kysely) over two engines: SQLite (embedded default, better-sqlite3, WAL) and PostgreSQL
// (production and multi-instance, node-postgres). Repositories are thin classes over a
// Kysely handle, so the same ones serve inside and outside a transaction.
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import BetterSqlite3 from 'better-sqlite3';
import { Kysely, PostgresDialect, SqliteDialect, sql } from 'kysely';
import { Migrator } from 'kysely/migration';
import pg from 'pg';
import type { Database } from './schema.js';
import type { Dialect } from './dialect.js';
import { migrationError, migrationProvider } from './migrations/index.js';
import { withStatementCache } from './sqlite-statements.js';
import { WalCheckpointer } from './wal-checkpointer.js';
import { TenantStore } from './tenants.js';
import { ApiKeyStore } from './api-keys.js';
import { WebSessionStore } from './web-sessions.js';
import { ActivityStore } from './activity.js';
import { IdempotencyStore } from './idempotency.js';
import { JobLockStore } from './job-locks.js';
import { ServiceStore } from './services.js';
import { ServiceEnvStore } from './service-env.js';
import { DeploymentStore } from './deployments.js';
import { SettingsStore } from './settings.js';
import { SnapshotStore } from './snapshots.js';
import { ServiceDomainStore } from './service-domains.js';
import { BuildStore } from './builds.js';
import { SourceArchiveStore } from './source-archives.js';
import { DatabaseStore } from './databases.js';
import { KanbanStore } from './kanban.js';
import { EnvironmentStore } from './environments.js';
import { WarmPoolStore } from './warm-pool.js';
import { MeteringStore } from './metering.js';
import { HostNameStore } from './host-names.js';
import { SessionSlotStore } from './session-slots.js';
import { TenantDiskStore } from './tenant-disk.js';
import { WorkloadStore } from './workloads.js';
import { PublishedPortStore } from './published-ports.js';
import { pgTypes } from './pg-types.js';

export { isUniqueViolation } from './dialect.js';
export type { PortHolderTable } from './published-ports.js';
export type { Dialect } from './dialect.js';
export type * from './schema.js';
export type { QuotaColumns } from './tenants.js';
export type { KeyWithTenantStatus } from './api-keys.js';
export type { WebSessionForAuth } from './web-sessions.js';
export type { ActivityFilter } from './activity.js';
export type { ServicePatch } from './services.js';
export type { DatabasePatch } from './databases.js';
export type { KanbanPatch } from './kanban.js';
export type { EnvironmentPatch } from './environments.js';
export type { WorkloadObservation } from './workloads.js';
export { MeteringStore, openMeteringStore } from './metering.js';

/** The repositories, bound to the database or to one transaction. */
export interface Repositories {
  tenants: TenantStore;
  apiKeys: ApiKeyStore;
  webSessions: WebSessionStore;
  activity: ActivityStore;
  idempotency: IdempotencyStore;
  jobLocks: JobLockStore;
  services: ServiceStore;
  serviceEnv: ServiceEnvStore;
  deployments: DeploymentStore;
  settings: SettingsStore;
  snapshots: SnapshotStore;
  builds: BuildStore;
  sourceArchives: SourceArchiveStore;
  databases: DatabaseStore;
  kanban: KanbanStore;
  environments: EnvironmentStore;
  warmPool: WarmPoolStore;
  hostNames: HostNameStore;
  serviceDomains: ServiceDomainStore;
  sessionSlots: SessionSlotStore;
  tenantDisk: TenantDiskStore;
  workloads: WorkloadStore;
  publishedPorts: PublishedPortStore;
  /**
   * Runs `fn` once what was written through these repositories is committed: at once outside a
   * transaction, after the commit inside one, never when it rolls back. For what must not be
   * told of a change that did not happen (operator counters). `fn` must not throw: the change is
   * committed by then, and a throw would make the transaction's caller see a failure.
   */
  afterCommit(fn: () => void): void;
}

export interface Store extends Repositories {
  readonly dialect: Dialect;
  /** The metering tables in this database (used unless --metering-database-url names another). */
  readonly metering: MeteringStore;
  /** Runs `fn` in one transaction; it commits when `fn` resolves and rolls back when it throws. */
  transaction<T>(fn: (tx: Repositories) => Promise<T>): Promise<T>;
  ping(): Promise<void>;
  close(): Promise<void>;
}

function repositories(db: Kysely<Database>): Omit<Repositories, 'afterCommit'> {
  return {
    tenants: new TenantStore(db),
    apiKeys: new ApiKeyStore(db),
    webSessions: new WebSessionStore(db),
    activity: new ActivityStore(db),
    idempotency: new IdempotencyStore(db),
    jobLocks: new JobLockStore(db),
    services: new ServiceStore(db),
    serviceEnv: new ServiceEnvStore(db),
    deployments: new DeploymentStore(db),
    settings: new SettingsStore(db),
    snapshots: new SnapshotStore(db),
    builds: new BuildStore(db),
    sourceArchives: new SourceArchiveStore(db),
    databases: new DatabaseStore(db),
    kanban: new KanbanStore(db),
    environments: new EnvironmentStore(db),
    warmPool: new WarmPoolStore(db),
    hostNames: new HostNameStore(db),
    serviceDomains: new ServiceDomainStore(db),
    sessionSlots: new SessionSlotStore(db),
    tenantDisk: new TenantDiskStore(db),
    workloads: new WorkloadStore(db),
    publishedPorts: new PublishedPortStore(db),
  };
}

export interface StoreOptions {
  /** postgres://... or null for SQLite. */
  databaseUrl: string | null;
  /** Where the SQLite file lives (created if missing). */
  dataDir: string;
  /**
   * Errors of idle PostgreSQL connections (server restarted, connection terminated). The pool
   * replaces such connections itself; without a listener, Node would crash the process.
   */
  onConnectionError?: (err: Error) => void;
  /**
   * SQLite: how often the checkpoint worker passes (makes the write-ahead log durable, and
   * copies it into the database file once it holds checkpointPages; wal-checkpointer.ts).
   * Tests set them; svcd keeps the defaults.
   */
  checkpointEveryMs?: number;
  checkpointPages?: number;
  /** SQLite: the checkpoint worker failed and the main connection checkpoints again. */
  onCheckpointerFailure?: (err: Error) => void;
}

/** SQLite's own default for wal_autocheckpoint, in pages. */
const SQLITE_DEFAULT_AUTOCHECKPOINT_PAGES = 1000;
const WAL_SIZE_LIMIT_BYTES = 64 * 1024 * 1024;

export async function openStore(opts: StoreOptions): Promise<Store> {
  let dialect: Dialect;
  let db: Kysely<Database>;
  let checkpointer: WalCheckpointer | null = null;
  if (opts.databaseUrl !== null) {
    dialect = 'postgres';
    const pool = new pg.Pool({ connectionString: opts.databaseUrl, max: 10, types: pgTypes });
    pool.on('error', (err) => opts.onConnectionError?.(err));
    db = new Kysely<Database>({ dialect: new PostgresDialect({ pool }) });
  } else {
    dialect = 'sqlite';
    mkdirSync(opts.dataDir, { recursive: true });
    const path = join(opts.dataDir, 'svc.db');
    const file = new BetterSqlite3(path);
    file.pragma('journal_mode = WAL');
    // WAL with synchronous=NORMAL survives a process kill (SIGKILL) without losing commits;
    // only a power loss can drop the last transactions.
    file.pragma('synchronous = NORMAL');
    file.pragma('foreign_keys = ON');
    file.pragma('busy_timeout = 5000');
    // Checkpoints run on a worker thread, never inside one of svcd's commits (wal-checkpointer.ts).
    file.pragma('wal_autocheckpoint = 0');
    // A log that grew during a burst is cut back to this when it is next started afresh.
    file.pragma(`journal_size_limit = ${WAL_SIZE_LIMIT_BYTES}`);
    checkpointer = new WalCheckpointer(
      path,
      (err) => {
        if (file.open) {
          file.pragma(`wal_autocheckpoint = ${SQLITE_DEFAULT_AUTOCHECKPOINT_PAGES}`);
          // Nobody syncs the log every second any more: each commit does (a failed fdatasync may
          // also have dropped what it could not write, which a later one would not say).
          file.pragma('synchronous = FULL');
        }
        opts.onCheckpointerFailure?.(err);
      },
      { everyMs: opts.checkpointEveryMs, checkpointPages: opts.checkpointPages },
    );
    db = new Kysely<Database>({ dialect: new SqliteDialect({ database: withStatementCache(file) }) });
  }

  const migrator = new Migrator({ db, provider: migrationProvider(dialect) });
  // The checkpoint worker first: the main connection, closing last, then checkpoints what is left
  // and removes the log.
  const close = async () => {
    await checkpointer?.stop();
    await db.destroy();
  };
  const { error } = await migrator.migrateToLatest();
  if (error) {
    await close();
    throw migrationError(error);
  }

  return {
    dialect,
    ...repositories(db),
    afterCommit: (f) => f(),
    metering: new MeteringStore(db),
    transaction: async (fn) => {
      const committed: Array<() => void> = [];
      const result = await db.transaction().execute((trx) => fn({ ...repositories(trx), afterCommit: (f) => committed.push(f) }));
      for (const f of committed) f();
      return result;
    },
    ping: async () => {
      await sql`select 1`.execute(db);
    },
    close,
  };
}
