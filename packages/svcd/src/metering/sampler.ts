// The usage sampler: one reading of every running tenant container per pass, through the
// Engine's one-shot stats (a few at a time), written to the metering store as counter deltas.
import type { MeteringStore, UsageSampleRow } from '../store/index.js';
import { LABELS, WARM_POOL_TENANT, type WorkloadInfo, type WorkloadStats } from '../runtime/index.js';
import type { Platform } from '../platform.js';

export interface SamplerOptions {
  intervalMs: number;
  /** Stats calls in flight at once: each costs the engine a cgroup read, gVisor more. */
  concurrency: number;
}

/** Whose usage a container is. */
export interface MeteredWorkload {
  containerId: string;
  tenantId: string;
  kind: string;
  resourceId: string;
}

/** What the last pass saw, for the operator's metrics. */
export interface SamplerStatus {
  /** When the last completed pass started (ms), null before the first. */
  lastPassAt: number | null;
  /** svc's containers on the engine by state, as of the last pass. */
  containersByState: Record<string, number>;
  /** Readings that failed in the last pass (the container went away, the engine timed out). */
  lastPassFailures: number;
}

function delta(current: number, previous: number | undefined): number {
  // A counter that went down restarted with its container: all of it is new.
  if (previous === undefined || current < previous) return current;
  return current - previous;
}

/**
 * The sample row of one reading. `previous` is the container's last sample, if any: the deltas
 * are taken against it, and the running seconds are the time since it, unless that gap is far
 * longer than the interval (svcd was down: the container may not have run all along), in which
 * case one interval is counted. A container's first reading counts what it used since it
 * started, and no running time.
 */
export function sampleRow(w: MeteredWorkload, s: WorkloadStats, sampledAt: number, previous: UsageSampleRow | undefined, intervalS: number): UsageSampleRow {
  const gap = previous ? sampledAt - previous.sampled_at : 0;
  return {
    container_id: w.containerId,
    sampled_at: sampledAt,
    tenant_id: w.tenantId,
    kind: w.kind,
    resource_id: w.resourceId,
    seconds: previous ? (gap <= 3 * intervalS ? gap : intervalS) : 0,
    cpu_micros: s.cpuMicros,
    net_rx_bytes: s.netRxBytes,
    net_tx_bytes: s.netTxBytes,
    disk_read_bytes: s.blockReadBytes,
    disk_write_bytes: s.blockWriteBytes,
    cpu_micros_delta: delta(s.cpuMicros, previous?.cpu_micros),
    net_rx_delta: delta(s.netRxBytes, previous?.net_rx_bytes),
    net_tx_delta: delta(s.netTxBytes, previous?.net_tx_bytes),
    disk_read_delta: delta(s.blockReadBytes, previous?.disk_read_bytes),
    disk_write_delta: delta(s.blockWriteBytes, previous?.disk_write_bytes),
    memory_bytes: s.memoryBytes,
  };
}

/**
 * A single copy's first reading, where its workload was read under the workload's own ref: svcd
 * before copies were read on their own (a swarm's service id, then its one task), whose
 * readings already counted what the task used. Taken as the copy's previous reading, so that
 * the upgrade counts nothing twice, however long svcd was down. A task that replaced it since
 * starts its counters at zero, below that reading: counted whole, as a restarted counter is
 * (sampleRow); its running time from there is one interval, as after any long gap.
 */
function carriedOver(item: { id: string; workloadId: string; single: boolean }, last: ReadonlyMap<string, UsageSampleRow>): UsageSampleRow | undefined {
  if (!item.single || item.workloadId === item.id) return undefined;
  return last.get(item.workloadId);
}

/** What a Sampler is built from, by name. */
export interface SamplerDeps extends SamplerOptions, Pick<Platform, 'runtime' | 'store' | 'clock' | 'log'> {
  metering: MeteringStore;
}

export class Sampler {
  private state: SamplerStatus = { lastPassAt: null, containersByState: {}, lastPassFailures: 0 };

  constructor(private readonly deps: SamplerDeps) {}

  status(): SamplerStatus {
    return this.state;
  }

  /**
   * One pass over the engine's svc containers; returns how many readings were written.
   * `beforeWrite` throws to write none (the job's lease went to another svcd, whose pass counts them).
   */
  async pass(beforeWrite: () => Promise<void> = () => Promise.resolve()): Promise<number> {
    const startedAt = this.deps.clock.now();
    const sampledAt = Math.floor(startedAt / 1000);
    const all = await this.deps.runtime.list();
    const byState: Record<string, number> = {};
    for (const w of all) byState[w.state] = (byState[w.state] ?? 0) + 1;

    // Each copy of a workload on its own (a swarm's replicas): its counters start with it, and
    // its running time is its own.
    const running = all
      .filter((w) => w.state === 'running')
      .flatMap((w) => {
        const copies = w.copies ?? [w.id];
        return copies.map((ref) => ({ ...w, id: ref, workloadId: w.id, single: copies.length === 1 }));
      });
    // The last readings as the store has them, whichever svcd's pass wrote them (passes go from
    // one svcd to another with the job's lease: a reading kept in memory would be stale once
    // another's pass came between, and the time since counted twice). Read together, among the
    // last few intervals' (older ones one by one). A workload's own ref only where its one copy
    // may go on from it (carriedOver).
    const refs = running.flatMap((w) => (w.single && w.workloadId !== w.id ? [w.id, w.workloadId] : [w.id]));
    const last = await this.deps.metering.lastSamples([...new Set(refs)], sampledAt - 3 * Math.ceil(this.deps.intervalMs / 1000));
    const rows: UsageSampleRow[] = [];
    let failures = 0;
    await eachLimited(running, this.deps.concurrency, async (info) => {
      try {
        const w = await this.meteredWorkload(info);
        if (!w) return;
        const stats = await this.deps.runtime.stats(w.containerId);
        if (!stats) return; // gone since the listing
        const previous = last.get(w.containerId) ?? carriedOver(info, last);
        // A reading of this second or later is there already (the clock stepped back, or another
        // svcd's clock runs ahead): this one waits for the next pass, which counts from it.
        if (previous && previous.sampled_at >= sampledAt) return;
        rows.push(sampleRow(w, stats, sampledAt, previous, this.deps.intervalMs / 1000));
      } catch (err) {
        failures += 1;
        this.deps.log.warn({ err, container: info.id }, 'usage reading failed');
      }
    });
    await beforeWrite();
    await this.deps.metering.insertSamples(rows);
    this.state = { lastPassAt: startedAt, containersByState: byState, lastPassFailures: failures };
    return rows.length;
  }

  /** The tenant and resource of a container; warm-pool containers belong to the environment that took them. */
  private async meteredWorkload(info: WorkloadInfo): Promise<MeteredWorkload | null> {
    const tenantId = info.labels[LABELS.tenant];
    const kind = info.labels[LABELS.kind];
    const resourceId = info.labels[LABELS.resource];
    if (!tenantId || !kind || !resourceId) return null;
    if (tenantId !== WARM_POOL_TENANT) return { containerId: info.id, tenantId, kind, resourceId };
    // Its labels were set before any tenant had it; the store knows who has it now.
    const env = await this.deps.store.environments.findByContainer(info.id);
    return env ? { containerId: info.id, tenantId: env.tenant_id, kind: 'environment', resourceId: env.id } : null;
  }
}

/** Runs `fn` over `items` with at most `limit` calls in flight. */
async function eachLimited<T>(items: T[], limit: number, fn: (item: T) => Promise<void>): Promise<void> {
  let next = 0;
  const worker = async () => {
    while (next < items.length) await fn(items[next++] as T);
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
}
