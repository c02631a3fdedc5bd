// Managed PostgreSQL and Redis: one container per database on the tenant's network, from the
// operator's image (--postgres-image, --redis-image), its data on a named volume, generated
// credentials sealed at rest. Status `provisioning` until a protocol-level probe passes (a real
// PostgreSQL login, a Redis AUTH + PING), then `running`, or `failed` with `last_error`.
// On a swarm its volume is on the disk of one node: the database is pinned there from its first
// start (the node in its record), published on its host port on that node, and `unavailable`
// (last_error naming the node) while that node is away, never started empty elsewhere.
import { randomBytes } from 'node:crypto';
import type { ConnectionString, CreateDatabaseRequest, DatabaseRecord } from '@svc/contract';
import { PAGE_LIMIT_DEFAULT, PAGE_LIMIT_MAX } from '@svc/contract';
import { unixSeconds } from '../clock.js';
import { ConflictError, NotFoundError, QuotaExceededError, ValidationError } from '../errors.js';
import { hexId } from '../ids.js';
import { workloadLimits, type Applied } from '../runtime/index.js';
import { isUniqueViolation, type DatabaseRow, type DatabaseType, type TenantRow } from '../store/index.js';
import type { TenantResources } from '../tenants/tenants.js';
import type { DiskQuota } from '../disk/disk-quota.js';
import { pickFreePort } from '../provisioning/host-ports.js';
import { Lifecycle } from '../provisioning/lifecycle.js';
import type { WorkloadController } from '../workloads/controller.js';
import { probeDatabase } from './probes.js';
import type { Platform } from '../platform.js';

export interface DatabasesOptions {
  images: Record<DatabaseType, string>;
  /** Loopback host ports databases are published on, inclusive. */
  ports: { from: number; to: number };
  /** How long provisioning may take until the probe passes. */
  readyTimeoutMs?: number;
  /** Run under gVisor when the sandbox policy says so (the deployer's decision). */
  sandbox: () => Promise<boolean>;
  /** New databases are refused while the tenant is at its disk quota. */
  disk: Pick<DiskQuota, 'assertRoom'>;
  /**
   * On a cluster: the address of a node (by id), which a database pinned there is published on
   * and its connection string names. Absent on a single engine (published on loopback).
   */
  nodeAddress?: (node: string) => Promise<string | null>;
}

export const DATABASE_READY_TIMEOUT_MS = 180_000;
const PROBE_EVERY_MS = 25;
const PROBE_TIMEOUT_MS = 3_000;

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

/** What a Databases is built from, by name. */
export interface DatabasesDeps extends DatabasesOptions, Pick<Platform, 'store' | 'runtime' | 'sealer' | 'activity' | 'clock' | 'timers' | 'log' | 'audit'> {
  /** Carries out the records' requests (create, wake, suspend, delete) on the engine. */
  workloads: WorkloadController;
}

export class Databases implements TenantResources {
  private readonly lifecycle: Lifecycle<DatabaseRow>;

  constructor(private readonly deps: DatabasesDeps) {
    this.lifecycle = new Lifecycle({
      store: deps.store,
      activity: deps.activity,
      clock: deps.clock,
      kind: 'database',
      records: (repos) => repos.databases,
      controller: deps.workloads,
      workloadName: databaseWorkloadName,
      provision: (d, tenant, signal) => this.provision(d, tenant, signal),
    });
  }

