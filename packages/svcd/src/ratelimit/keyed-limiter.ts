import type { Clock, TimerHandle, Timers } from '../clock.js';
import { TokenBucket, type TakeResult } from './token-bucket.js';

export interface KeyedLimiterOptions {
  perSecond: number;
  burst: number;
  /** Most buckets kept; the least recently used is dropped past it. */
  maxKeys: number;
  /** A bucket unused this long is dropped by the sweep. */
  idleMs: number;
  sweepEveryMs: number;
}

/**
 * One token bucket per key (tenant id, client IP). The Map doubles as an LRU list: a bucket is
 * re-inserted on use, so the first entry is always the least recently used. A dropped bucket
 * only means that key starts again with a full burst.
 */
export class KeyedLimiter {
  private readonly buckets = new Map<string, TokenBucket>();
  private readonly sweeper: TimerHandle;

  constructor(
    private readonly opts: KeyedLimiterOptions,
    private readonly clock: Clock,
    timers: Timers,
  ) {
    this.sweeper = timers.setInterval(() => this.sweep(), opts.sweepEveryMs);
  }

  take(key: string): TakeResult {
    const now = this.clock.now();
    let bucket = this.buckets.get(key);
    if (bucket) {
      this.buckets.delete(key);
    } else {
      bucket = new TokenBucket(this.opts.perSecond, this.opts.burst, now);
      if (this.buckets.size >= this.opts.maxKeys) {
        const oldest = this.buckets.keys().next().value;
        if (oldest !== undefined) this.buckets.delete(oldest);
      }
    }
    this.buckets.set(key, bucket);
    return bucket.take(now);
  }

  /**
   * Whether `key` could take a token now, without taking one. A key without a bucket has a full
   * burst; peeking neither creates a bucket nor counts as use (the LRU order is left alone).
   */
  wouldAllow(key: string): boolean {
    return this.buckets.get(key)?.wouldAllow(this.clock.now()) ?? true;
  }

  /** Drops buckets idle longer than idleMs. Oldest first, so it stops at the first fresh one. */
  sweep(): void {
    const cutoff = this.clock.now() - this.opts.idleMs;
    for (const [key, bucket] of this.buckets) {
      if (bucket.lastUsedMs() > cutoff) break;
      this.buckets.delete(key);
    }
  }

  get size(): number {
    return this.buckets.size;
  }

  has(key: string): boolean {
    return this.buckets.has(key);
  }

  close(): void {
    this.sweeper.cancel();
  }
}
