import type { TimerHandle } from '../clock.js';
import type { Platform } from '../platform.js';

/** A run's hold on its job's lease, renewed while the run lasts. */
export interface JobLease {
  /** Aborts when the run lost the lease (a renewal found another svcd holding it). */
  readonly signal: AbortSignal;
  /**
   * Throws unless the run still holds the lease, as the store says now. A job calls it right
   * before a write that another svcd's run of the same job must not repeat (a sample counted
   * twice): a run whose lease lapsed cannot write.
   */
  assertHeld(): Promise<void>;
}

export interface JobDefinition {
  /** Unique per job; the lease in the store is taken under this name. */
  name: string;
  everyMs: number;
  run(lease: JobLease): Promise<void>;
}

/** The run's lease went to another svcd: what it still had to write is not written. */
export class JobLeaseLostError extends Error {}

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
  /**
   * The jobs this process is running now. A tick (or a run asked for) while the last run goes on
   * (a run may outlast its interval: domain checks wait on tenants' name servers) does not start a
   * second one beside it: the lease is this process's own, so the store would let it start, and
   * the first one's end would free the lease under the second. It is folded into one run right
   * after (`queued`, whose outcome every such caller gets), so that nothing asked for meanwhile
   * waits a whole interval.
   */
  private readonly active = new Set<string>();
  private readonly queued = new Map<string, { outcome: Promise<boolean>; start: () => void }>();
  private closed = false;

  constructor(private readonly deps: PeriodicJobsDeps) {}

  schedule(job: JobDefinition): void {
    this.handles.push(this.deps.timers.setInterval(() => void this.runOnce(job), job.everyMs));
  }

  /**
   * One run under the lease; false when another process holds it, or this one is closing. While
   * this process runs the job already, the run that follows that one (its outcome).
   */
  runOnce(job: JobDefinition): Promise<boolean> {
    if (this.closed) return Promise.resolve(false);
    if (this.active.has(job.name)) {
      let next = this.queued.get(job.name);
      if (!next) {
        let start!: () => void;
        const outcome = new Promise<void>((resolve) => (start = resolve)).then(() => this.runOnce(job));
        next = { outcome, start };
        this.queued.set(job.name, next);
      }
      return next.outcome;
    }
    this.active.add(job.name);
    // Tracked from the lease attempt on, so close() waits for store work that is under way.
    const run = this.leaseAndRun(job).finally(() => {
      this.running.delete(run);
      this.active.delete(job.name);
      const next = this.queued.get(job.name);
      this.queued.delete(job.name);
      next?.start();
    });
    this.running.add(run);
    return run;
  }

  private async leaseAndRun(job: JobDefinition): Promise<boolean> {
    const leaseMs = Math.max(job.everyMs, 60_000);
    const { jobLocks } = this.deps.store;
    try {
      if (!(await jobLocks.tryAcquire(job.name, this.deps.holder, this.deps.clock.now(), leaseMs))) return false;
      const controller = new AbortController();
      const lost = () => new JobLeaseLostError(`the lease of job ${job.name} went to another svcd`);
      // Renewed three times per lease: a run longer than the lease keeps it, and one whose svcd
      // stalls past it loses it to another svcd's run and stops writing.
      const renewal = this.deps.timers.setInterval(() => {
        if (controller.signal.aborted) return;
        void jobLocks.renew(job.name, this.deps.holder, this.deps.clock.now(), leaseMs).then(
          (held) => held || controller.abort(lost()),
          (err: unknown) => this.deps.log.warn({ err, job: job.name }, 'job lease renewal failed'),
        );
      }, leaseMs / 3);
      const lease: JobLease = {
        signal: controller.signal,
        assertHeld: async () => {
          if (controller.signal.aborted || !(await jobLocks.holds(job.name, this.deps.holder, this.deps.clock.now()))) {
            controller.abort(lost());
            throw lost();
          }
        },
      };
      try {
        await job.run(lease);
      } finally {
        renewal.cancel();
        await jobLocks.release(job.name, this.deps.holder);
      }
    } catch (err) {
      if (err instanceof JobLeaseLostError) this.deps.log.warn({ job: job.name }, err.message);
      else this.deps.log.error({ err, job: job.name }, 'periodic job failed');
    }
    return true;
  }

  async close(): Promise<void> {
    this.closed = true;
    for (const h of this.handles) h.cancel();
    await Promise.all(this.running);
  }
}
