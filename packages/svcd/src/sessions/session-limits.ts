// How many long-running sessions (log streams, execs, syncs) may be open at once: per tenant
// across every svcd on the store, and per svcd whatever the tenants.
//
// A tenant's count lives in the store (one row per session, under the tenant's quota lock), so a
// tenant cannot multiply its cap by spreading sessions over several svcd. Each svcd renews the
// leases of its rows while it holds them; rows of an svcd that died expire on their own. The
// per-svcd count is about this process's sockets and memory, so it lives in this process.
import { randomUUID } from 'node:crypto';
import type { Clock, TimerHandle, Timers } from '../clock.js';
import { QuotaExceededError, ServerBusyError } from '../errors.js';
import type { SessionKind, Store } from '../store/index.js';

export type { SessionKind } from '../store/index.js';

export type SessionCaps = Record<SessionKind, number>;

/** Per tenant, across svcd processes (README, OpenAPI). */
export const TENANT_SESSION_CAPS: SessionCaps = { logs: 10, exec: 8, sync: 2 };
/** Per svcd process, across tenants. */
export const SVCD_SESSION_CAPS: SessionCaps = { logs: 500, exec: 64, sync: 8 };

const WHAT: Record<SessionKind, string> = {
  logs: 'log streams',
  exec: 'commands running in environments',
  sync: 'environment syncs',
};

export const SESSION_LEASE_MS = 60_000;
const RENEW_EVERY_MS = 20_000;

export interface SessionSlot {
  /**
   * Frees the slot; later calls do nothing. Resolves once the store no longer counts it (a row
   * that cannot be deleted now expires with its lease); never rejects.
   */
  release(): Promise<void>;
}

export interface SessionLimitsOptions {
  tenant?: SessionCaps;
  svcd?: SessionCaps;
  leaseMs?: number;
}

export class SessionLimits {
  private readonly open: Record<SessionKind, number> = { logs: 0, exec: 0, sync: 0 };
  private readonly tenantCaps: SessionCaps;
  private readonly svcdCaps: SessionCaps;
  private readonly leaseMs: number;
  private renewer: TimerHandle | null = null;

  constructor(
    private readonly store: Store,
    private readonly clock: Clock,
    private readonly timers: Timers,
    /** `<instance>/<boot>`: this process as the holder of its rows. */
    private readonly holder: string,
    opts: SessionLimitsOptions = {},
  ) {
    this.tenantCaps = opts.tenant ?? TENANT_SESSION_CAPS;
    this.svcdCaps = opts.svcd ?? SVCD_SESSION_CAPS;
    this.leaseMs = opts.leaseMs ?? SESSION_LEASE_MS;
  }

  /** Renews this process's rows while it runs, and drops rows of earlier boots and dead holders. */
  async start(): Promise<void> {
    const instance = this.holder.split('/')[0] ?? this.holder;
    await this.store.sessionSlots.prune(this.clock.now(), { instance, currentHolder: this.holder });
    this.renewer = this.timers.setInterval(() => {
      const now = this.clock.now();
      void this.store.sessionSlots
        .renew(this.holder, now + this.leaseMs)
        .then(() => this.store.sessionSlots.prune(now))
        .catch(() => {
          // The store is away: the rows expire unless a later renewal gets through, which at worst
          // lets a tenant open a few more sessions than its cap for a while.
        });
    }, RENEW_EVERY_MS);
  }

  close(): void {
    this.renewer?.cancel();
  }

  /**
   * Takes a slot of `kind` for the tenant, or refuses: 409 `quota exceeded` past the tenant's cap,
   * 503 past this svcd's. The caller releases it when the session ends, however it ends.
   */
  async acquire(tenantId: string, kind: SessionKind): Promise<SessionSlot> {
    if (this.open[kind] >= this.svcdCaps[kind]) {
      throw new ServerBusyError(`server busy: ${this.svcdCaps[kind]} ${WHAT[kind]} are open on this server; retry shortly`, 5);
    }
    // Counted before the store is asked, so that concurrent acquires here cannot overshoot.
    this.open[kind]++;
    const id = randomUUID();
    try {
      await this.store.transaction(async (tx) => {
        // The quota lock makes count-then-insert one step among concurrent requests of the tenant.
        await tx.tenants.lockForQuota(tenantId);
        const now = this.clock.now();
        const live = await tx.sessionSlots.countLive(tenantId, kind, now);
        if (live >= this.tenantCaps[kind]) throw new QuotaExceededError(`at most ${this.tenantCaps[kind]} ${WHAT[kind]} at once`);
        await tx.sessionSlots.insert({ id, tenant_id: tenantId, kind, holder: this.holder, expires_at_ms: now + this.leaseMs });
      });
    } catch (err) {
      this.open[kind]--;
      throw err;
    }
    let released: Promise<void> | null = null;
    return {
      release: () => {
        if (released) return released;
        this.open[kind]--;
        released = this.store.sessionSlots.delete(id).catch(() => {});
        return released;
      },
    };
  }

  /**
   * Runs `fn` in a slot of `kind`, released when it settles and before the answer goes out: a
   * client that runs the next command once it has this one's answer finds the slot free.
   */
  async within<T>(tenantId: string, kind: SessionKind, fn: () => Promise<T>): Promise<T> {
    const slot = await this.acquire(tenantId, kind);
    try {
      return await fn();
    } finally {
      await slot.release();
    }
  }
}

/** Holds the slot for as long as the stream is open; however the stream ends, the slot is freed. */
export function holdWhileOpen<S extends NodeJS.ReadableStream>(slot: SessionSlot, stream: S): S {
  for (const event of ['close', 'end', 'error']) stream.once(event, () => void slot.release());
  return stream;
}
