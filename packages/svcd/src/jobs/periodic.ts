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
  private readonly running = new Set<Promise<void>>();

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

  /** One run under the lease; false when another process holds it. */
  async runOnce(job: JobDefinition): Promise<boolean> {
    const leaseMs = Math.max(job.everyMs, 60_000);
    if (!(await this.store.jobLocks.tryAcquire(job.name, this.holder, this.clock.now(), leaseMs))) return false;
    const run = job
      .run()
      .catch((err: unknown) => this.log.error({ err, job: job.name }, 'periodic job failed'))
      .finally(() => this.store.jobLocks.release(job.name, this.holder).catch(() => {}));
    this.running.add(run);
    await run;
    this.running.delete(run);
    return true;
  }

  async close(): Promise<void> {
    for (const h of this.handles) h.cancel();
    await Promise.all(this.running);
  }
}
