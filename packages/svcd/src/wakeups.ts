// Pauses of a poll of the store, ended early when this process's own work on what the poll waits
// for ended: a hint only, the store says what is done (work another svcd carries out is seen at
// the pause's end). Real time: these pace a caller's wait on other processes, like a poll of the
// engine.

export class Wakeups {
  /** Pauses under way, by what they wait on: one piece of work ending wakes only those waiting on it. */
  private readonly waiting = new Map<string, Set<() => void>>();

  /** Resolves after `pauseMs`, or sooner on wake(key) or when `signal` ends (the waiting request went). */
  pause(pauseMs: number, key: string, signal?: AbortSignal): Promise<void> {
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        signal?.removeEventListener('abort', done);
        const waiting = this.waiting.get(key);
        waiting?.delete(done);
        if (waiting?.size === 0) this.waiting.delete(key);
        resolve();
      };
      const timer = setTimeout(done, signal?.aborted ? 0 : pauseMs);
      signal?.addEventListener('abort', done, { once: true });
      const waiting = this.waiting.get(key) ?? new Set<() => void>();
      waiting.add(done);
      this.waiting.set(key, waiting);
    });
  }

  /** Ends every pause waiting on `key` now. */
  wake(key: string): void {
    for (const done of [...(this.waiting.get(key) ?? [])]) done();
  }
}
