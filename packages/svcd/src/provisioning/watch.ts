// A driver's apply knows nothing of svc's records; the domain watches them beside it. While an
// apply runs, the record is re-read now and then, and what the check throws (deleted, cancelled
// through another svcd, suspended) aborts the apply, which then removes what it started.
import type { Timers } from '../clock.js';

export interface RecordWatch {
  /** Aborts with the parent's reason, or with what the check threw. */
  signal: AbortSignal;
  /** Ends the watch (the apply is over). */
  stop(): void;
}

export function watchRecord(parent: AbortSignal | null, timers: Timers, everyMs: number, check: () => Promise<void>): RecordWatch {
  const controller = new AbortController();
  const onParent = () => controller.abort(parent?.reason);
  if (parent?.aborted) onParent();
  else parent?.addEventListener('abort', onParent, { once: true });
  let checking = false;
  const reads = timers.setInterval(() => {
    if (checking || controller.signal.aborted) return;
    checking = true;
    check()
      .catch((err: unknown) => controller.abort(err))
      .finally(() => (checking = false));
  }, everyMs);
  return {
    signal: controller.signal,
    stop: () => {
      reads.cancel();
      parent?.removeEventListener('abort', onParent);
    },
  };
}
