import type { Clock } from '../clock.js';

interface Entry<V> {
  value: V;
  loadedAtMs: number;
}

/**
 * A bounded map whose entries expire a fixed time after they were stored, least recently used
 * evicted first. A Map keeps insertion order, so re-inserting on a hit makes it an LRU list.
 * Written here rather than taken from lru-cache because the clock must be the injected one
 * (tests move it by hand) and the owner needs to drop entries by a predicate (all of a tenant).
 */
export class ExpiringLru<K, V> {
  private readonly entries = new Map<K, Entry<V>>();

  constructor(
    private readonly clock: Clock,
    private readonly ttlMs: number,
    private readonly maxEntries: number,
  ) {}

  get(key: K): V | undefined {
    const e = this.entries.get(key);
    if (!e) return undefined;
    this.entries.delete(key);
    if (this.clock.now() - e.loadedAtMs >= this.ttlMs) return undefined;
    this.entries.set(key, e);
    return e.value;
  }

  set(key: K, value: V): void {
    this.entries.delete(key);
    this.entries.set(key, { value, loadedAtMs: this.clock.now() });
    if (this.entries.size > this.maxEntries) {
      const oldest = this.entries.keys().next().value;
      if (oldest !== undefined) this.entries.delete(oldest);
    }
  }

  delete(key: K): void {
    this.entries.delete(key);
  }

  deleteWhere(matches: (value: V) => boolean): void {
    for (const [k, e] of this.entries) if (matches(e.value)) this.entries.delete(k);
  }

  get size(): number {
    return this.entries.size;
  }
}
