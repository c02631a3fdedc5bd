// Metering: rollups of the sampler's readings per hour and per day, per tenant and per service,
// their retention, and the metrics routes' queries. The metering store may live apart from
// svc's database; when it does not answer, the routes say 503 and nothing else is affected.
import { METRICS_MAX_BUCKETS, type MetricsPeriod, type TenantMetricsQuery, type UsageRollup } from '@svc/contract';
import { type Clock, unixSeconds } from '../clock.js';
import { NotFoundError, UnavailableError, ValidationError } from '../errors.js';
import type { MeteringStore, Store, UsageRollupRow } from '../store/index.js';
import { bucketStart, dailyRollups, DAY_S, HOUR_S, hourlyRollups } from './rollups.js';

/** Raw samples are kept this long: long enough to recompute the previous day's hours. */
export const SAMPLE_RETENTION_S = 2 * DAY_S;

export interface MeteringOptions {
  /** Rollups older than this many days are dropped. */
  retentionDays: number;
}

export class Metering {
  constructor(
    private readonly store: Store,
    private readonly metering: MeteringStore,
    private readonly clock: Clock,
    private readonly opts: MeteringOptions,
  ) {}

  /**
   * Recomputes the current and the previous hour from their samples, then the current and the
   * previous day from their hours, and prunes. Each bucket is replaced whole, so a run repeated
   * (or run by another svcd after this one died) gives the same rows.
   */
  /** `beforeWrite` throws to stop before a write (the job's lease went to another svcd). */
  async rollUp(beforeWrite: () => Promise<void> = () => Promise.resolve()): Promise<void> {
    const now = unixSeconds(this.clock);
    const hour = bucketStart('hourly', now);
    for (const h of [hour - HOUR_S, hour]) {
      const rollups = hourlyRollups(await this.metering.samplesBetween(h, h + HOUR_S), h);
      await beforeWrite();
      await this.metering.replaceRollups('hourly', h, rollups);
    }
    const day = bucketStart('daily', now);
    for (const d of [day - DAY_S, day]) {
      const rollups = dailyRollups(await this.metering.rollupsBetween('hourly', d, d + DAY_S), d);
      await beforeWrite();
      await this.metering.replaceRollups('daily', d, rollups);
    }
    const keep = this.opts.retentionDays * DAY_S;
    await this.metering.prune({ samplesBefore: now - SAMPLE_RETENTION_S, hourlyBefore: now - keep, dailyBefore: now - keep });
  }

  /** The tenant's totals, or one of its services' rollups with service_id. */
  async tenantMetrics(tenantId: string, q: TenantMetricsQuery): Promise<UsageRollup[]> {
    if (q.service_id !== undefined) return this.serviceMetrics(tenantId, q.service_id, q);
    return this.query(tenantId, '', q);
  }

  async serviceMetrics(tenantId: string, serviceId: string, q: TenantMetricsQuery): Promise<UsageRollup[]> {
    // A deleted service's history stays in the tenant's totals; its own rows are not served.
    if (!(await this.store.services.find(tenantId, serviceId))) throw new NotFoundError('service');
    return this.query(tenantId, serviceId, q);
  }

  private async query(tenantId: string, serviceId: string, q: TenantMetricsQuery): Promise<UsageRollup[]> {
    const period: MetricsPeriod = q.period ?? 'daily';
    const size = period === 'hourly' ? HOUR_S : DAY_S;
    const until = q.until === undefined ? unixSeconds(this.clock) : rfc3339('until', q.until);
    const since = q.since === undefined ? until - (period === 'hourly' ? DAY_S : 30 * DAY_S) : rfc3339('since', q.since);
    if (since > until) throw new ValidationError('since must not be after until');
    // Every bucket that overlaps [since, until].
    const from = bucketStart(period, since);
    if ((until - from) / size > METRICS_MAX_BUCKETS) {
      throw new ValidationError(`the range covers more than ${METRICS_MAX_BUCKETS} ${period === 'hourly' ? 'hours' : 'days'}`);
    }
    let rows: UsageRollupRow[];
    try {
      rows = await this.metering.rollupsBetween(period, from, until + 1, { tenantId, serviceId });
    } catch (err) {
      // The driver's message names hosts and users: it is logged, not answered.
      throw new UnavailableError('metering store unavailable', err);
    }
    return rows.map((r) => ({
      period,
      start: r.bucket_start,
      end: r.bucket_start + size,
      service_id: r.service_id === '' ? null : r.service_id,
      cpu_seconds: Math.round(r.cpu_seconds * 1000) / 1000,
      memory_avg_mb: megabytes(r.memory_avg_bytes),
      memory_peak_mb: megabytes(r.memory_peak_bytes),
      network_rx_bytes: r.net_rx_bytes,
      network_tx_bytes: r.net_tx_bytes,
      disk_read_bytes: r.disk_read_bytes,
      disk_write_bytes: r.disk_write_bytes,
      running_seconds: r.running_seconds,
    }));
  }
}

function megabytes(bytes: number): number {
  return Math.round((bytes / (1024 * 1024)) * 10) / 10;
}

// A full RFC 3339 date-time: date, time, and a zone (Z or an offset). Date.parse alone would
// also take "2026-11-01" or "Nov 1 2026".
const RFC3339 = /^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$/;

/** Unix seconds of an RFC 3339 timestamp; 400 naming the parameter otherwise. */
export function rfc3339(name: string, value: string): number {
  const ms = RFC3339.test(value) ? Date.parse(value.replace(' ', 'T')) : Number.NaN;
  if (Number.isNaN(ms)) throw new ValidationError(`${name} must be an RFC 3339 timestamp such as 2026-11-01T00:00:00Z`);
  return Math.floor(ms / 1000);
}
