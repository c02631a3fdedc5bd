import type {
  QuotaPatchRequest,
  QuotaRecord,
  ReactivateResponse,
  RegisterRequest,
  RegisterResponse,
  Tenant,
  TenantListQuery,
  TenantSummary,
  TenantUsage,
} from '@svc/contract';
import { MAX_API_KEYS, PAGE_LIMIT_DEFAULT, PAGE_LIMIT_MAX } from '@svc/contract';
import type { ApiKeys } from '../auth/api-keys.js';
import type { KeyCache } from '../auth/key-cache.js';
import { ExpiringLru } from '../cache/expiring-lru.js';
import { unixSeconds } from '../clock.js';
import { ConflictError, NotFoundError, UnavailableError, UnprocessableError } from '../errors.js';
import { hexId } from '../ids.js';
import { isUniqueViolation, type TenantRow } from '../store/index.js';
import type { Platform } from '../platform.js';

export const MAX_ACTIVE_TENANTS = 1000;

/**
 * How long a tenant record is served from memory. GET /v1/tenant is the hottest key route and
 * its store read was a third of its cost (bench/api). Every change made through this process
 * drops the entry at once; a change made by another svcd process on the same store shows within
 * this time (the key cache already allows 30 s for a revoked key).
 */
export const TENANT_VIEW_TTL_MS = 1_000;
const TENANT_VIEW_MAX_ENTRIES = 5_000;

/** Quotas a new tenant starts with (spec 8 and DECISIONS.md). */
export const DEFAULT_QUOTAS = {
  max_services: 5,
  max_databases: 3,
  max_builds_concurrent: 3,
  max_env_vars_per_service: 50,
  max_environments: 2,
  max_memory_mb: 2048,
  max_cpu_cores: 2.0,
  max_disk_gb: 20,
  /** Beyond the spec: custom domains per service (DECISIONS.md is silent; README says why 5). */
  max_domains_per_service: 5,
  api_rate_limit: 100,
} as const;

/** One message for a taken name and a taken email, so registration does not reveal which. */
const REGISTRATION_CONFLICT = 'registration failed: name or email is not available';

/**
 * What other parts of svc own per tenant. Later modules (services, databases, environments)
 * plug in here, so the tenant domain does not depend on them.
 */
export interface TenantResources {
  /** Counts for the usage report. */
  count(tenantId: string): Promise<Partial<Record<'services' | 'databases' | 'environments', number>>>;
  /** Stops what runs and cancels what is queued when the tenant is suspended. */
  suspend(tenantId: string): Promise<void>;
}

export function tenantView(r: TenantRow): Tenant {
  return { id: r.id, name: r.name, email: r.email, status: r.status, created_at: r.created_at, updated_at: r.updated_at };
}

function quotaRecord(r: TenantRow): QuotaRecord {
  return {
    tenant_id: r.id,
    max_services: r.max_services,
    max_databases: r.max_databases,
    max_builds_concurrent: r.max_builds_concurrent,
    max_env_vars_per_service: r.max_env_vars_per_service,
    max_environments: r.max_environments,
    max_memory_mb: r.max_memory_mb,
    max_cpu_cores: r.max_cpu_cores,
    max_disk_gb: r.max_disk_gb,
    max_domains_per_service: r.max_domains_per_service,
    api_rate_limit: r.api_rate_limit,
  };
}

/** What a Tenants is built from, by name. */
export interface TenantsDeps extends Pick<Platform, 'store' | 'activity' | 'clock' | 'audit'> {
  keys: ApiKeys;
  keyCache: KeyCache;
  resources: readonly TenantResources[];
  maxActiveTenants?: number;
}

export class Tenants {
  private readonly views: ExpiringLru<string, Tenant>;
  private readonly maxActiveTenants: number;

  constructor(private readonly deps: TenantsDeps) {
    this.views = new ExpiringLru(deps.clock, TENANT_VIEW_TTL_MS, TENANT_VIEW_MAX_ENTRIES);
    this.maxActiveTenants = deps.maxActiveTenants ?? MAX_ACTIVE_TENANTS;
  }

