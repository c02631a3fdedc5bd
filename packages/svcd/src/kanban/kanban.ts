// The tenant's task board: svc's own kanban application (packages/kanban) run as one container
// per tenant from the image svcd builds locally (image.ts), its SQLite file on a named volume,
// published on a host port from --kanban-ports at --kanban-address. Creation is asynchronous:
// `provisioning` until the board answers its health route, then `running` with its url, or
// `failed` with `last_error`. The admin token is generated here, sealed at rest, and the board
// only ever sees its SHA-256. On a swarm a board is pinned to the node its volume is on, as a
// database is (databases.ts), published on its host port there, and its url names that node.
import { createHash, randomBytes } from 'node:crypto';
import { isIPv6 } from 'node:net';
import type { KanbanAdminToken, KanbanBoard } from '@svc/contract';
import { unixSeconds } from '../clock.js';
import { ConflictError, NotFoundError } from '../errors.js';
import { hexId } from '../ids.js';
import { isPortInUse, pickFreePort } from '../provisioning/host-ports.js';
import { Lifecycle } from '../provisioning/lifecycle.js';
import type { WorkloadController } from '../workloads/controller.js';
import { workloadLimits, type Applied, type Endpoint } from '../runtime/index.js';
import { isUniqueViolation, type KanbanBoardRow, type TenantRow } from '../store/index.js';
import type { TenantResources } from '../tenants/tenants.js';
import { KANBAN_DATA_DIR, KANBAN_PORT, type KanbanImage } from './image.js';
import type { Platform } from '../platform.js';

export interface KanbanOptions {
  /** Host ports boards are published on, inclusive (--kanban-ports). */
  ports: { from: number; to: number };
  /** The host address they are published on; their url names it (--kanban-address). */
  address: string;
  /** How long a started board may take to answer. */
  readyTimeoutMs?: number;
  /** Run under gVisor when the sandbox policy says so (the deployer's decision). */
  sandbox: () => Promise<boolean>;
  /** On a cluster: the address of a node (by id), which a board pinned there is published on. Absent on a single engine. */
  nodeAddress?: (node: string) => Promise<string | null>;
}

export const KANBAN_READY_TIMEOUT_MS = 120_000;
const PROBE_EVERY_MS = 50;
const PROBE_TIMEOUT_MS = 2_000;
/** How often a board whose port turns out to be held outside svc moves to another one. */
const PORT_ATTEMPTS = 5;

export function kanbanWorkloadName(id: string): string {
  return `svc-kanban-${id}`;
}

/** What a Kanban is built from, by name. */
export interface KanbanDeps extends KanbanOptions, Pick<Platform, 'store' | 'runtime' | 'sealer' | 'activity' | 'clock' | 'timers' | 'log' | 'audit'> {
  /** Carries out the records' requests (create, wake, suspend, delete) on the engine. */
  workloads: WorkloadController;
  image: KanbanImage;
}

export class Kanban implements TenantResources {
  private readonly lifecycle: Lifecycle<KanbanBoardRow>;

  constructor(private readonly deps: KanbanDeps) {
    this.lifecycle = new Lifecycle({
      store: deps.store,
      activity: deps.activity,
      clock: deps.clock,
      kind: 'kanban',
      records: (repos) => repos.kanban,
      controller: deps.workloads,
      workloadName: kanbanWorkloadName,
      provision: (b, tenant, signal) => this.provision(b, tenant, signal),
    });
  }

  /** Starts creating the tenant's board; 409 when it has one (whatever its state). */
  async create(tenantId: string): Promise<KanbanBoard> {
    if (!(await this.deps.store.tenants.findById(tenantId))) throw new NotFoundError('tenant');
    const token = randomBytes(32).toString('base64url');
    const now = unixSeconds(this.deps.clock);
    for (let attempt = 0; attempt < 8; attempt++) {
      if (await this.deps.store.kanban.findForTenant(tenantId)) break;
      const row: KanbanBoardRow = {
        id: hexId(12),
        tenant_id: tenantId,
        status: 'provisioning',
        desired_state: 'running',
        sealed_admin_token: this.deps.sealer.seal(token),
        host_port: await this.freePort(),
        container_id: null,
        last_error: null,
        node: null,
        ready_at: null,
        created_at: now,
        updated_at: now,
      };
      try {
        await this.deps.store.transaction(async (tx) => {
          await tx.kanban.insert(row);
          await this.lifecycle.added(tx, row);
          await this.deps.activity.record(tx, { tenantId, action: 'kanban.created', resourceType: 'kanban', resourceId: row.id, details: { host_port: row.host_port } });
        });
      } catch (err) {
        // Another create of this tenant won (checked above), or another board took the port.
        if (isUniqueViolation(err)) continue;
        throw err;
      }
      this.lifecycle.started();
      return this.view(row);
    }
    if (await this.deps.store.kanban.findForTenant(tenantId)) throw new ConflictError('the tenant has a task board already (one per tenant)');
    throw new ConflictError('no free host port for the task board: try again');
  }

  async get(tenantId: string): Promise<KanbanBoard> {
    return this.view(await this.row(tenantId));
  }

