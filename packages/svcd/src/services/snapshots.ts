// Snapshots: a service's image, port, env and health check saved under a name, to create services from later
// (POST /v1/services?from_snapshot=ID). The env is sealed as one JSON object.
import type { CreateSnapshotRequest, HealthCheck, Snapshot } from '@svc/contract';
import { PAGE_LIMIT_DEFAULT, PAGE_LIMIT_MAX } from '@svc/contract';
import type { Activity } from '../activity/activity.js';
import { type Clock, unixSeconds } from '../clock.js';
import { ConflictError, NotFoundError, QuotaExceededError } from '../errors.js';
import { AWAITS_BUILD, NO_IMAGE } from './images.js';
import { healthCheckOf } from './health-checks.js';
import { hexId } from '../ids.js';
import type { Sealer } from '../secrets/sealer.js';
import type { SnapshotRow, Store } from '../store/index.js';
import { SNAPSHOTS_PER_TENANT_MAX } from '../retention/rules.js';

function view(r: SnapshotRow): Snapshot {
  return {
    id: r.id,
    name: r.name,
    description: r.description,
    service_id: r.service_id,
    image: r.image,
    port: r.port,
    health_check: healthCheckOf(r.health_check),
    env_keys: JSON.parse(r.env_keys) as string[],
    created_at: r.created_at,
  };
}

export interface SnapshotContents {
  image: string;
  port: number;
  env: Record<string, string>;
  healthCheck: HealthCheck;
}

export class Snapshots {
  constructor(
    private readonly store: Store,
    private readonly sealer: Sealer,
    private readonly activity: Activity,
    private readonly clock: Clock,
  ) {}

  async create(tenantId: string, serviceId: string, req: CreateSnapshotRequest): Promise<Snapshot> {
    const id = hexId(12);
    await this.store.transaction(async (tx) => {
      const s = await tx.services.find(tenantId, serviceId);
      if (!s) throw new NotFoundError('service');
      if (s.image === NO_IMAGE) throw new ConflictError(AWAITS_BUILD);
      // Held to commit: concurrent creates of this tenant count one after another.
      await tx.tenants.lockForQuota(tenantId);
      if ((await tx.snapshots.countForTenant(tenantId)) >= SNAPSHOTS_PER_TENANT_MAX) {
        throw new QuotaExceededError(`maximum snapshots reached (${SNAPSHOTS_PER_TENANT_MAX}): delete one first`);
      }
      const sealed = await tx.serviceEnv.get(serviceId);
      const env = Object.fromEntries([...sealed].map(([k, v]) => [k, this.sealer.open(v)]));
      await tx.snapshots.insert({
        id,
        tenant_id: tenantId,
        service_id: serviceId,
        name: req.name.trim(),
        description: req.description ?? '',
        image: s.image,
        port: s.port,
        health_check: s.health_check,
        sealed_env: this.sealer.seal(JSON.stringify(env)),
        env_keys: JSON.stringify(Object.keys(env).sort()),
        created_at: unixSeconds(this.clock),
      });
      await this.activity.record(tx, { tenantId, action: 'snapshot.created', resourceType: 'snapshot', resourceId: id, serviceId, details: { name: req.name } });
    });
    return this.get(tenantId, id);
  }

  async list(tenantId: string, limit?: number, offset?: number): Promise<Snapshot[]> {
    return (await this.store.snapshots.list(tenantId, Math.min(limit ?? PAGE_LIMIT_DEFAULT, PAGE_LIMIT_MAX), offset ?? 0)).map(view);
  }

  async get(tenantId: string, id: string): Promise<Snapshot> {
    return view(await this.row(tenantId, id));
  }

  async delete(tenantId: string, id: string): Promise<void> {
    await this.store.transaction(async (tx) => {
      if (!(await tx.snapshots.delete(tenantId, id))) throw new NotFoundError('snapshot');
      await this.activity.record(tx, { tenantId, action: 'snapshot.deleted', resourceType: 'snapshot', resourceId: id });
    });
  }

  /** What a service created from the snapshot starts with. */
  async contents(tenantId: string, id: string): Promise<SnapshotContents> {
    const r = await this.row(tenantId, id);
    return { image: r.image, port: r.port, env: JSON.parse(this.sealer.open(r.sealed_env)) as Record<string, string>, healthCheck: healthCheckOf(r.health_check) };
  }

  private async row(tenantId: string, id: string): Promise<SnapshotRow> {
    const r = await this.store.snapshots.find(tenantId, id);
    if (!r) throw new NotFoundError('snapshot');
    return r;
  }
}
