import { Type, type Static } from 'typebox';
import { UnixSeconds } from './common.js';

export const MetricsPeriod = Type.Union([Type.Literal('hourly'), Type.Literal('daily')]);
export type MetricsPeriod = Static<typeof MetricsPeriod>;

/** The widest range one query may cover, in buckets (31 days of hours, about 3 years of days). */
export const METRICS_MAX_BUCKETS = 1000;

export const MetricsQuery = Type.Object({
  period: Type.Optional(MetricsPeriod),
  since: Type.Optional(
    Type.String({
      maxLength: 64,
      description: 'RFC 3339 (e.g. 2026-11-01T00:00:00Z); default: 24 hours (hourly) or 30 days (daily) before until',
    }),
  ),
  until: Type.Optional(Type.String({ maxLength: 64, description: 'RFC 3339; default: now' })),
});
export type MetricsQuery = Static<typeof MetricsQuery>;

export const TenantMetricsQuery = Type.Object({
  ...MetricsQuery.properties,
  service_id: Type.Optional(Type.String({ minLength: 1, maxLength: 64, description: "one service's rollups instead of the tenant's totals" })),
});
export type TenantMetricsQuery = Static<typeof TenantMetricsQuery>;

export const UsageRollup = Type.Object(
  {
    period: MetricsPeriod,
    start: UnixSeconds,
    end: UnixSeconds,
    service_id: Type.Union([Type.String(), Type.Null()], { description: "null: the tenant's totals over all its containers" }),
    cpu_seconds: Type.Number({ description: 'CPU time used' }),
    memory_avg_mb: Type.Number({ description: 'average working set over the samples of the bucket (containers summed per sample)' }),
    memory_peak_mb: Type.Number(),
    network_rx_bytes: Type.Integer(),
    network_tx_bytes: Type.Integer(),
    disk_read_bytes: Type.Integer(),
    disk_write_bytes: Type.Integer(),
    running_seconds: Type.Integer({ description: 'container-seconds running (summed over containers)' }),
  },
  { description: 'One hour or one UTC day of usage' },
);
export type UsageRollup = Static<typeof UsageRollup>;
export const UsageRollupList = Type.Array(UsageRollup);
