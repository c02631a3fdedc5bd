// Requests held open until something ends (?wait on a service's deploy or on a build): capped
// per tenant and in all on this svcd, and answered at once when the server closes.
//
// The caps are about this process's sockets (a held request keeps one open for up to 20 s, and
// costs the store a read every pause), so they live in this process, shared by every kind of
// wait: a tenant holds at most WAITS_PER_TENANT of them here, whatever it waits on.

import type { Clock } from '../clock.js';

/** ?wait requests held at once by this svcd, per tenant and in all (README, OpenAPI). */
export const WAITS_PER_TENANT = 10;
export const WAITS_PER_SVCD = 500;
/** The first pause between reads, doubled up to PAUSE_MAX_MS: work another svcd ends is seen within it. */
const FIRST_PAUSE_MS = 20;
const PAUSE_MAX_MS = 250;

/** How a held wait reads what it waits on, knows it is settled, and pauses until it may have changed. */
export interface SettledRead<T> {
  read: () => Promise<T>;
  settled: (value: T) => boolean;
  /** A pause of up to pauseMs, ended early by the end of this svcd's own work on it, or by `ended`. */
  nextChange: (pauseMs: number, ended: AbortSignal) => Promise<void>;
}

export class HeldWaits {
  private readonly byTenant = new Map<string, number>();
  private open = 0;
  /** The held waits' own signals, so that endAll() ends each (and nothing outlives its wait). */
  private readonly held = new Set<AbortController>();
  private isClosing = false;

  /** `clock` times a wait's seconds (?wait=N): svcd's, which tests move by hand. */
  constructor(private readonly clock: Clock) {}

  /**
   * What `read` answers once `settled` holds of it, or after `waitMs` (?wait=N): read again when
   * `nextChange` ends a pause (early, when this svcd's own work on the thing ended; at growing
   * pauses otherwise, for work another svcd carries out). Ends early when the client hangs up
   * (`gone`) or the server closes. Past the caps, once closing, or with the client gone already,
   * one read at once (the client asks again, as it would poll: a request costs a tenant one token
   * of its rate). Its seconds are on svcd's clock; its pauses (nextChange) pace reads of work
   * other processes may carry out, in real time.
   */
  async readOnceSettled<T>(tenantId: string, gone: AbortSignal, waitMs: number, { read, settled, nextChange }: SettledRead<T>): Promise<T> {
    const mine = this.byTenant.get(tenantId) ?? 0;
    if (mine >= WAITS_PER_TENANT || this.open >= WAITS_PER_SVCD || this.isClosing || gone.aborted) return read();
    this.byTenant.set(tenantId, mine + 1);
    this.open++;
    // Its own signal, ended by `gone` or by endAll(): not a composite of a signal that lives as
    // long as the process, which each wait would join for good.
    const ended = new AbortController();
    const end = () => ended.abort();
    gone.addEventListener('abort', end, { once: true });
    this.held.add(ended);
    try {
      const until = this.clock.now() + waitMs;
      for (let pauseMs = FIRST_PAUSE_MS; ; pauseMs = Math.min(pauseMs * 2, PAUSE_MAX_MS)) {
        const value = await read();
        const left = until - this.clock.now();
        if (settled(value) || left <= 0 || ended.signal.aborted) return value;
        // A pause in real time bounded by what is left on the clock: the same milliseconds in
        // production; under a test's clock moved by hand, reads a millisecond apart near the end.
        await nextChange(Math.min(pauseMs, left), ended.signal);
      }
    } finally {
      gone.removeEventListener('abort', end);
      this.held.delete(ended);
      this.open--;
      const left = (this.byTenant.get(tenantId) ?? 1) - 1;
      if (left === 0) this.byTenant.delete(tenantId);
      else this.byTenant.set(tenantId, left);
    }
  }

  /** Waits of the tenant this process holds now. */
  heldBy(tenantId: string): number {
    return this.byTenant.get(tenantId) ?? 0;
  }

  /**
   * Answers every held wait now, and every later one at once: the server is closing, and its
   * close waits for requests in flight (a held wait would keep it up to 20 s).
   */
  endAll(): void {
    this.isClosing = true;
    for (const h of this.held) h.abort();
  }

  /** Whether endAll() was called: the server is closing. */
  get closing(): boolean {
    return this.isClosing;
  }
}