  async register(req: RegisterRequest): Promise<RegisterResponse> {
    const now = unixSeconds(this.deps.clock);
    const id = hexId(16);
    const name = req.name.trim();
    try {
      return await this.deps.store.transaction(async (tx) => {
        if ((await tx.tenants.countActive()) >= this.maxActiveTenants) {
          throw new UnavailableError(`registration unavailable: the limit of ${this.maxActiveTenants} active tenants is reached`);
        }
        await tx.tenants.insert({
          id,
          name,
          name_key: name.toLowerCase(),
          email: req.email,
          email_key: req.email.toLowerCase(),
          status: 'active',
          created_at: now,
          updated_at: now,
          ...DEFAULT_QUOTAS,
        });
        await this.deps.activity.record(tx, { tenantId: id, action: 'tenant.registered', resourceType: 'tenant', resourceId: id });
        const key = await this.deps.keys.issue(tx, id, 'initial');
        return { tenant_id: id, api_key: key.api_key };
      });
    } catch (err) {
      if (isUniqueViolation(err)) throw new UnprocessableError(REGISTRATION_CONFLICT);
      throw err;
    }
  }

  async get(tenantId: string): Promise<Tenant> {
    let view = this.views.get(tenantId);
    if (!view) {
      view = tenantView(await this.row(tenantId));
      this.views.set(tenantId, view);
    }
    return view;
  }

  async rename(tenantId: string, newName: string): Promise<Tenant> {
    const name = newName.trim();
    try {
      await this.deps.store.transaction(async (tx) => {
        if (!(await tx.tenants.rename(tenantId, name, name.toLowerCase(), unixSeconds(this.deps.clock)))) {
          throw new NotFoundError('tenant');
        }
        await this.deps.activity.record(tx, {
          tenantId,
          action: 'tenant.updated',
          resourceType: 'tenant',
          resourceId: tenantId,
          details: { name },
        });
      });
    } catch (err) {
      if (isUniqueViolation(err)) throw new ConflictError('tenant name is already taken');
      throw err;
    } finally {
      this.views.delete(tenantId);
    }
    return this.get(tenantId);
  }

  /** DELETE /v1/tenant: suspends (nothing is deleted) and stops what the tenant runs. */
  async suspend(tenantId: string): Promise<Tenant> {
    await this.deps.store.transaction(async (tx) => {
      const now = unixSeconds(this.deps.clock);
      if (!(await tx.tenants.transitionStatus(tenantId, 'active', 'suspended', now))) {
        throw new NotFoundError('tenant');
      }
      // The dashboard's sessions end here, not only while it is suspended (issue 23).
      await tx.webSessions.revokeTenant(tenantId, now);
      await this.deps.activity.record(tx, { tenantId, action: 'tenant.suspended', resourceType: 'tenant', resourceId: tenantId });
    });
    this.views.delete(tenantId);
    this.deps.keyCache.invalidateTenant(tenantId);
    for (const r of this.deps.resources) await r.suspend(tenantId);
    return this.get(tenantId);
  }

  /** Operator route: suspended -> active with a fresh key; 409 when already active. */
  async reactivate(tenantId: string): Promise<ReactivateResponse> {
    const result = await this.deps.store.transaction(async (tx) => {
      const t = await tx.tenants.findById(tenantId);
      if (!t) throw new NotFoundError('tenant');
      if (t.status === 'active') throw new ConflictError('tenant is already active');
      if ((await tx.tenants.countActive()) >= this.maxActiveTenants) {
        throw new UnavailableError(`reactivation unavailable: the limit of ${this.maxActiveTenants} active tenants is reached`);
      }
      if (!(await tx.tenants.transitionStatus(tenantId, 'suspended', 'active', unixSeconds(this.deps.clock)))) {
        throw new ConflictError('tenant is already active');
      }
      await this.deps.activity.record(tx, { tenantId, action: 'tenant.reactivated', resourceType: 'tenant', resourceId: tenantId });
      const key = await this.deps.keys.issue(tx, tenantId, 'reactivated');
      return { tenant_id: tenantId, api_key: key.api_key, status: 'active' as const };
    });
    this.views.delete(tenantId);
    this.deps.keyCache.invalidateTenant(tenantId);
    this.deps.audit.info({ audit: true, event: 'operator.reactivate', tenant_id: tenantId }, 'operator reactivated a tenant');
    return result;
  }

