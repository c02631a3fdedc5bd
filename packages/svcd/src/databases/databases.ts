// Managed PostgreSQL and Redis: one container per database on the tenant's network, from the
// operator's image (--postgres-image, --redis-image), its data on a named volume, generated
// credentials sealed at rest. Status `provisioning` until a protocol-level probe passes (a real
// PostgreSQL login, a Redis AUTH + PING), then `running`, or `failed` with `last_error`.
import { randomBytes, randomInt } from 'node:crypto';
import type { ConnectionString, CreateDatabaseRequest, DatabaseRecord } from '@svc/contract';
import { PAGE_LIMIT_DEFAULT, PAGE_LIMIT_MAX } from '@svc/contract';
import type { Logger } from 'pino';
import type { Activity } from '../activity/activity.js';
import { type Clock, type Timers, unixSeconds } from '../clock.js';
import { ConflictError, NotFoundError, QuotaExceededError, ValidationError } from '../errors.js';
import { hexId } from '../ids.js';
import type { Runtime } from '../runtime/index.js';
import type { Sealer } from '../secrets/sealer.js';
import { workloadLimits } from '../services/deployer.js';
import { isUniqueViolation, type DatabaseRow, type DatabaseType, type Store } from '../store/index.js';
import type { TenantResources } from '../tenants/tenants.js';
import { probeDatabase, type ProbeTarget } from './probes.js';

export interface DatabasesOptions {
  images: Record<DatabaseType, string>;
  /** Loopback host ports databases are published on, inclusive. */
  ports: { from: number; to: number };
  /** How long provisioning may take until the probe passes. */
  readyTimeoutMs?: number;
  /** Run under gVisor when the sandbox policy says so (the deployer's decision). */
  sandbox: () => Promise<boolean>;
}

export const DATABASE_READY_TIMEOUT_MS = 180_000;
const PROBE_EVERY_MS = 25;
const PROBE_TIMEOUT_MS = 3_000;
/** How often provisioning re-reads the record (deleted, suspended?) and the container (exited?). */
const STATE_CHECK_MS = 500;

/** What each type needs from its image: the public images' documented interface (DECISIONS.md). */
const KINDS = {
  postgres: { port: 5432, user: 'postgres', dataDir: '/var/lib/postgresql/data', username: 'svc', database: 'app' },
  redis: { port: 6379, user: 'redis', dataDir: '/data', username: 'default', database: null },
} as const;

export function databaseWorkloadName(id: string): string {
  return `svc-db-${id}`;
}

export function databaseView(d: DatabaseRow): DatabaseRecord {
  return {
    id: d.id,
    name: d.name,
    type: d.type,
    status: d.status,
    host: d.name,
    port: KINDS[d.type].port,
    host_port: d.host_port,
    username: d.username,
    database: d.type === 'postgres' ? d.database_name : null,
    last_error: d.last_error,
    created_at: d.created_at,
    updated_at: d.updated_at,
  };
}

export class Databases implements TenantResources {
  private readonly provisioning = new Map<string, Promise<void>>();
  private closed = false;

  constructor(
    private readonly store: Store,
    private readonly runtime: Runtime,
    private readonly sealer: Sealer,
    private readonly activity: Activity,
    private readonly clock: Clock,
    private readonly timers: Timers,
    private readonly log: Logger,
    private readonly audit: Logger,
    private readonly opts: DatabasesOptions,
  ) {}

  async create(tenantId: string, req: CreateDatabaseRequest): Promise<DatabaseRecord> {
    if (req.type !== 'postgres' && req.type !== 'redis') throw new ValidationError('type must be postgres or redis');
    const type: DatabaseType = req.type;
    const tenant = await this.store.tenants.findById(tenantId);
    if (!tenant) throw new NotFoundError('tenant');
    const kind = KINDS[type];
    const now = unixSeconds(this.clock);
    const password = randomBytes(24).toString('base64url'); // 192 bits, no characters a URL must escape
    let row: DatabaseRow | null = null;
    // A free host port: picked at random in the range, the unique constraint settles a race.
    for (let attempt = 0; attempt < 8 && !row; attempt++) {
      const candidate: DatabaseRow = {
        id: hexId(12),
        tenant_id: tenantId,
        name: req.name,
        type,
        status: 'provisioning',
        desired_state: 'running',
        image: this.opts.images[type],
        username: kind.username,
        database_name: kind.database ?? '',
        sealed_password: this.sealer.seal(password),
        host_port: await this.freePort(),
        container_id: null,
        last_error: null,
        created_at: now,
        updated_at: now,
      };
      try {
        await this.store.transaction(async (tx) => {
          if ((await tx.databases.count(tenantId)) >= tenant.max_databases) {
            throw new QuotaExceededError(`max_databases (${tenant.max_databases})`);
          }
          await tx.databases.insert(candidate);
          await this.activity.record(tx, { tenantId, action: 'database.created', resourceType: 'database', resourceId: candidate.id, details: { name: req.name, type } });
        });
        row = candidate;
      } catch (err) {
        if (!isUniqueViolation(err)) throw err;
        const taken = (await this.store.databases.listForTenant(tenantId)).some((d) => d.name === req.name);
        if (taken) throw new ConflictError(`a database named ${JSON.stringify(req.name)} exists`);
        // Otherwise the host port was taken meanwhile: pick another.
      }
    }
    if (!row) throw new ConflictError('no free host port for the database: try again');
    this.provision(row.id);
    return databaseView(row);
  }

