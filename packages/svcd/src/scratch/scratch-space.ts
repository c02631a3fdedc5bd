// Where builds and environment syncs clone repositories while they work: a directory of its own,
// outside the data directory (a tenant's clone filling a disk must not stop the store's writes),
// under one budget per svcd. Each clone reserves its maximum size up front (the clone is cut off
// at that size), so the clones running at once never exceed the budget, and none starts when the
// disk under the directory lacks room for it plus a reserve for everything else on that disk.
import { mkdirSync, mkdtempSync, statfsSync } from 'node:fs';
import { lstat, mkdir, rm } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { GIB } from '../disk/disk-quota.js';

export type ScratchKind = 'builds' | 'sync';

export class ScratchDirError extends Error {}

/** Free space the scratch disk keeps whatever the budget says. */
export const SCRATCH_DISK_RESERVE_BYTES = GIB;

export interface ScratchArea {
  readonly dir: string;
  /** Removes the directory and gives its reservation back; later calls do nothing. */
  release(): Promise<void>;
}

/** Bytes free for an unprivileged writer on the file system holding `dir`. */
export type FreeBytes = (dir: string) => number;

const freeOnDisk: FreeBytes = (dir) => {
  const s = statfsSync(dir);
  return s.bavail * s.bsize;
};

export class ScratchSpace {
  private reserved = 0;
  private closed = false;

  constructor(
    /** This svcd's own directory (`<--scratch-dir>/<instance>`): nobody else writes there. */
    readonly root: string,
    readonly budgetBytes: number,
    private readonly freeBytes: FreeBytes = freeOnDisk,
  ) {}

  /**
   * Clears what an earlier process of this instance left (its clones died with it). The scratch
   * directory itself must be svcd's alone: another local user able to write there could swap a
   * checked Dockerfile before the engine reads it.
   */
  async start(): Promise<void> {
    const parent = dirname(this.root);
    await mkdir(parent, { recursive: true, mode: 0o700 });
    const info = await lstat(parent);
    const uid = process.getuid?.();
    if (!info.isDirectory() || (uid !== undefined && info.uid !== uid) || (info.mode & 0o022) !== 0) {
      throw new ScratchDirError(`the scratch directory ${parent} must be a directory owned by svcd's user and writable by it alone`);
    }
    await rm(this.root, { recursive: true, force: true });
    await mkdir(this.root, { recursive: true, mode: 0o700 });
  }

  /**
   * Removes this svcd's folder as it stops, and takes no reservation after: kept, the empty
   * folder of an instance whose data directory is gone stayed for good (the tests' svcds, each
   * on a temporary data directory, left some 1,400 on this machine in a day). Not while a clone
   * still runs in it (an environment sync whose client went away runs on after the server
   * closed): the folder stays, and the instance's next start clears it. True when removed.
   */
  async close(): Promise<boolean> {
    this.closed = true;
    if (this.reserved > 0) return false;
    await rm(this.root, { recursive: true, force: true });
    return true;
  }

  /** A fresh directory with room for `bytes`, or null when the budget or the disk has none now (or svcd is stopping). */
  reserve(kind: ScratchKind, name: string, bytes: number): ScratchArea | null {
    if (this.closed || this.reserved + bytes > this.budgetBytes) return null;
    // Synchronous: three calls on svcd's own local directory, of microseconds each. Each one
    // asynchronous waited for the thread pool, then for the event loop, busy with the very upload
    // that queued the build: 3-5 ms of every build's way to the engine (bench/build). Nothing is
    // awaited between the count and the check, so concurrent reservations cannot overshoot.
    const parent = join(this.root, kind);
    mkdirSync(parent, { recursive: true, mode: 0o700 });
    // Every reservation counts as not yet written: concurrent clones do not all see the same room.
    if (this.freeBytes(parent) < this.reserved + bytes + SCRATCH_DISK_RESERVE_BYTES) return null;
    const dir = mkdtempSync(join(parent, `${name}-`));
    this.reserved += bytes;
    let released = false;
    return {
      dir,
      release: async () => {
        if (released) return;
        released = true;
        try {
          await rm(dir, { recursive: true, force: true });
        } finally {
          this.reserved -= bytes;
        }
      },
    };
  }

  /** Bytes reserved now (health, tests). */
  get inUse(): number {
    return this.reserved;
  }
}