  /**
   * Reveals the admin token (audit-logged, activity entry). A board stopped by a suspension
   * starts again here: asking for the token is what using the board means to the API.
   */
  async adminToken(tenantId: string): Promise<KanbanAdminToken> {
    const b = await this.row(tenantId);
    await this.deps.activity.record(this.deps.store, { tenantId, action: 'kanban.admin_token_revealed', resourceType: 'kanban', resourceId: b.id });
    this.deps.audit.info({ audit: true, event: 'kanban.admin_token_revealed', tenant_id: tenantId, kanban_id: b.id }, 'kanban admin token revealed');
    await this.lifecycle.wake(b);
    return { admin_token: this.deps.sealer.open(b.sealed_admin_token), url: await this.url(b) };
  }

  /** Removes the board: its container, and the volume with its data; the port is free again. */
  async delete(tenantId: string): Promise<void> {
    const b = await this.row(tenantId);
    await this.deps.store.transaction(async (tx) => {
      await this.lifecycle.removing(tx, b.id);
      if (!(await tx.kanban.delete(tenantId, b.id))) throw new NotFoundError('kanban board');
      await this.deps.activity.record(tx, { tenantId, action: 'kanban.deleted', resourceType: 'kanban', resourceId: b.id });
    });
    await this.lifecycle.removed(b.id);
  }

  count(): Promise<Record<string, never>> {
    return Promise.resolve({});
  }

  /** Suspension: the container stops (data kept); the board stays stopped until used again. */
  suspend(tenantId: string): Promise<void> {
    return this.lifecycle.suspend(tenantId);
  }



  /** Starts the board (building its image on first need) and waits until it answers. */
  private async provision(b: KanbanBoardRow, tenant: TenantRow, signal: AbortSignal): Promise<Applied> {
    const image = await this.deps.image.ensure();
    let port = b.host_port;
    for (let attempt = 1; ; attempt++) {
      // A container left from before (an interrupted provisioning, a restart) is replaced; the
      // volume, and with it the boards, stays.
      try {
        return await this.deps.runtime.apply({
          spec: {
            name: kanbanWorkloadName(b.id),
            image,
            env: { KANBAN_ADMIN_TOKEN_SHA256: createHash('sha256').update(this.deps.sealer.open(b.sealed_admin_token)).digest('hex') },
            port: KANBAN_PORT,
            tenantId: b.tenant_id,
            kind: 'kanban',
            resourceId: b.id,
            limits: workloadLimits(tenant),
            sandbox: await this.deps.sandbox(),
            volumes: [{ name: kanbanWorkloadName(b.id), target: KANBAN_DATA_DIR }],
            publish: { address: this.deps.address, port },
            engineRestarts: true,
            // On a cluster, on the node its data is on once it ran (anywhere the first time).
            placement: { node: b.ready_at === null ? null : b.node, holdsData: b.ready_at !== null },
          },
          pull: 'never',
          ready: { probe: (at) => this.probe(at), timeoutMs: this.deps.readyTimeoutMs ?? KANBAN_READY_TIMEOUT_MS, everyMs: PROBE_EVERY_MS, probeTimeoutMs: PROBE_TIMEOUT_MS },
          signal,
        });
      } catch (err) {
        // Something outside svc holds the port: the board moves to another free one.
        if (!isPortInUse(err) || attempt >= PORT_ATTEMPTS) throw err;
        port = await this.movePort(b.id, port);
      }
    }
  }

  /** The board answers its health route where svcd reaches it. */
  private async probe(at: Endpoint): Promise<void> {
    const res = await fetch(`http://${at.host}:${at.port ?? KANBAN_PORT}/api/health`, { signal: AbortSignal.timeout(PROBE_TIMEOUT_MS) });
    await res.body?.cancel();
    if (res.status !== 200) throw new Error(`the board answered ${res.status}`);
  }

  /** Records another free port for the board (the unique constraint settles races). */
  private async movePort(id: string, from: number): Promise<number> {
    for (;;) {
      const port = pickFreePort([from, ...(await this.deps.store.kanban.hostPorts())], this.deps.ports, '--kanban-ports');
      try {
        await this.deps.store.kanban.update(id, { host_port: port, updated_at: unixSeconds(this.deps.clock) });
        this.deps.log.warn({ kanban: id, from, to: port }, 'task board port is held outside svc; moved');
        return port;
      } catch (err) {
        if (!isUniqueViolation(err)) throw err;
      }
    }
  }

  private async view(b: KanbanBoardRow): Promise<KanbanBoard> {
    return {
      id: b.id,
      status: b.status,
      // The spec's signal that creation completed: set only while the board answers.
      url: b.status === 'running' ? await this.url(b) : '',
      host_port: b.host_port,
      last_error: b.last_error,
      created_at: b.created_at,
      updated_at: b.updated_at,
    };
  }

  /** Where a browser opens the board: --kanban-address, or on a cluster the address of the node it is pinned to ('' until it was placed). */
  private async url(b: KanbanBoardRow): Promise<string> {
    let address = this.deps.address;
    if (this.deps.nodeAddress) {
      const node = b.node === null ? null : await this.deps.nodeAddress(b.node);
      if (node === null) return '';
      address = node;
    }
    const host = isIPv6(address) ? `[${address}]` : address;
    return `http://${host}:${b.host_port}/`;
  }

  private async freePort(): Promise<number> {
    return pickFreePort(await this.deps.store.kanban.hostPorts(), this.deps.ports, '--kanban-ports');
  }

  private async row(tenantId: string): Promise<KanbanBoardRow> {
    const b = await this.deps.store.kanban.findForTenant(tenantId);
    if (!b) throw new NotFoundError('kanban board');
    return b;
  }
}
