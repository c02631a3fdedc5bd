// An engine's answer kept between questions for as long as the engine says nothing has changed.
// The Docker Engine's /info answer takes 35-70 ms on these machines (it asks containerd and each
// runtime binary), and every build asked it for the runtime its RUN steps get (builds/runner.ts):
// in a directory's deploy it was the last thing the build waited for (bench/build). Not a cache
// with an age, since what it answers is a rule's ground (RUN steps under gVisor): the answer is
// kept only while a watch of the engine's changes is open, opened before the answer is asked for
// so that no change can fall between the two. A change forgets it, and so does the watch's end
// (the engine restarted, the connection dropped); the next question asks the engine again and
// opens a new watch. A watch that cannot be opened keeps nothing: every question is asked.

/**
 * Opens a watch of what may change an answer; resolves once it is open, rejects if it cannot be.
 * `onChange` is called for each change, `onEnd` once when the watch ends (the signal ends it too).
 */
export type ChangeWatch = (onChange: () => void, onEnd: () => void, signal: AbortSignal) => Promise<void>;

export class KeptAnswer<T> {
  private kept: Promise<T> | null = null;
  /** The open watch (true), or the one being opened; null when none is (never opened, ended, or failed). */
  private watch: Promise<boolean> | null = null;
  private readonly closing = new AbortController();

  constructor(
    private readonly ask: () => Promise<T>,
    private readonly watchChanges: ChangeWatch,
  ) {}

  async get(): Promise<T> {
    if (this.kept) return this.kept;
    const watching = await this.openWatch();
    const answer = this.ask();
    if (watching && this.watch !== null) {
      // Set before any change can be heard (they come in later turns of the loop): a change
      // while the engine answers forgets this answer too.
      this.kept = answer;
      answer.catch(() => {
        if (this.kept === answer) this.kept = null;
      });
    }
    return answer;
  }

  /** Ends the watch; nothing is kept from now on. */
  close(): void {
    this.closing.abort();
    this.kept = null;
  }

  private openWatch(): Promise<boolean> {
    if (this.closing.signal.aborted) return Promise.resolve(false);
    if (this.watch) return this.watch;
    const opening: Promise<boolean> = this.watchChanges(
      () => {
        this.kept = null;
      },
      () => {
        if (this.watch === opening) this.watch = null;
        this.kept = null;
      },
      this.closing.signal,
    ).then(
      () => true,
      () => {
        if (this.watch === opening) this.watch = null;
        return false;
      },
    );
    this.watch = opening;
    return opening;
  }
}