  async list(tenantId: string, limit = PAGE_LIMIT_DEFAULT, offset = 0): Promise<DatabaseRecord[]> {
    return (await this.store.databases.list(tenantId, Math.min(limit, PAGE_LIMIT_MAX), offset)).map(databaseView);
  }

  async get(tenantId: string, id: string): Promise<DatabaseRecord> {
    return databaseView(await this.row(tenantId, id));
  }

  /**
   * Reveals the credentials (audit-logged, activity entry). A database stopped by a suspension
   * starts again here: revealing its connection string is what using it means to the API.
   */
  async connectionString(tenantId: string, id: string): Promise<ConnectionString> {
    const d = await this.row(tenantId, id);
    const password = this.sealer.open(d.sealed_password);
    await this.activity.record(this.store, { tenantId, action: 'database.connection_revealed', resourceType: 'database', resourceId: id });
    this.audit.info({ audit: true, event: 'database.connection_revealed', tenant_id: tenantId, database_id: id }, 'database connection string revealed');
    if (d.desired_state === 'stopped') {
      await this.store.databases.update(id, { desired_state: 'running', status: 'provisioning', last_error: null, updated_at: unixSeconds(this.clock) });
      this.provision(id);
    }
    const path = d.type === 'postgres' ? `/${d.database_name}` : '';
    const scheme = d.type === 'postgres' ? 'postgres' : 'redis';
    const auth = `${encodeURIComponent(d.username)}:${encodeURIComponent(password)}`;
    return {
      connection_string: `${scheme}://${auth}@127.0.0.1:${d.host_port}${path}`,
      internal_connection_string: `${scheme}://${auth}@${d.name}:${KINDS[d.type].port}${path}`,
      password,
    };
  }

  /** Removes the container and the volume with its data. */
  async delete(tenantId: string, id: string): Promise<void> {
    const d = await this.row(tenantId, id);
    await this.store.transaction(async (tx) => {
      if (!(await tx.databases.delete(tenantId, id))) throw new NotFoundError('database');
      await this.activity.record(tx, { tenantId, action: 'database.deleted', resourceType: 'database', resourceId: id, details: { name: d.name } });
    });
    await this.provisioning.get(id)?.catch(() => {});
    await this.runtime.removeWorkload(databaseWorkloadName(id));
    await this.runtime.removeVolume(databaseWorkloadName(id));
    await this.runtime.removeTenantNetworkIfUnused(tenantId);
  }

  async count(tenantId: string): Promise<{ databases: number }> {
    return { databases: await this.store.databases.count(tenantId) };
  }

  /** Suspension: containers stop (data kept); they stay stopped until used again. */
  async suspend(tenantId: string): Promise<void> {
    for (const d of await this.store.databases.listForTenant(tenantId)) {
      await this.store.databases.update(d.id, { desired_state: 'stopped', status: 'stopped', container_id: null, updated_at: unixSeconds(this.clock) });
      await this.provisioning.get(d.id)?.catch(() => {});
      await this.runtime.removeWorkload(databaseWorkloadName(d.id));
    }
  }

  /**
   * Brings records and containers together (on start and every 30 s, under the store lease of
   * the reconcile job): a database that should run but has no running container, or whose
   * provisioning was interrupted, is provisioned again on its volume.
   */
  async reconcile(): Promise<void> {
    for (const d of await this.store.databases.listAll()) {
      if (d.desired_state !== 'running' || this.provisioning.has(d.id)) continue;
      const w = await this.runtime.inspectWorkload(databaseWorkloadName(d.id));
      if (d.status === 'provisioning' || (d.status === 'running' && w?.state !== 'running')) this.provision(d.id);
    }
  }

  async close(): Promise<void> {
    this.closed = true;
    await Promise.all([...this.provisioning.values()].map((p) => p.catch(() => {})));
  }

  private provision(id: string): void {
    if (this.closed || this.provisioning.has(id)) return;
    const p = this.runProvision(id)
      .catch((err: unknown) => this.log.error({ err, database: id }, 'database provisioning failed'))
      .finally(() => this.provisioning.delete(id));
    this.provisioning.set(id, p);
  }

