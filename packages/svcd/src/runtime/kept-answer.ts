// An engine's answer kept between questions while the engine says nothing has changed. The
// Docker Engine's /info answer takes 35-70 ms on these machines (it asks containerd and each
// runtime binary), and every build asked it for the runtime its RUN steps get (builds/runner.ts):
// in a directory's deploy it was the last thing the build waited for (bench/build). What it
// answers is a rule's ground (RUN steps under gVisor), so an answer is kept only when it was asked
// for under an open watch of the engine's changes, a watch that replays what the engine reported
// before it opened (ChangeWatch), so that no change falls between the two. A change forgets the
// answer, and so does the watch's end (the engine restarted, the connection closed). A watch can
// go silent without ending (a remote engine lost without a close, a forwarded socket): an answer
// is kept for a bounded time (maxAgeMs), then asked again under a new watch. A question while the
// watch opens is asked at once and its answer not kept; a watch that cannot be opened keeps
// nothing, and none is tried again for a minute: every question is asked meanwhile.
import type { Clock } from '../clock.js';

/**
 * Opens a watch of what may change an answer; resolves once it is open (changes reported before
 * it opened are reported to it too), rejects if it cannot be opened. `onChange` is called for each
 * change, `onEnd` once when the watch ends (`signal` ends it).
 */
export type ChangeWatch = (onChange: () => void, onEnd: () => void, signal: AbortSignal) => Promise<void>;

/** How long an answer is kept under a watch over the network (a remote engine's). */
export const KEPT_ANSWER_MAX_AGE_MS = 60_000;
/** How long under a watch over a unix socket: the engine's own as a rule, but it may be forwarded. */
export const KEPT_ANSWER_LOCAL_MAX_AGE_MS = 600_000;
/** How long no watch is tried after one could not be opened. */
export const WATCH_RETRY_MS = 60_000;

export interface KeptAnswerOptions {
  clock: Clock;
  /** Longest an answer is kept. */
  maxAgeMs: number;
}

interface Watch {
  isOpen: boolean;
  stop: AbortController;
}

export class KeptAnswer<T> {
  private kept: { answer: Promise<T>; atMs: number } | null = null;
  /** The watch open or being opened; null when none is (never opened, ended, failed, or closed). */
  private watch: Watch | null = null;
  private watchFailedAtMs: number | null = null;
  private closed = false;

  constructor(
    private readonly ask: () => Promise<T>,
    private readonly watchChanges: ChangeWatch,
    private readonly o: KeptAnswerOptions,
  ) {}

  get(): Promise<T> {
    if (this.kept) {
      if (lessThanAgo(this.o.clock, this.kept.atMs, this.o.maxAgeMs)) return this.kept.answer;
      // Asked again under a new watch: the old one may have gone silent.
      this.kept = null;
      this.endWatch();
    }
    // Not waited for: a question while the watch opens is asked at once and its answer not kept
    // (opening may take the engine calls' timeout). The next question finds it open.
    const watch = this.openWatch();
    const answer = this.ask();
    // Kept only when asked under the watch open now. Set before any change can be heard (they
    // come in later turns of the loop): a change while the engine answers forgets this answer too.
    if (watch?.isOpen && this.watch === watch) {
      this.kept = { answer, atMs: this.o.clock.now() };
      answer.catch(() => {
        if (this.kept?.answer === answer) this.kept = null;
      });
    }
    return answer;
  }

  /** Ends the watch; nothing is kept from now on. */
  close(): void {
    this.closed = true;
    this.kept = null;
    this.endWatch();
  }

  private endWatch(): void {
    this.watch?.stop.abort();
    this.watch = null;
  }

  private openWatch(): Watch | null {
    if (this.closed) return null;
    if (this.watch) return this.watch;
    if (this.watchFailedAtMs !== null && lessThanAgo(this.o.clock, this.watchFailedAtMs, WATCH_RETRY_MS)) return null;
    // Made current before the watch is asked for, so that a watch ending at once is seen ended.
    const watch: Watch = { isOpen: false, stop: new AbortController() };
    this.watch = watch;
    void this.watchChanges(
      () => {
        this.kept = null;
      },
      () => {
        if (this.watch === watch) this.watch = null;
        this.kept = null;
      },
      watch.stop.signal,
    ).then(
      () => {
        watch.isOpen = this.watch === watch;
      },
      () => {
        if (this.watch === watch) {
          this.watch = null;
          this.watchFailedAtMs = this.o.clock.now();
        }
      },
    );
    return watch;
  }
}

/** Whether `atMs` was less than `ms` ago; a clock set back (a time ahead of now) counts as long ago. */
function lessThanAgo(clock: Clock, atMs: number, ms: number): boolean {
  const age = clock.now() - atMs;
  return age >= 0 && age < ms;
}
