// The disk quota (max_disk_gb): what a tenant's workloads take on the engine's host, measured on
// the metering pass, reported in usage, and enforced in two steps:
// - at the quota, new workloads (services, databases, environments) are refused with 409; what
//   exists may still start, so that a tenant can get in and delete files;
// - past the hard margin, a tenant that kept writing has its services and environments stopped,
//   each with a last_error that says why and what to do. Databases keep running: stopping one
//   would not free its volume, and its data is what the tenant would want to save.
//
// Counted: each container's writable layer, the named volumes svc made for it (database data,
// environment workspaces), and the layers of the tenant's built images that no other image
// shares. Not counted: images pulled by name (their layers are shared between tenants, and the
// operator prunes them) and the engine's own logs of a container (capped at start: 3 x 10 MB).
import { unixSeconds } from '../clock.js';
import { QuotaExceededError } from '../errors.js';
import { LABELS, WARM_POOL_TENANT } from '../runtime/index.js';
import type { Store } from '../store/index.js';
import { builtImageOwner } from '../services/images.js';
import type { Platform } from '../platform.js';

export const GIB = 1024 ** 3;
/** Past the quota by this share, writing tenants are stopped (the quota itself only refuses new workloads). */
export const DISK_HARD_MARGIN = 0.1;

/** A resource kind whose running workloads can be stopped when their tenant overran its disk. */
export interface DiskOverrunHalt {
  /** Stops the tenant's running workloads of this kind with `reason` as their last_error; answers how many. */
  haltForDisk(tenantId: string, reason: string): Promise<number>;
}

function gb(bytes: number): string {
  return `${(bytes / GIB).toFixed(2)} GB`;
}

/** The refusal rule, read from the last measurement. */
export class DiskQuota {
  constructor(private readonly store: Store) {}

  /** 409 `quota exceeded` when the tenant's last measured disk is at or over its quota. */
  async assertRoom(tenantId: string): Promise<void> {
    const [tenant, disk] = await Promise.all([this.store.tenants.findById(tenantId), this.store.tenantDisk.find(tenantId)]);
    if (!tenant || !disk) return;
    const quota = tenant.max_disk_gb * GIB;
    if (disk.used_bytes >= quota) {
      throw new QuotaExceededError(`disk: the tenant's workloads use ${gb(disk.used_bytes)} of ${tenant.max_disk_gb} GB; free space (files, environments, databases) first`);
    }
  }
}

/** What the last measurement found, for the operator's metrics. */
export interface DiskMeterStatus {
  /** When the last pass ended (ms), null before the first. */
  measuredAt: number | null;
  /** All tenants' workloads together. */
  usedBytes: number;
  /** Tenants at or over their quota, and past the hard margin. */
  atQuota: number;
  pastHardLimit: number;
}

/** What a DiskMeter is built from, by name. */
export interface DiskMeterDeps extends Pick<Platform, 'store' | 'runtime' | 'clock' | 'log'> {
  halts: DiskOverrunHalt[];
  /** --build-registry: built images are tagged under it. */
  buildRegistry: string | null;
}

/** The measurement and the hard limit: one pass per metering interval, under the job's lease. */
export class DiskMeter {
  private state: DiskMeterStatus = { measuredAt: null, usedBytes: 0, atQuota: 0, pastHardLimit: 0 };

  constructor(private readonly deps: DiskMeterDeps) {}

  /** Measures every tenant's disk, records it, and stops the writers of tenants past the hard margin. */
  async pass(): Promise<Map<string, number>> {
    const byTenant = new Map<string, number>();
    const add = (tenantId: string | null, bytes: number) => {
      if (tenantId) byTenant.set(tenantId, (byTenant.get(tenantId) ?? 0) + bytes);
    };
    const usage = await this.deps.runtime.diskUsage();
    for (const w of usage.workloads) add(await this.owner(w.containerId, w.labels), w.bytes);
    // A tenant's builds are its own: the layers only they hold count (base layers are shared).
    for (const image of usage.images) {
      const owner = image.tags.map((tag) => builtImageOwner(tag, this.deps.buildRegistry)).find((id) => id !== null) ?? null;
      add(owner, image.uniqueBytes);
    }
    const now = unixSeconds(this.deps.clock);
    // Tenants measured before and holding nothing now drop to zero.
    for (const id of await this.deps.store.tenantDisk.tenantIds()) if (!byTenant.has(id)) byTenant.set(id, 0);
    const state: DiskMeterStatus = { measuredAt: null, usedBytes: 0, atQuota: 0, pastHardLimit: 0 };
    for (const [tenantId, bytes] of byTenant) {
      await this.deps.store.tenantDisk.record(tenantId, bytes, now);
      const verdict = await this.enforce(tenantId, bytes);
      state.usedBytes += bytes;
      if (verdict !== 'within') state.atQuota += 1;
      if (verdict === 'past-hard-limit') state.pastHardLimit += 1;
    }
    this.state = { ...state, measuredAt: this.deps.clock.now() };
    return byTenant;
  }

  status(): DiskMeterStatus {
    return this.state;
  }

  private async enforce(tenantId: string, bytes: number): Promise<'within' | 'at-quota' | 'past-hard-limit'> {
    const tenant = await this.deps.store.tenants.findById(tenantId);
    if (!tenant) return 'within';
    const quota = tenant.max_disk_gb * GIB;
    const hardLimit = quota * (1 + DISK_HARD_MARGIN);
    if (bytes <= hardLimit) return bytes >= quota ? 'at-quota' : 'within';
    const reason = `stopped: the tenant's workloads use ${gb(bytes)} of disk, past its ${tenant.max_disk_gb} GB quota and the ${gb(hardLimit)} hard limit; free space (delete environments or databases, or start this and delete files at once: it is stopped again while the tenant stays past the limit), then start it`;
    let stopped = 0;
    for (const h of this.deps.halts) stopped += await h.haltForDisk(tenantId, reason);
    if (stopped > 0) this.deps.log.warn({ tenant: tenantId, disk_bytes: bytes, stopped }, 'tenant past its hard disk limit: workloads stopped');
    return 'past-hard-limit';
  }

  /** The tenant a container or volume belongs to; a warm-pool one belongs to the environment that took it. */
  private async owner(containerId: string | null, labels: Record<string, string>): Promise<string | null> {
    const tenantId = labels[LABELS.tenant];
    if (!tenantId) return null;
    if (tenantId !== WARM_POOL_TENANT) return tenantId;
    if (!containerId) return null;
    return (await this.deps.store.environments.findByContainer(containerId))?.tenant_id ?? null;
  }
}
