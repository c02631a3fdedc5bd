// The retention sweep: deletes what the rules in rules.ts say is no longer kept. It runs as a
// periodic job under a lease in the store (app.ts), so one svcd sweeps at a time and another
// carries on if that one dies: nothing is remembered between runs, each batch selects afresh
// from the store what is still due, and every delete re-checks its conditions on the rows.
// Deletes go in bounded batches (never one statement over a whole backlog, which would hold
// SQLite's write lock for seconds), and a run stops a rule after a bounded number of batches:
// a backlog (the first sweep of an old installation) is worked off over several runs.
import { SOURCE_ARCHIVE_UNUSED_TTL_SECONDS } from '@svc/contract';
import { setImmediate as nextTurn } from 'node:timers/promises';
import type { Logger } from 'pino';
import { type Clock, unixSeconds } from '../clock.js';
import type { Store } from '../store/index.js';
import {
  ACTIVITY_PER_TENANT_MAX,
  BUILD_LOGS_KEPT_PER_SERVICE,
  BUILDS_PER_SERVICE_MAX,
  DEPLOYMENTS_KEPT_PER_SERVICE,
  DEPLOYMENTS_PER_SERVICE_MAX,
  REVOKED_KEYS_PER_TENANT_MAX,
  type RetentionWindows,
} from './rules.js';

/** The sweep's job name (its lease in the store) and how often it runs. */
export const RETENTION_JOB = 'retention.sweep';
export const RETENTION_EVERY_MS = 10 * 60_000;

const DAY_S = 86_400;
/** Rows per delete statement. */
export const ROWS_PER_BATCH = 500;
/** Log chunks per delete statement: a chunk is up to about 64 KB of output. */
const LOG_CHUNKS_PER_BATCH = 50;
/** Builds looked at per query of the log rules. */
const BUILDS_PER_QUERY = 100;
/** Statements per rule per run: bounds a run's length (its lease is RETENTION_EVERY_MS). */
export const BATCHES_PER_RULE = 1000;

/** What one sweep deleted. */
export interface RetentionReport {
  activity: number;
  deployments: number;
  /** Builds whose log was removed (their records stay). */
  buildLogs: number;
  builds: number;
  keys: number;
  /** Dashboard sessions that ended (expired) before today. */
  sessions: number;
  /** Claims of published ports whose owner no longer holds them (left by an older svcd during an upgrade). */
  portClaims: number;
}

/** Statements a rule may still run in this sweep. */
interface Budget {
  left: number;
}

export class Retention {
  constructor(
    private readonly store: Store,
    private readonly clock: Clock,
    private readonly log: Logger,
    private readonly windows: RetentionWindows,
  ) {}

  async sweep(): Promise<RetentionReport> {
    const now = unixSeconds(this.clock);
    const report: RetentionReport = {
      activity: await this.activity(now),
      deployments: await this.deployments(now),
      ...(await this.builds(now)),
      keys: await this.keys(now),
      sessions: await this.drain({ left: BATCHES_PER_RULE }, (limit) => this.store.webSessions.deleteExpiredBefore(now - DAY_S, limit)),
      // At most one per port of --swarm-ports: one statement.
      portClaims: await this.store.publishedPorts.releaseOrphanedClaims(now),
    };
    if (Object.values(report).some((n) => n > 0)) this.log.info({ pruned: report }, 'retention sweep');
    return report;
  }

  /**
   * Stored idempotent answers past their window (spec 8: 10 minutes; each row carries its end).
   * Run every minute by the store.prune job rather than by the sweep: a busy minute stores many.
   */
  async pruneIdempotency(): Promise<number> {
    const now = unixSeconds(this.clock);
    return this.drain({ left: BATCHES_PER_RULE }, (limit) => this.store.idempotency.pruneExpired(now, limit));
  }

  /**
   * Uploaded source archives no build took within their hour, and those of finished builds that
   * the build's own clean-up missed (its svcd died). Run with pruneIdempotency: archives are large.
   */
  async pruneSourceArchives(): Promise<number> {
    const unusedBefore = unixSeconds(this.clock) - SOURCE_ARCHIVE_UNUSED_TTL_SECONDS;
    return this.drain({ left: BATCHES_PER_RULE }, async (limit) => {
      const due = await this.store.sourceArchives.listDue(unusedBefore, limit);
      let removed = 0;
      for (const id of due) if (await this.store.sourceArchives.deleteIfDue(id, unusedBefore)) removed++;
      return removed;
    });
  }

  /** Older than the window; then past the per-tenant cap, oldest first. */
  private async activity(now: number): Promise<number> {
    const activity = this.store.activity;
    const cutoff = now - this.windows.activityDays * DAY_S;
    let n = await this.drain({ left: BATCHES_PER_RULE }, (limit) => activity.deleteCreatedBefore(cutoff, limit));
    const budget = { left: BATCHES_PER_RULE };
    await this.eachOwner(budget, (after) => activity.nextTenantAfter(after), async (tenantId) => {
      const last = await activity.seqAt(tenantId, ACTIVITY_PER_TENANT_MAX);
      if (last !== undefined) n += await this.drain(budget, (limit) => activity.deleteUpTo(tenantId, last, limit));
    });
    return n;
  }

