import type { Clock } from '../clock.js';
import type { KeyWithTenantStatus } from '../store/index.js';

export const KEY_CACHE_TTL_MS = 30_000;
export const KEY_CACHE_MAX_ENTRIES = 5_000;

interface Entry {
  key: KeyWithTenantStatus;
  loadedAtMs: number;
}

/**
 * Key lookups cached for 30 s, at most 5000 entries (spec 5.3), least recently used evicted
 * first. A Map keeps insertion order, so re-inserting on a hit makes it an LRU list.
 * Only hits are cached: a key that does not exist yet must work as soon as it is created.
 */
export class KeyCache {
  private readonly entries = new Map<string, Entry>();

  constructor(
    private readonly clock: Clock,
    private readonly ttlMs = KEY_CACHE_TTL_MS,
    private readonly maxEntries = KEY_CACHE_MAX_ENTRIES,
  ) {}

  get(id: string): KeyWithTenantStatus | undefined {
    const e = this.entries.get(id);
    if (!e) return undefined;
    this.entries.delete(id);
    if (this.clock.now() - e.loadedAtMs >= this.ttlMs) return undefined;
    this.entries.set(id, e);
    return e.key;
  }

  set(key: KeyWithTenantStatus): void {
    this.entries.delete(key.id);
    this.entries.set(key.id, { key, loadedAtMs: this.clock.now() });
    if (this.entries.size > this.maxEntries) {
      const oldest = this.entries.keys().next().value;
      if (oldest !== undefined) this.entries.delete(oldest);
    }
  }

  /** Drops every cached key of a tenant (key created, tenant suspended). */
  invalidateTenant(tenantId: string): void {
    for (const [id, e] of this.entries) if (e.key.tenant_id === tenantId) this.entries.delete(id);
  }

  delete(id: string): void {
    this.entries.delete(id);
  }

  get size(): number {
    return this.entries.size;
  }
}
