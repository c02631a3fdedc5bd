// SQLite's checkpoints, moved off svcd's event loop. better-sqlite3 is synchronous, and SQLite runs
// its automatic checkpoint inside the commit that takes the write-ahead log past 1000 pages: that
// commit copies the log into the database file and fsyncs it, and svcd answers nobody meanwhile.
// On a disk a tenant is filling, that fsync waits behind the tenant's writeback: bench/soak saw
// commits of 40-220 ms, and event-loop stalls of 280 ms with them, under a dd filler (none once
// the main connection stopped checkpointing). So the main connection never checkpoints
// (wal_autocheckpoint = 0) and a worker thread with a connection of its own does.
// Commits still append to the log; with synchronous=NORMAL they do not fsync, with one
// exception: the first commit after a checkpoint copied the whole log starts it afresh and
// fsyncs its header. So the worker checkpoints only once the log holds CHECKPOINT_LOG_PAGES (one
// such fsync on svcd's event loop per 32 MB of commits, instead of one a second), and makes the
// log durable every second itself (fdatasync), as the checkpoint a second did before.
//
// A worker that dies hands checkpoints back to the main connection (onFailure). One that hangs in
// an fsync is not watched for: the disk under the store is then hung, and a checkpoint on the main
// thread would hang with it.
import { Worker } from 'node:worker_threads';

export interface CheckpointWorkerData {
  file: string;
  everyMs: number;
  checkpointPages: number;
}

export const CHECKPOINT_EVERY_MS = 1000;
/**
 * The log's length at which a pass checkpoints: 32 MB of 4 KB pages, half of the store's
 * journal_size_limit, so that a log started afresh is not also cut back (a truncate, with its
 * discards, in a commit). At bench/soak's 200 pages a second, a checkpoint every 40 s.
 */
export const CHECKPOINT_LOG_PAGES = 8192;
/** Past this, stop() ends the worker mid-pass (safe: the log stays valid until it is started afresh). */
const STOP_WAIT_MS = 5000;

export class WalCheckpointer {
  private readonly worker: Worker;
  private failure: Error | null = null;
  private stopping = false;
  private readonly exited: Promise<void>;

  /**
   * `onFailure` is called once if the worker cannot go on (it could not open the file, a pass
   * threw, it exited unasked): the caller then turns the main connection's automatic checkpoints
   * back on, so that the log never grows without bound.
   */
  constructor(
    file: string,
    private readonly onFailure: (err: Error) => void,
    { everyMs = CHECKPOINT_EVERY_MS, checkpointPages = CHECKPOINT_LOG_PAGES }: { everyMs?: number; checkpointPages?: number } = {},
  ) {
    const data: CheckpointWorkerData = { file, everyMs, checkpointPages };
    const worker = new Worker(new URL('./wal-checkpoint-worker.js', import.meta.url), { workerData: data });
    this.worker = worker;
    // svcd's shutdown stops it; a process that ends without closing the store does not wait on it.
    worker.unref();
    worker.on('error', (err: Error) => this.fail(err));
    this.exited = new Promise((resolve) =>
      worker.once('exit', (code) => {
        if (!this.stopping) this.fail(new Error(`the checkpoint worker exited with code ${code}`));
        resolve();
      }),
    );
  }

  private fail(err: Error): void {
    if (this.failure) return;
    this.failure = err;
    this.onFailure(err);
  }

  /** Why the worker stopped checkpointing (null while it runs). */
  status(): { failure: Error | null } {
    return { failure: this.failure };
  }

  /** Ends the worker after its current pass and closes its connection; ends it outright past STOP_WAIT_MS. */
  async stop(): Promise<void> {
    this.stopping = true;
    this.worker.postMessage('stop');
    // Real timers: this waits on another thread's fsync, not on svcd's clock.
    const deadline = setTimeout(() => void this.worker.terminate(), STOP_WAIT_MS);
    try {
      await this.exited;
    } finally {
      clearTimeout(deadline);
    }
  }
}
