import { existsSync, linkSync, mkdirSync, readFileSync, renameSync, unlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { hexId } from './ids.js';

export class InstanceIdError extends Error {}

/**
 * This svcd's identity across restarts: kept in its data dir. Leases are held as
 * `<instance>/<boot>`, so a restarted svcd knows which leases its own dead predecessor held.
 */
export function loadInstanceId(dataDir: string): string {
  const file = join(dataDir, 'instance-id');
  if (!existsSync(file)) {
    mkdirSync(dataDir, { recursive: true });
    writeFileSync(file, hexId(8), { flag: 'wx' });
  }
  const id = readFileSync(file, 'utf8').trim();
  // It names a folder svcd clears and removes (<--scratch-dir>/<instance>): anything but what it
  // writes (a `..`, a path) could name another one.
  if (!INSTANCE_ID.test(id)) {
    throw new InstanceIdError(`${file} holds no instance id (16 hex digits, as svcd writes it): ${JSON.stringify(id.slice(0, 40))}; remove the file and svcd writes a new one`);
  }
  return id;
}

const INSTANCE_ID = /^[0-9a-f]{16}$/;

export class DataDirLockedError extends Error {}

/** Who holds a data directory: a process, told from a later one of the same pid by its start. */
interface LockHolder {
  pid: number;
  /** This boot's id: a pid file from before a reboot names no process that runs. */
  boot: string;
  /** The process's start (/proc/<pid>/stat), or null when it could not be read. */
  started: string | null;
}

/**
 * One svcd per data directory, checked at start (main.ts). The directory's instance id is the
 * svcd's: a second svcd on it would take the first's leases as its own dead predecessor's, clear
 * its scratch folder and remove its egress allowances. A pid file (`svcd.pid`), as PostgreSQL's
 * postmaster.pid: Node has no flock, and a file a killed svcd left is told from a live svcd's by
 * its process (the same pid, started at the same moment, in this boot, not a zombie). Linux's
 * /proc, one pid namespace: two containers sharing the directory are not told apart. Returns the
 * release, which removes the file when it is still this process's. Throws DataDirLockedError when
 * another svcd holds the directory.
 */
export function lockDataDir(dataDir: string): () => void {
  mkdirSync(dataDir, { recursive: true });
  const file = join(dataDir, 'svcd.pid');
  const me = `${JSON.stringify({ pid: process.pid, boot: bootId(), started: processStart(process.pid) } satisfies LockHolder)}\n`;
  // Written whole under a name of its own, then linked in place: the pid file is never seen
  // empty or half written (a start reading it then would take it for a stale one).
  const mine = `${file}.${String(process.pid)}`;
  writeFileSync(mine, me);
  try {
    // Twice at most: a stale file is moved aside once; found again, another svcd took it meanwhile.
    for (let attempt = 0; attempt < 2; attempt++) {
      try {
        linkSync(mine, file);
        return () => {
          try {
            if (readFileSync(file, 'utf8') === me) unlinkSync(file);
          } catch {
            // gone already
          }
        };
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
      }
      const seen = readOrNull(file);
      if (seen === null) continue; // removed meanwhile
      const holder = holderOf(seen);
      if (holder !== null && runs(holder)) {
        throw new DataDirLockedError(`another svcd (pid ${String(holder.pid)}) runs on the data directory ${dataDir}: one svcd per data directory (its instance-id is that svcd's); give this one a --data-dir of its own`);
      }
      // Stale: moved aside, not removed blindly. Two starts may both judge it stale: when what
      // was moved is not the file judged, another start had put its own there, which goes back.
      const aside = `${file}.stale-${String(process.pid)}`;
      try {
        renameSync(file, aside);
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code === 'ENOENT') continue;
        throw err;
      }
      const moved = readOrNull(aside);
      if (moved !== seen) {
        try {
          linkSync(aside, file);
        } catch {
          // the slot was taken again: that start holds it
        }
        unlinkSync(aside);
        break;
      }
      unlinkSync(aside);
    }
  } finally {
    unlinkSync(mine);
  }
  throw new DataDirLockedError(`another svcd is starting on the data directory ${dataDir} (${file}): one svcd per data directory`);
}

/** A file's text, or null when it is not there. */
function readOrNull(file: string): string | null {
  try {
    return readFileSync(file, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw err;
  }
}

/** The pid file's holder, or null for a text svcd did not write (taken as stale). */
function holderOf(text: string): LockHolder | null {
  try {
    const h = JSON.parse(text) as Partial<LockHolder>;
    if (typeof h.pid !== 'number' || typeof h.boot !== 'string' || (h.started !== null && typeof h.started !== 'string')) return null;
    return { pid: h.pid, boot: h.boot, started: h.started ?? null };
  } catch {
    return null;
  }
}

/** Whether the holder's process still runs: this boot, its pid started at the same moment, not a zombie. */
function runs(h: LockHolder): boolean {
  if (h.boot !== bootId()) return false;
  // This process's own pid too: in a container svcd is PID 1 at every start, and only the start
  // time tells a file of its killed predecessor from its own.
  const started = processStart(h.pid);
  return started !== null && (h.started === null || started === h.started);
}

/** This boot's id (Linux); '' where it cannot be read. */
function bootId(): string {
  try {
    return readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim();
  } catch {
    return '';
  }
}

/** A process's start in clock ticks since boot (/proc/<pid>/stat, field 22), or null when it is gone or a zombie. */
function processStart(pid: number): string | null {
  try {
    const stat = readFileSync(`/proc/${String(pid)}/stat`, 'utf8');
    // After the command's name, which is in parentheses and may hold spaces: field 3 on.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return fields[0] === 'Z' ? null : (fields[19] ?? null);
  } catch {
    return null;
  }
}
