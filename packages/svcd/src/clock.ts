// Time is injected everywhere (never Date.now() or setInterval in a module), so that tests can
// move it forward and check the 30-second, 5-minute and 1-hour rules without sleeping.

export interface Clock {
  /** Milliseconds since the epoch. */
  now(): number;
}

export interface TimerHandle {
  cancel(): void;
}

export interface Timers {
  setTimeout(fn: () => void, ms: number): TimerHandle;
  setInterval(fn: () => void, ms: number): TimerHandle;
}

export const systemClock: Clock = { now: () => Date.now() };

export const systemTimers: Timers = {
  setTimeout(fn, ms) {
    const t = setTimeout(fn, ms);
    return { cancel: () => clearTimeout(t) };
  },
  setInterval(fn, ms) {
    const t = setInterval(fn, ms);
    // Background sweeps must never keep the process alive on their own.
    t.unref();
    return { cancel: () => clearInterval(t) };
  },
};

export function unixSeconds(clock: Clock): number {
  return Math.floor(clock.now() / 1000);
}

/** Resolves after `ms` on `timers`, or at once when the signal aborts (the caller then throws its reason). */
export function pause(timers: Timers, ms: number, signal: AbortSignal): Promise<void> {
  return new Promise<void>((resolve) => {
    if (signal.aborted) {
      resolve();
      return;
    }
    const done = () => {
      timer.cancel();
      signal.removeEventListener('abort', done);
      resolve();
    };
    const timer = timers.setTimeout(done, ms);
    signal.addEventListener('abort', done, { once: true });
  });
}
