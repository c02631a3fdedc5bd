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
/**
 * Requests that present no API key (and failed key checks), per client IP: 20/s, burst 40. Taken
 * before the global bucket, so that one address flooding without a valid key is refused by its
 * own limiter and cannot drain the bucket every tenant shares. Far above what a person, a CLI or
 * a registration script sends; tenants' keyed traffic never draws on it.
 */
export const CLIENT_IP_PER_SECOND = 20;
export const CLIENT_IP_BURST = 40;
/** Client-IP buckets kept (least recently used dropped past it, like tenant buckets). */
export const CLIENT_IP_BUCKETS_MAX = 10_000;
/** A bucket is full again 2 s after its last use, so one idle a minute is dropped: it holds nothing a fresh one would not. */
const CLIENT_IP_BUCKET_IDLE_MS = 60_000;

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
  private readonly clientIps: KeyedLimiter;

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
    this.clientIps = new KeyedLimiter(
      {
        perSecond: CLIENT_IP_PER_SECOND,
        burst: CLIENT_IP_BURST,
        maxKeys: CLIENT_IP_BUCKETS_MAX,
        idleMs: CLIENT_IP_BUCKET_IDLE_MS,
        sweepEveryMs: CLIENT_IP_BUCKET_IDLE_MS,
      },
      clock,
      timers,
    );
  }

  /** A request without an API key, from this client IP; throws 429 when its allowance is spent. */
  takeClientIp(clientIp: string): void {
    const r = this.clientIps.take(clientIp);
    if (!r.allowed) throw new RateLimitedError(r.retryAfterSeconds, 'client_ip');
  }

  /** A failed key check is charged to its client IP like a request without a key (no 429 here: the 401 stands). */
  chargeClientIp(clientIp: string): void {
    this.clientIps.take(clientIp);
  }

  /** Whether this client IP has allowance left, without taking any. */
  clientIpHasAllowance(clientIp: string): boolean {
    return this.clientIps.wouldAllow(clientIp);
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
    this.clientIps.close();
  }
}