  private async runProvision(id: string): Promise<void> {
    const d = await this.store.databases.findAny(id);
    if (!d) return;
    const tenant = await this.store.tenants.findById(d.tenant_id);
    if (!tenant) return;
    const kind = KINDS[d.type];
    const password = this.sealer.open(d.sealed_password);
    try {
      await this.runtime.ensureTenantNetwork(d.tenant_id);
      if (!(await this.runtime.hasImage(d.image))) await this.runtime.pullImage(d.image);
      // A container left from before (an interrupted provisioning, a restart) is replaced; the
      // volume, and with it the data, stays.
      await this.runtime.removeWorkload(databaseWorkloadName(id));
      const containerId = await this.runtime.runWorkload({
        name: databaseWorkloadName(id),
        image: d.image,
        env: d.type === 'postgres' ? { POSTGRES_USER: d.username, POSTGRES_PASSWORD: password, POSTGRES_DB: d.database_name } : {},
        cmd: d.type === 'redis' ? ['redis-server', '--requirepass', password, '--appendonly', 'yes'] : undefined,
        // The public images run as these users when asked; with every capability dropped they
        // could not switch users themselves.
        user: kind.user,
        port: kind.port,
        tenantId: d.tenant_id,
        kind: 'database',
        resourceId: id,
        limits: workloadLimits(tenant),
        sandbox: await this.opts.sandbox(),
        volumes: [{ name: databaseWorkloadName(id), target: kind.dataDir }],
        aliases: [d.name],
        loopbackPort: d.host_port,
        engineRestarts: true,
      });
      await this.store.databases.update(id, { container_id: containerId, updated_at: unixSeconds(this.clock) });
      await this.waitReady(d, { host: '127.0.0.1', port: d.host_port, username: d.username, password, database: kind.database });
      if (!(await this.stillWanted(id))) return;
      await this.store.databases.update(id, { status: 'running', last_error: null, updated_at: unixSeconds(this.clock) });
      this.log.info({ database: id, type: d.type }, 'database running');
    } catch (err) {
      if (!(await this.stillWanted(id))) return;
      const message = (err as Error).message;
      await this.store.databases.update(id, { status: 'failed', last_error: message, updated_at: unixSeconds(this.clock) });
      await this.runtime.removeWorkload(databaseWorkloadName(id)).catch(() => {});
      await this.activity.record(this.store, { tenantId: d.tenant_id, action: 'database.failed', resourceType: 'database', resourceId: id, details: { error: message } });
    }
  }

  private async waitReady(d: DatabaseRow, target: ProbeTarget): Promise<void> {
    const deadline = this.clock.now() + (this.opts.readyTimeoutMs ?? DATABASE_READY_TIMEOUT_MS);
    let last = 'no answer';
    // The probe is cheap and runs often; the record and the container are asked less often.
    let checkedAt = -Infinity;
    for (;;) {
      const checkNow = this.clock.now() - checkedAt >= STATE_CHECK_MS;
      if (checkNow && !(await this.stillWanted(d.id))) throw new Error('stopped');
      try {
        // Bounded here too: a probe that never settles must not outlast the deadline.
        await this.within(PROBE_TIMEOUT_MS + 1_000, probeDatabase(d.type, target, PROBE_TIMEOUT_MS));
        return;
      } catch (err) {
        last = (err as Error).message;
      }
      if (checkNow) {
        checkedAt = this.clock.now();
        const w = await this.runtime.inspectWorkload(databaseWorkloadName(d.id));
        if (w && w.state !== 'running' && w.state !== 'restarting' && w.state !== 'created') {
          throw new Error(`the ${d.type} container exited (${w.exitCode}) before it was ready: ${last}`);
        }
      }
      if (this.clock.now() > deadline) throw new Error(`not ready within ${Math.round((this.opts.readyTimeoutMs ?? DATABASE_READY_TIMEOUT_MS) / 1000)} s: ${last}`);
      await new Promise<void>((r) => this.timers.setTimeout(r, PROBE_EVERY_MS));
    }
  }

  private within<T>(ms: number, p: Promise<T>): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      const timer = this.timers.setTimeout(() => reject(new Error(`no answer within ${ms} ms`)), ms);
      p.then(resolve, reject).finally(() => timer.cancel());
    });
  }

  private async stillWanted(id: string): Promise<boolean> {
    const now = await this.store.databases.findAny(id);
    return !!now && now.desired_state === 'running';
  }

  private async freePort(): Promise<number> {
    const used = new Set(await this.store.databases.hostPorts());
    const { from, to } = this.opts.ports;
    const size = to - from + 1;
    const start = randomInt(size);
    for (let i = 0; i < size; i++) {
      const port = from + ((start + i) % size);
      if (!used.has(port)) return port;
    }
    throw new ConflictError('no free host port for databases: every port of --database-ports is taken');
  }

  private async row(tenantId: string, id: string): Promise<DatabaseRow> {
    const d = await this.store.databases.find(tenantId, id);
    if (!d) throw new NotFoundError('database');
    return d;
  }
}
