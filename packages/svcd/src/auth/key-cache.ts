import { ExpiringLru } from '../cache/expiring-lru.js';
import type { Clock } from '../clock.js';
import type { KeyWithTenantStatus } from '../store/index.js';

export const KEY_CACHE_TTL_MS = 30_000;
export const KEY_CACHE_MAX_ENTRIES = 5_000;

/**
 * Key lookups cached for 30 s, at most 5000 entries (spec 5.3), least recently used evicted
 * first. Only hits are cached: a key that does not exist yet must work as soon as it is created.
 */
export class KeyCache {
  private readonly entries: ExpiringLru<string, KeyWithTenantStatus>;

  constructor(clock: Clock, ttlMs = KEY_CACHE_TTL_MS, maxEntries = KEY_CACHE_MAX_ENTRIES) {
    this.entries = new ExpiringLru(clock, ttlMs, maxEntries);
  }

  get(id: string): KeyWithTenantStatus | undefined {
    return this.entries.get(id);
  }

  set(key: KeyWithTenantStatus): void {
    this.entries.set(key.id, key);
  }

  /** Drops every cached key of a tenant (key created, tenant suspended). */
  invalidateTenant(tenantId: string): void {
    this.entries.deleteWhere((key) => key.tenant_id === tenantId);
  }

  delete(id: string): void {
    this.entries.delete(id);
  }

  get size(): number {
    return this.entries.size;
  }
}
