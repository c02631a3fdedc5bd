/** Outcome of taking one token. */
export interface TakeResult {
  allowed: boolean;
  /** Whole tokens left after this request. */
  remaining: number;
  /** Seconds until a token is available (when refused). */
  retryAfterSeconds: number;
}

/**
 * A token bucket: `burst` tokens, refilled at `perSecond`. Time comes from the caller, so the
 * bucket holds no clock of its own.
 */
export class TokenBucket {
  private tokens: number;
  private lastMs: number;

  constructor(
    private readonly perSecond: number,
    private readonly burst: number,
    nowMs: number,
  ) {
    this.tokens = burst;
    this.lastMs = nowMs;
  }

  take(nowMs: number): TakeResult {
    const elapsed = Math.max(0, nowMs - this.lastMs) / 1000;
    this.tokens = Math.min(this.burst, this.tokens + elapsed * this.perSecond);
    this.lastMs = nowMs;
    if (this.tokens >= 1) {
      this.tokens -= 1;
      return { allowed: true, remaining: Math.floor(this.tokens), retryAfterSeconds: 0 };
    }
    return { allowed: false, remaining: 0, retryAfterSeconds: (1 - this.tokens) / this.perSecond };
  }

  /** Whether a take now would be allowed, without taking (the bucket is left as it was). */
  wouldAllow(nowMs: number): boolean {
    const elapsed = Math.max(0, nowMs - this.lastMs) / 1000;
    return Math.min(this.burst, this.tokens + elapsed * this.perSecond) >= 1;
  }

  lastUsedMs(): number {
    return this.lastMs;
  }
}
