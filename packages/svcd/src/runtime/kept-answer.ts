// An engine's answer kept between questions while the engine says nothing has changed, and for a
// minute at most. The Docker Engine's /info answer takes 35-70 ms on these machines (it asks
// containerd and each runtime binary), and every build asked it for the runtime its RUN steps get
// (builds/runner.ts): in a directory's deploy it was the last thing the build waited for
// (bench/build). What it answers is a rule's ground (RUN steps under gVisor), so the answer is
// kept only while a watch of the engine's changes is open: opened before the answer is asked for,
// and replaying what the engine reported just before it opened (ChangeWatch), so that no change
// falls between the two. A change forgets the answer, and so does the watch's end (the engine
// restarted, the connection closed). The age bounds what a watch that went silent without ending
// could keep (a remote engine's connection lost without a close): the next question after it asks
// the engine again. A watch that cannot be opened keeps nothing: every question is asked.
import type { Clock } from '../clock.js';

/**
 * Opens a watch of what may change an answer; resolves once it is open (changes reported shortly
 * before it opened are reported to it too), rejects if it cannot be opened. `onChange` is called
 * for each change, `onEnd` once when the watch ends (the signal ends it too).
 */
export type ChangeWatch = (onChange: () => void, onEnd: () => void, signal: AbortSignal) => Promise<void>;

/** The longest an answer is kept, watch or not. */
export const KEPT_ANSWER_MAX_AGE_MS = 60_000;

interface Watch {
  /** True once open; false when it could not be opened. */
  open: Promise<boolean>;
}

export class KeptAnswer<T> {
  private kept: { answer: Promise<T>; atMs: number } | null = null;
  /** The watch open or being opened; null when none is (never opened, ended, or failed). */
  private watch: Watch | null = null;
  private readonly closing = new AbortController();

  constructor(
    private readonly ask: () => Promise<T>,
    private readonly watchChanges: ChangeWatch,
    private readonly clock: Clock,
    private readonly maxAgeMs = KEPT_ANSWER_MAX_AGE_MS,
  ) {}

  async get(): Promise<T> {
    if (this.kept && this.clock.now() - this.kept.atMs < this.maxAgeMs) return this.kept.answer;
    this.kept = null;
    const watch = this.openWatch();
    const watching = watch !== null && (await watch.open);
    const answer = this.ask();
    // Kept only under the very watch that was open when it was asked for. Set before any change
    // can be heard (they come in later turns of the loop): a change while the engine answers
    // forgets this answer too.
    if (watching && this.watch === watch && !this.closing.signal.aborted) {
      this.kept = { answer, atMs: this.clock.now() };
      answer.catch(() => {
        if (this.kept?.answer === answer) this.kept = null;
      });
    }
    return answer;
  }

  /** Ends the watch; nothing is kept from now on. */
  close(): void {
    this.closing.abort();
    this.kept = null;
    this.watch = null;
  }

  private openWatch(): Watch | null {
    if (this.closing.signal.aborted) return null;
    if (this.watch) return this.watch;
    // Made current before the watch is asked for, so that a watch ending at once is seen ended.
    const watch: Watch = { open: Promise.resolve(false) };
    this.watch = watch;
    watch.open = this.watchChanges(
      () => {
        this.kept = null;
      },
      () => {
        if (this.watch === watch) this.watch = null;
        this.kept = null;
      },
      this.closing.signal,
    ).then(
      () => true,
      () => {
        if (this.watch === watch) this.watch = null;
        return false;
      },
    );
    return watch;
  }
}
