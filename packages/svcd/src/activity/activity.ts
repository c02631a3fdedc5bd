import type { ActivityEntry, ActivityQuery } from '@svc/contract';
import { ACTIVITY_LIMIT_DEFAULT, PAGE_LIMIT_MAX } from '@svc/contract';
import { type Clock, unixSeconds } from '../clock.js';
import { hexId } from '../ids.js';
import type { Repositories, Store } from '../store/index.js';

export interface ActivityEvent {
  tenantId: string;
  /** `<resource>.<verb>`, e.g. `key.created`. */
  action: string;
  resourceType: string;
  resourceId: string;
  serviceId?: string;
  details?: Record<string, unknown>;
}

/** The tenant's activity feed: written beside each change, in the change's own transaction. */
export class Activity {
  private readonly observers: Array<(event: ActivityEvent) => void> = [];

  constructor(
    private readonly store: Store,
    private readonly clock: Clock,
  ) {}

  /** Called with each recorded event once it is committed (operator metrics count outcomes from them). */
  observe(fn: (event: ActivityEvent) => void): void {
    this.observers.push(fn);
  }

  async record(repos: Repositories, e: ActivityEvent): Promise<void> {
    await repos.activity.insert({
      id: hexId(12),
      tenant_id: e.tenantId,
      action: e.action,
      resource_type: e.resourceType,
      resource_id: e.resourceId,
      service_id: e.serviceId ?? null,
      details: JSON.stringify(e.details ?? {}),
      created_at: unixSeconds(this.clock),
    });
    // Told once committed: an entry of a transaction that rolls back was never there.
    repos.afterCommit(() => {
      for (const fn of this.observers) fn(e);
    });
  }

  async list(tenantId: string, q: ActivityQuery): Promise<ActivityEntry[]> {
    const rows = await this.store.activity.list({
      tenantId,
      resourceType: q.resource_type,
      action: q.action,
      serviceId: q.service_id,
      since: q.since,
      limit: Math.min(q.limit ?? ACTIVITY_LIMIT_DEFAULT, PAGE_LIMIT_MAX),
      offset: q.offset ?? 0,
    });
    return rows.map((r) => ({
      id: r.id,
      action: r.action,
      resource_type: r.resource_type,
      resource_id: r.resource_id,
      service_id: r.service_id,
      details: JSON.parse(r.details) as Record<string, unknown>,
      created_at: r.created_at,
    }));
  }
}
