import type { TimerHandle } from '../clock.js';
import type { Platform } from '../platform.js';

export interface JobDefinition {
  /** Unique per job; the lease in the store is taken under this name. */
  name: string;
  everyMs: number;
  run(): Promise<void>;
}

/** What a PeriodicJobs is built from, by name. */
export type PeriodicJobsDeps = Pick<Platform, 'store' | 'clock' | 'timers' | 'log' | 'holder'>;

/**
 * Runs periodic jobs. Each run first takes the job's lease in the store, so two svcd processes
 * on one store never run the same job at once; the tick comes from the injected timers, and
 * close() stops them all.
 */
export class PeriodicJobs {
  private readonly handles: TimerHandle[] = [];
  private readonly running = new Set<Promise<boolean>>();
  private closed = false;

  constructor(private readonly deps: PeriodicJobsDeps) {}

  schedule(job: JobDefinition): void {
    this.handles.push(this.deps.timers.setInterval(() => void this.runOnce(job), job.everyMs));
  }

  /** One run under the lease; false when another process holds it (or this one is closing). */
  runOnce(job: JobDefinition): Promise<boolean> {
    if (this.closed) return Promise.resolve(false);
    // Tracked from the lease attempt on, so close() waits for store work that is under way.
    const run = this.leaseAndRun(job).finally(() => this.running.delete(run));
    this.running.add(run);
    return run;
  }

  private async leaseAndRun(job: JobDefinition): Promise<boolean> {
    const leaseMs = Math.max(job.everyMs, 60_000);
    try {
      if (!(await this.deps.store.jobLocks.tryAcquire(job.name, this.deps.holder, this.deps.clock.now(), leaseMs))) return false;
      try {
        await job.run();
      } finally {
        await this.deps.store.jobLocks.release(job.name, this.deps.holder);
      }
    } catch (err) {
      this.deps.log.error({ err, job: job.name }, 'periodic job failed');
    }
    return true;
  }

  async close(): Promise<void> {
    this.closed = true;
    for (const h of this.handles) h.cancel();
    await Promise.all(this.running);
  }
}
