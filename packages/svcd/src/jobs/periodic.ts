import type { Logger } from 'pino';
import type { Clock, TimerHandle, Timers } from '../clock.js';
import type { Store } from '../store/index.js';

export interface JobDefinition {
  /** Unique per job; the lease in the store is taken under this name. */
  name: string;
  everyMs: number;
  run(): Promise<void>;
}

/**
 * Runs periodic jobs. Each run first takes the job's lease in the store, so two svcd processes
 * on one store never run the same job at once; the tick comes from the injected timers, and
 * close() stops them all.
 */
export class PeriodicJobs {
  private readonly handles: TimerHandle[] = [];
  private readonly running = new Set<Promise<boolean>>();
  private closed = false;

  constructor(
    private readonly store: Store,
    private readonly clock: Clock,
    private readonly timers: Timers,
    private readonly log: Logger,
    /** Identifies this process as a lease holder. */
    private readonly holder: string,
  ) {}

  schedule(job: JobDefinition): void {
    this.handles.push(this.timers.setInterval(() => void this.runOnce(job), job.everyMs));
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
      if (!(await this.store.jobLocks.tryAcquire(job.name, this.holder, this.clock.now(), leaseMs))) return false;
      try {
        await job.run();
      } finally {
        await this.store.jobLocks.release(job.name, this.holder);
      }
    } catch (err) {
      this.log.error({ err, job: job.name }, 'periodic job failed');
    }
    return true;
  }

  async close(): Promise<void> {
    this.closed = true;
    for (const h of this.handles) h.cancel();
    await Promise.all(this.running);
  }
}