  async patchQuotas(tenantId: string, patch: QuotaPatchRequest): Promise<QuotaRecord> {
    await this.deps.store.transaction(async (tx) => {
      if (!(await tx.tenants.updateQuotas(tenantId, patch, unixSeconds(this.deps.clock)))) throw new NotFoundError('tenant');
      await this.deps.activity.record(tx, {
        tenantId,
        action: 'tenant.quotas_updated',
        resourceType: 'tenant',
        resourceId: tenantId,
        details: { ...patch },
      });
    });
    this.views.delete(tenantId); // its updated_at moved
    this.deps.audit.info({ audit: true, event: 'operator.quota_patch', tenant_id: tenantId, patch }, 'operator changed tenant quotas');
    return quotaRecord(await this.row(tenantId));
  }

  /** Operator route (beyond the spec). */
  async quotas(tenantId: string): Promise<QuotaRecord> {
    return quotaRecord(await this.row(tenantId));
  }

  async usage(tenantId: string): Promise<TenantUsage> {
    const t = await this.row(tenantId);
    const disk = await this.deps.store.tenantDisk.find(tenantId);
    const counts = await this.resourceCounts(tenantId);
    return {
      services: { used: counts.services, max: t.max_services },
      databases: { used: counts.databases, max: t.max_databases },
      api_keys: { used: await this.deps.store.apiKeys.countActive(tenantId), max: MAX_API_KEYS },
      environments: { used: counts.environments, max: t.max_environments },
      memory_mb: t.max_memory_mb,
      cpu_cores: t.max_cpu_cores,
      disk_gb: t.max_disk_gb,
      disk_used_bytes: disk?.used_bytes ?? 0,
      disk_measured_at: disk?.measured_at ?? null,
      rate_limit: t.api_rate_limit,
    };
  }

  /**
   * Operator route (beyond the spec): tenants with what they hold against their quotas. One page
   * costs a few reads per tenant; it is an operator's page, at most 200 tenants.
   */
  async listForOperator(q: TenantListQuery): Promise<TenantSummary[]> {
    const rows = await this.deps.store.tenants.listPage(Math.min(q.limit ?? PAGE_LIMIT_DEFAULT, PAGE_LIMIT_MAX), q.offset ?? 0, q.status);
    const page: TenantSummary[] = [];
    for (const t of rows) {
      const counts = await this.resourceCounts(t.id);
      const disk = await this.deps.store.tenantDisk.find(t.id);
      page.push({
        ...tenantView(t),
        usage: {
          services: { used: counts.services, max: t.max_services },
          databases: { used: counts.databases, max: t.max_databases },
          environments: { used: counts.environments, max: t.max_environments },
          disk_used_bytes: disk?.used_bytes ?? 0,
          disk_gb: t.max_disk_gb,
        },
      });
    }
    return page;
  }

  /** What the tenant holds, counted by the modules that own each kind (usage and the operator's list). */
  private async resourceCounts(tenantId: string): Promise<Record<'services' | 'databases' | 'environments', number>> {
    const counts = { services: 0, databases: 0, environments: 0 };
    for (const r of this.deps.resources) Object.assign(counts, await r.count(tenantId));
    return counts;
  }

  private async row(tenantId: string): Promise<TenantRow> {
    const t = await this.deps.store.tenants.findById(tenantId);
    if (!t) throw new NotFoundError('tenant');
    return t;
  }
}
