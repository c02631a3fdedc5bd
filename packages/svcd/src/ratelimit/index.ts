// Rate limits of spec 8. All state belongs to a RateLimits instance built at start-up, so two
// servers in one process (tests) never share buckets.
import type { Clock, Timers } from '../clock.js';
import type { RateSetting } from '../config.js';
import { RateLimitedError } from '../errors.js';
import { KeyedLimiter } from './keyed-limiter.js';
import { TokenBucket, type TakeResult } from './token-bucket.js';

export { KeyedLimiter } from './keyed-limiter.js';
export { TokenBucket } from './token-bucket.js';

export const TENANT_BUCKETS_MAX = 10_000;
export const TENANT_BUCKET_IDLE_MS = 60 * 60_000;
export const SWEEP_EVERY_MS = 5 * 60_000;
/** Registration limiter: 5 per client IP per hour, 20 per hour overall. */
export const REGISTRATION_PER_IP_PER_HOUR = 5;
export const REGISTRATION_GLOBAL_PER_HOUR = 20;
const HOUR_S = 3600;

export interface RateLimitsOptions {
  tenant: RateSetting;
  global: RateSetting;
}

export class RateLimits {
  readonly tenantLimit: number;
  private readonly global: TokenBucket;
  private readonly tenants: KeyedLimiter;
  private readonly registrationGlobal: TokenBucket;
  private readonly registrationByIp: KeyedLimiter;

  constructor(
    opts: RateLimitsOptions,
    private readonly clock: Clock,
    timers: Timers,
  ) {
    const now = clock.now();
    this.tenantLimit = opts.tenant.perSecond;
    this.global = new TokenBucket(opts.global.perSecond, opts.global.burst, now);
    this.tenants = new KeyedLimiter(
      { ...opts.tenant, maxKeys: TENANT_BUCKETS_MAX, idleMs: TENANT_BUCKET_IDLE_MS, sweepEveryMs: SWEEP_EVERY_MS },
      clock,
      timers,
    );
    // Hourly allowances as buckets: a full hour's allowance up front, refilled evenly.
    this.registrationGlobal = new TokenBucket(REGISTRATION_GLOBAL_PER_HOUR / HOUR_S, REGISTRATION_GLOBAL_PER_HOUR, now);
    this.registrationByIp = new KeyedLimiter(
      {
        perSecond: REGISTRATION_PER_IP_PER_HOUR / HOUR_S,
        burst: REGISTRATION_PER_IP_PER_HOUR,
        maxKeys: TENANT_BUCKETS_MAX,
        idleMs: 2 * HOUR_S * 1000,
        sweepEveryMs: SWEEP_EVERY_MS,
      },
      clock,
      timers,
    );
  }

  /** The process-wide limit; throws 429 when exhausted. */
  takeGlobal(): void {
    const r = this.global.take(this.clock.now());
    if (!r.allowed) throw new RateLimitedError(r.retryAfterSeconds, 'global');
  }

  /** The per-tenant limit; returns the result so the caller can set X-RateLimit-* headers. */
  takeTenant(tenantId: string): TakeResult {
    return this.tenants.take(tenantId);
  }

  /** Registration-class routes; the IP allowance is checked first, then the global one. */
  takeRegistration(clientIp: string): void {
    const byIp = this.registrationByIp.take(clientIp);
    if (!byIp.allowed) throw new RateLimitedError(byIp.retryAfterSeconds, 'registration_ip');
    const all = this.registrationGlobal.take(this.clock.now());
    if (!all.allowed) throw new RateLimitedError(all.retryAfterSeconds, 'registration_global');
  }

  /** Exposed for tests of the bucket bookkeeping. */
  get tenantBuckets(): KeyedLimiter {
    return this.tenants;
  }

  close(): void {
    this.tenants.close();
    this.registrationByIp.close();
  }
}
