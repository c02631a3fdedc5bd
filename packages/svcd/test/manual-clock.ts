import type { Clock, TimerHandle, Timers } from '../src/clock.js';

interface Pending {
  at: number;
  fn: () => void;
  every: number | null;
  cancelled: boolean;
}

/**
 * A clock and timers that move only when the test says so. advance() fires due timers in time
 * order, so the 30 s, 5 min and 1 h rules are tested in microseconds. An interval due several
 * times within one advance fires once, at its last due time, as a real interval does after the
 * event loop was busy: an hour's advance must not start 720 runs of a 5-second job at once.
 */
export class ManualClock implements Clock, Timers {
  private ms: number;
  private pending: Pending[] = [];

  constructor(start = Date.UTC(2026, 0, 1)) {
    this.ms = start;
  }

  now(): number {
    return this.ms;
  }

  setTimeout(fn: () => void, ms: number): TimerHandle {
    return this.add(fn, ms, null);
  }

  setInterval(fn: () => void, ms: number): TimerHandle {
    return this.add(fn, ms, ms);
  }

  advance(ms: number): void {
    const target = this.ms + ms;
    for (;;) {
      const due = this.pending.filter((p) => !p.cancelled && p.at <= target).sort((a, b) => a.at - b.at)[0];
      if (!due) break;
      if (due.every !== null) due.at += Math.floor((target - due.at) / due.every) * due.every;
      this.ms = due.at;
      if (due.every === null) due.cancelled = true;
      else due.at += due.every;
      due.fn();
    }
    this.pending = this.pending.filter((p) => !p.cancelled);
    this.ms = target;
  }

  /**
   * Lets time run on its own until the returned function is called: `stepMs` about every real
   * millisecond (a hundred times real time for 100), each step firing what fell due in order, with
   * the work those timers started running between steps. For tests whose code waits out backoffs
   * and readiness deadlines while doing real work (a store, sockets): the waits pass in
   * milliseconds and nothing has to know how many steps a rule takes. Time runs on while that
   * work waits for an answer (a PostgreSQL query, a socket): a rule that must see an answer within
   * a time (a lease's renewal) needs that time to be seconds of real time at the speed chosen.
   */
  run(stepMs: number): () => void {
    // Not unref'd: a case that waits on this clock alone (a readiness deadline) has nothing
    // else keeping its process up. Every caller stops it in an after hook.
    const ticker = setInterval(() => this.advance(stepMs), 1);
    return () => clearInterval(ticker);
  }

  private add(fn: () => void, ms: number, every: number | null): TimerHandle {
    const p: Pending = { at: this.ms + ms, fn, every, cancelled: false };
    this.pending.push(p);
    return { cancel: () => (p.cancelled = true) };
  }
}
