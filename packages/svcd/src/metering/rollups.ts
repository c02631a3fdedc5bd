// Rollup arithmetic, free of I/O: samples into hourly rollups, hourly rollups into daily ones.
// A tenant's totals cover every container it runs (services, databases, its board,
// environments); service rows cover one service's containers.
import type { RollupPeriod, UsageRollupRow, UsageSampleRow } from '../store/index.js';

export const HOUR_S = 3600;
export const DAY_S = 86_400;

/** The start of the UTC hour or day that holds `t` (unix seconds). */
export function bucketStart(period: RollupPeriod, t: number): number {
  const size = period === 'hourly' ? HOUR_S : DAY_S;
  return Math.floor(t / size) * size;
}

/** Sums of one group of samples, before the memory figures are derived. */
interface Accumulator {
  cpuMicros: number;
  netRx: number;
  netTx: number;
  diskRead: number;
  diskWrite: number;
  seconds: number;
  /** Memory of the group at each sampling moment: the sum over its containers. */
  memoryAt: Map<number, number>;
}

function emptyAccumulator(): Accumulator {
  return { cpuMicros: 0, netRx: 0, netTx: 0, diskRead: 0, diskWrite: 0, seconds: 0, memoryAt: new Map() };
}

function add(acc: Accumulator, s: UsageSampleRow): void {
  acc.cpuMicros += s.cpu_micros_delta;
  acc.netRx += s.net_rx_delta;
  acc.netTx += s.net_tx_delta;
  acc.diskRead += s.disk_read_delta;
  acc.diskWrite += s.disk_write_delta;
  acc.seconds += s.seconds;
  acc.memoryAt.set(s.sampled_at, (acc.memoryAt.get(s.sampled_at) ?? 0) + s.memory_bytes);
}

function toRow(tenantId: string, serviceId: string, period: RollupPeriod, start: number, acc: Accumulator): UsageRollupRow {
  const memory = [...acc.memoryAt.values()];
  return {
    tenant_id: tenantId,
    service_id: serviceId,
    period,
    bucket_start: start,
    cpu_seconds: acc.cpuMicros / 1e6,
    memory_avg_bytes: memory.length === 0 ? 0 : Math.round(memory.reduce((a, b) => a + b, 0) / memory.length),
    memory_peak_bytes: memory.length === 0 ? 0 : Math.max(...memory),
    net_rx_bytes: acc.netRx,
    net_tx_bytes: acc.netTx,
    disk_read_bytes: acc.diskRead,
    disk_write_bytes: acc.diskWrite,
    running_seconds: acc.seconds,
    ticks: memory.length,
  };
}

/**
 * The hourly rollups of one hour from its samples: one row per tenant ('' service: all its
 * containers) and one per service. Memory average and peak are taken over the sampling moments
 * of the hour, with the group's containers summed at each moment.
 */
export function hourlyRollups(samples: UsageSampleRow[], hourStart: number): UsageRollupRow[] {
  const groups = new Map<string, { tenantId: string; serviceId: string; acc: Accumulator }>();
  const group = (tenantId: string, serviceId: string) => {
    const key = `${tenantId}/${serviceId}`;
    let g = groups.get(key);
    if (!g) groups.set(key, (g = { tenantId, serviceId, acc: emptyAccumulator() }));
    return g.acc;
  };
  for (const s of samples) {
    if (bucketStart('hourly', s.sampled_at) !== hourStart) continue;
    add(group(s.tenant_id, ''), s);
    if (s.kind === 'service') add(group(s.tenant_id, s.resource_id), s);
  }
  return [...groups.values()].map((g) => toRow(g.tenantId, g.serviceId, 'hourly', hourStart, g.acc));
}

/**
 * The daily rollups of one day from its hourly rollups: sums add up; the memory average is
 * weighted by each hour's sampling moments; the peak is the highest hour's.
 */
export function dailyRollups(hourly: UsageRollupRow[], dayStart: number): UsageRollupRow[] {
  const groups = new Map<string, UsageRollupRow[]>();
  for (const h of hourly) {
    if (h.period !== 'hourly' || bucketStart('daily', h.bucket_start) !== dayStart) continue;
    const key = `${h.tenant_id}/${h.service_id}`;
    groups.set(key, [...(groups.get(key) ?? []), h]);
  }
  return [...groups.values()].map((hours) => {
    const first = hours[0] as UsageRollupRow;
    const sum = (f: (h: UsageRollupRow) => number) => hours.reduce((a, h) => a + f(h), 0);
    const ticks = sum((h) => h.ticks);
    return {
      tenant_id: first.tenant_id,
      service_id: first.service_id,
      period: 'daily',
      bucket_start: dayStart,
      cpu_seconds: sum((h) => h.cpu_seconds),
      memory_avg_bytes: ticks === 0 ? 0 : Math.round(sum((h) => h.memory_avg_bytes * h.ticks) / ticks),
      memory_peak_bytes: Math.max(...hours.map((h) => h.memory_peak_bytes)),
      net_rx_bytes: sum((h) => h.net_rx_bytes),
      net_tx_bytes: sum((h) => h.net_tx_bytes),
      disk_read_bytes: sum((h) => h.disk_read_bytes),
      disk_write_bytes: sum((h) => h.disk_write_bytes),
      running_seconds: sum((h) => h.running_seconds),
      ticks,
    };
  });
}
