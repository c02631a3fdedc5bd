import type { CreatedKey, KeyInfo, RecoverResponse } from '@svc/contract';
import { MAX_API_KEYS } from '@svc/contract';
import { unixSeconds } from '../clock.js';
import { ConflictError, NotFoundError, QuotaExceededError } from '../errors.js';
import type { ApiKeyRow, Repositories } from '../store/index.js';
import type { KeyCache } from './key-cache.js';
import { generateKey } from './key-format.js';
import type { Platform } from '../platform.js';

export const DEFAULT_KEY_NAME = 'unnamed';

function keyInfo(r: ApiKeyRow): KeyInfo {
  return {
    id: r.id,
    name: r.name,
    prefix: r.prefix,
    created_at: r.created_at,
    last_used_at: r.last_used_at,
    expires_at: r.expires_at,
  };
}

/** What a ApiKeys is built from, by name. */
export interface ApiKeysDeps extends Pick<Platform, 'store' | 'activity' | 'clock' | 'audit'> {
  cache: KeyCache;
}

/** API keys of a tenant: issue (with the 20-key quota), list, revoke, recover. */
export class ApiKeys {
  constructor(private readonly deps: ApiKeysDeps) {}

  /**
   * Issues a key inside the caller's transaction, so the quota count and the insert agree: the
   * tenant's quota lock, held to commit, makes concurrent issues count one after another.
   * Creating a key drops the tenant's cached lookups (spec 5.3).
   */
  async issue(tx: Repositories, tenantId: string, name: string, expiresIn?: number): Promise<CreatedKey> {
    await tx.tenants.lockForQuota(tenantId);
    if ((await tx.apiKeys.countActive(tenantId)) >= MAX_API_KEYS) {
      throw new QuotaExceededError(`maximum API keys reached (${MAX_API_KEYS})`);
    }
    const now = unixSeconds(this.deps.clock);
    const k = generateKey();
    const expiresAt = expiresIn === undefined ? null : now + expiresIn;
    await tx.apiKeys.insert({
      id: k.id,
      tenant_id: tenantId,
      name,
      prefix: k.prefix,
      secret_hash: k.secretHash,
      created_at: now,
      last_used_at: null,
      expires_at: expiresAt,
      revoked_at: null,
    });
    await this.deps.activity.record(tx, {
      tenantId,
      action: 'key.created',
      resourceType: 'key',
      resourceId: k.id,
      details: { name },
    });
    this.deps.cache.invalidateTenant(tenantId);
    return { id: k.id, name, api_key: k.apiKey, prefix: k.prefix, created_at: now, expires_at: expiresAt };
  }

  async create(tenantId: string, name: string | undefined, expiresIn: number | undefined): Promise<CreatedKey> {
    return this.deps.store.transaction((tx) => this.issue(tx, tenantId, name ?? DEFAULT_KEY_NAME, expiresIn));
  }

  async list(tenantId: string): Promise<KeyInfo[]> {
    return (await this.deps.store.apiKeys.listActive(tenantId)).map(keyInfo);
  }

  async revoke(tenantId: string, keyId: string): Promise<void> {
    await this.deps.store.transaction(async (tx) => {
      if (!(await tx.apiKeys.revoke(tenantId, keyId, unixSeconds(this.deps.clock)))) throw new NotFoundError('API key');
      await this.deps.activity.record(tx, { tenantId, action: 'key.revoked', resourceType: 'key', resourceId: keyId });
    });
    // This process stops honouring it at once; other processes within the 30 s cache window.
    this.deps.cache.delete(keyId);
  }

  /** Operator route: a new key for the tenant owning `email`. */
  async recover(email: string): Promise<RecoverResponse> {
    const tenant = await this.deps.store.tenants.findByEmailKey(email.trim().toLowerCase());
    if (!tenant) throw new NotFoundError('tenant with that email');
    if (tenant.status !== 'active') throw new ConflictError('tenant is suspended; reactivate it instead');
    const key = await this.deps.store.transaction(async (tx) => {
      const k = await this.issue(tx, tenant.id, 'recovered', undefined);
      await this.deps.activity.record(tx, { tenantId: tenant.id, action: 'key.recovered', resourceType: 'key', resourceId: k.id });
      return k;
    });
    this.deps.audit.info({ audit: true, event: 'operator.recover', tenant_id: tenant.id, key_id: key.id }, 'operator recovered a tenant key');
    return { tenant_id: tenant.id, api_key: key.api_key, id: key.id };
  }
}