  /**
   * Finished deployments past the window or past the per-service cap; a service's newest ones and
   * the one it runs (its newest succeeded) always stay, and unfinished ones are never touched.
   */
  private async deployments(now: number): Promise<number> {
    const deployments = this.store.deployments;
    const finishedBefore = now - this.windows.deploymentDays * DAY_S;
    const budget = { left: BATCHES_PER_RULE };
    let n = 0;
    await this.eachOwner(budget, (after) => deployments.nextServiceAfter(after), async (serviceId) => {
      const last = await deployments.positionAt(serviceId, DEPLOYMENTS_KEPT_PER_SERVICE);
      if (!last) return;
      const lastOfAnyAge = (await deployments.positionAt(serviceId, DEPLOYMENTS_PER_SERVICE_MAX)) ?? null;
      const except = (await deployments.newestSucceeded(serviceId)) ?? null;
      n += await this.drain(budget, (limit) => deployments.deleteFinished(serviceId, { last, finishedBefore, lastOfAnyAge, except, limit }));
    });
    return n;
  }

  /**
   * Logs of builds that finished before the window, and of builds past a service's newest ones;
   * then build records past the per-service cap (only once their log is gone).
   */
  private async builds(now: number): Promise<{ buildLogs: number; builds: number }> {
    const builds = this.store.builds;
    const cutoff = now - this.windows.buildLogDays * DAY_S;
    const budget = { left: BATCHES_PER_RULE };
    let buildLogs = await this.pruneLogs(budget, now, () => builds.logsFinishedBefore(cutoff, BUILDS_PER_QUERY));
    let rows = 0;
    await this.eachOwner(budget, (after) => builds.nextServiceAfter(after), async (serviceId) => {
      const lastWithLog = await builds.positionAt(serviceId, BUILD_LOGS_KEPT_PER_SERVICE);
      if (!lastWithLog) return;
      buildLogs += await this.pruneLogs(budget, now, () => builds.logsUpTo(serviceId, lastWithLog, BUILDS_PER_QUERY));
      const last = await builds.positionAt(serviceId, BUILDS_PER_SERVICE_MAX);
      if (last) rows += await this.drain(budget, (limit) => builds.deletePrunedUpTo(serviceId, last, limit));
    });
    return { buildLogs, builds: rows };
  }

  /** Prunes the logs `due` names, query after query, until it names none or the budget is spent. */
  private async pruneLogs(budget: Budget, now: number, due: () => Promise<string[]>): Promise<number> {
    let pruned = 0;
    while (budget.left > 0) {
      const ids = await due();
      for (const id of ids) {
        for (;;) {
          if (budget.left <= 0) return pruned;
          budget.left -= 1;
          const gone = await this.store.builds.pruneLog(id, now, LOG_CHUNKS_PER_BATCH);
          await nextTurn();
          if (gone) break;
        }
        pruned += 1;
      }
      if (ids.length < BUILDS_PER_QUERY) break;
    }
    return pruned;
  }

  /** Revoked and expired keys past the window; then revoked ones past the per-tenant cap. */
  private async keys(now: number): Promise<number> {
    const keys = this.store.apiKeys;
    const cutoff = now - this.windows.keyDays * DAY_S;
    let n = await this.drain({ left: BATCHES_PER_RULE }, (limit) => keys.deleteRevokedBefore(cutoff, limit));
    n += await this.drain({ left: BATCHES_PER_RULE }, (limit) => keys.deleteExpiredBefore(cutoff, limit));
    const budget = { left: BATCHES_PER_RULE };
    await this.eachOwner(budget, (after) => keys.nextTenantWithRevokedAfter(after), async (tenantId) => {
      const last = await keys.revokedAt(tenantId, REVOKED_KEYS_PER_TENANT_MAX);
      if (last) n += await this.drain(budget, (limit) => keys.deleteRevokedUpTo(tenantId, last, limit));
    });
    return n;
  }

  /**
   * Runs `batch` until it deletes less than a full batch or the budget is spent. Between
   * statements the event loop gets a turn (requests are served; with SQLite, whose driver is
   * synchronous, nothing else would run until the whole rule was done).
   */
  private async drain(budget: Budget, batch: (limit: number) => Promise<number>): Promise<number> {
    let total = 0;
    while (budget.left > 0) {
      budget.left -= 1;
      const n = await batch(ROWS_PER_BATCH);
      total += n;
      await nextTurn();
      if (n < ROWS_PER_BATCH) break;
    }
    return total;
  }

  /**
   * Calls `fn` for each owner (tenant or service) that `next` finds, in id order, while budget is
   * left. Each owner's look-ups are followed by a turn of the event loop: thousands of owners
   * must not hold a synchronous SQLite driver in one go. (They do not count against the budget,
   * which bounds deletes: owners late in id order would otherwise never be reached.)
   */
  private async eachOwner(budget: Budget, next: (after: string) => Promise<string | undefined>, fn: (owner: string) => Promise<void>): Promise<void> {
    for (let owner = await next(''); owner !== undefined && budget.left > 0; owner = await next(owner)) {
      await fn(owner);
      await nextTurn();
    }
  }
}