  async create(tenantId: string, req: CreateDatabaseRequest): Promise<DatabaseRecord> {
    if (req.type !== 'postgres' && req.type !== 'redis') throw new ValidationError('type must be postgres or redis');
    const type: DatabaseType = req.type;
    await this.deps.disk.assertRoom(tenantId);
    const tenant = await this.deps.store.tenants.findById(tenantId);
    if (!tenant) throw new NotFoundError('tenant');
    const kind = KINDS[type];
    const now = unixSeconds(this.deps.clock);
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
        image: this.deps.images[type],
        username: kind.username,
        database_name: kind.database ?? '',
        sealed_password: this.deps.sealer.seal(password),
        host_port: await this.freePort(),
        container_id: null,
        last_error: null,
        ready_at: null,
        node: null,
        created_at: now,
        updated_at: now,
      };
      try {
        await this.deps.store.transaction(async (tx) => {
          // Held to commit: concurrent creates of this tenant count one after another.
          await tx.tenants.lockForQuota(tenantId);
          if ((await tx.databases.count(tenantId)) >= tenant.max_databases) {
            throw new QuotaExceededError(`max_databases (${tenant.max_databases})`);
          }
          await tx.databases.insert(candidate);
          await this.lifecycle.added(tx, candidate);
          await this.deps.activity.record(tx, { tenantId, action: 'database.created', resourceType: 'database', resourceId: candidate.id, details: { name: req.name, type } });
        });
        row = candidate;
      } catch (err) {
        if (!isUniqueViolation(err)) throw err;
        const taken = (await this.deps.store.databases.listForTenant(tenantId)).some((d) => d.name === req.name);
        if (taken) throw new ConflictError(`a database named ${JSON.stringify(req.name)} exists`);
        // Otherwise the host port was taken meanwhile: pick another.
      }
    }
    if (!row) throw new ConflictError('no free host port for the database: try again');
    this.lifecycle.started();
    return databaseView(row);
  }

  async list(tenantId: string, limit = PAGE_LIMIT_DEFAULT, offset = 0): Promise<DatabaseRecord[]> {
    return (await this.deps.store.databases.list(tenantId, Math.min(limit, PAGE_LIMIT_MAX), offset)).map(databaseView);
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
    // Woken first: a database stopped before it was ever placed must still be able to start.
    await this.lifecycle.wake(d);
    const host = await this.publishedOn(d);
    const password = this.deps.sealer.open(d.sealed_password);
    await this.deps.activity.record(this.deps.store, { tenantId, action: 'database.connection_revealed', resourceType: 'database', resourceId: id });
    this.deps.audit.info({ audit: true, event: 'database.connection_revealed', tenant_id: tenantId, database_id: id }, 'database connection string revealed');
    const path = d.type === 'postgres' ? `/${d.database_name}` : '';
    const scheme = d.type === 'postgres' ? 'postgres' : 'redis';
    const auth = `${encodeURIComponent(d.username)}:${encodeURIComponent(password)}`;
    return {
      connection_string: `${scheme}://${auth}@${host}:${d.host_port}${path}`,
      internal_connection_string: `${scheme}://${auth}@${d.name}:${KINDS[d.type].port}${path}`,
      password,
    };
  }

  /** The address its host port is published on: loopback on a single engine, its node's on a cluster. */
  private async publishedOn(d: DatabaseRow): Promise<string> {
    if (!this.deps.nodeAddress) return '127.0.0.1';
    if (d.node === null) throw new ConflictError('the database is not placed on a node yet: its connection string is known once it first runs');
    const address = await this.deps.nodeAddress(d.node);
    if (address === null) throw new ConflictError("the node the database's data is on is no longer in the cluster");
    return address;
  }

  /** Removes the container and the volume with its data. */
  async delete(tenantId: string, id: string): Promise<void> {
    const d = await this.row(tenantId, id);
    await this.deps.store.transaction(async (tx) => {
      await this.lifecycle.removing(tx, id);
      if (!(await tx.databases.delete(tenantId, id))) throw new NotFoundError('database');
      await this.deps.activity.record(tx, { tenantId, action: 'database.deleted', resourceType: 'database', resourceId: id, details: { name: d.name } });
    });
    await this.lifecycle.removed(id);
  }

  async count(tenantId: string): Promise<{ databases: number }> {
    return { databases: await this.deps.store.databases.count(tenantId) };
  }

  /** Suspension: containers stop (data kept); they stay stopped until used again. */
  suspend(tenantId: string): Promise<void> {
    return this.lifecycle.suspend(tenantId);
  }



  /** Starts the container on the tenant's network and waits until a real login succeeds. */
  private async provision(d: DatabaseRow, tenant: TenantRow, signal: AbortSignal): Promise<Applied> {
    const kind = KINDS[d.type];
    const password = this.deps.sealer.open(d.sealed_password);
    if (d.ready_at === null) {
      // It never answered, so its volume holds no tenant data, but it may hold a data directory
      // half made by a first start that was cut off (its svcd died, and this svcd took the
      // provisioning over): the image would take it as made and never serve. It starts empty.
      await this.deps.runtime.remove(databaseWorkloadName(d.id));
      // On a cluster, from the nodes it can be placed on now (one that is away is not waited for).
      await this.deps.runtime.removeVolume(databaseWorkloadName(d.id), { whereItCanRun: true });
    }
    // A container left from before (an interrupted provisioning, a restart) is replaced; the
    // volume, and with it the data, stays.
    return this.deps.runtime.apply({
      spec: {
        name: databaseWorkloadName(d.id),
        image: d.image,
        env: d.type === 'postgres' ? { POSTGRES_USER: d.username, POSTGRES_PASSWORD: password, POSTGRES_DB: d.database_name } : {},
        cmd: d.type === 'redis' ? ['redis-server', '--requirepass', password, '--appendonly', 'yes'] : undefined,
        // The public images run as these users when asked; with every capability dropped they
        // could not switch users themselves.
        user: kind.user,
        port: kind.port,
        tenantId: d.tenant_id,
        kind: 'database',
        resourceId: d.id,
        limits: workloadLimits(tenant),
        sandbox: await this.deps.sandbox(),
        volumes: [{ name: databaseWorkloadName(d.id), target: kind.dataDir }],
        aliases: [d.name],
        publish: { address: '127.0.0.1', port: d.host_port },
        engineRestarts: true,
        // On a cluster, where its data is; anywhere while it holds none yet (its volume was just emptied).
        placement: { node: d.ready_at === null ? null : d.node, holdsData: d.ready_at !== null },
      },
      pull: 'missing',
      // Ready = a real login at the endpoint svcd reaches it on (its tenant network; on a swarm,
      // the port its node publishes), not the loopback host port: the probe holds wherever the
      // driver runs it.
      ready: {
        probe: (at) => probeDatabase(d.type, { host: at.host, port: at.port ?? kind.port, username: d.username, password, database: kind.database }, PROBE_TIMEOUT_MS),
        timeoutMs: this.deps.readyTimeoutMs ?? DATABASE_READY_TIMEOUT_MS,
        everyMs: PROBE_EVERY_MS,
        probeTimeoutMs: PROBE_TIMEOUT_MS + 1_000,
      },
      signal,
    });
  }

  private async freePort(): Promise<number> {
    return pickFreePort(await this.deps.store.databases.hostPorts(), this.deps.ports, '--database-ports');
  }

  private async row(tenantId: string, id: string): Promise<DatabaseRow> {
    const d = await this.deps.store.databases.find(tenantId, id);
    if (!d) throw new NotFoundError('database');
    return d;
  }
}
