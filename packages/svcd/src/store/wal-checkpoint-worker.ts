// The worker thread of wal-checkpointer.ts: a connection of its own to svc's SQLite file that,
// every `everyMs`, makes the write-ahead log durable and, once the log holds `checkpointPages`,
// copies it into the database file, off svcd's event loop.
import { closeSync, fdatasyncSync, openSync, readSync } from 'node:fs';
import { endianness } from 'node:os';
import { parentPort, workerData } from 'node:worker_threads';
import BetterSqlite3 from 'better-sqlite3';
import type { CheckpointWorkerData } from './wal-checkpointer.js';

const port = parentPort;
if (!port) throw new Error('wal-checkpoint-worker runs as a worker thread');
const { file, everyMs, checkpointPages } = workerData as CheckpointWorkerData;
const db = new BetterSqlite3(file);

/** Open descriptors of the log and its index, once SQLite has made them (at the first write). */
const fds = new Map<string, number>();
function fdOf(path: string): number | null {
  const known = fds.get(path);
  if (known !== undefined) return known;
  try {
    const fd = openSync(path, 'r');
    fds.set(path, fd);
    return fd;
  } catch {
    return null;
  }
}

// The wal-index header (https://www.sqlite.org/walformat.html, "The WAL-Index Header"), in the
// host's byte order: iVersion at 0 (3007000), isInit at 12, mxFrame (the frames in the log) at 16.
const WAL_INDEX_VERSION = 3007000;
const header = Buffer.alloc(20);
const readU32 = (at: number) => (endianness() === 'LE' ? header.readUInt32LE(at) : header.readUInt32BE(at));

/**
 * Pages in the log since it was last started afresh, read from the wal-index without taking
 * SQLite's locks: a hint for when to checkpoint, so a torn read only moves a pass. A header that
 * cannot be read or is not the documented format answers Infinity: a checkpoint every pass.
 */
function logPages(): number {
  const fd = fdOf(`${file}-shm`);
  if (fd === null) return 0;
  if (readSync(fd, header, 0, header.length, 0) < header.length) return 0;
  if (readU32(0) !== WAL_INDEX_VERSION || header[12] !== 1) return Number.POSITIVE_INFINITY;
  return readU32(16);
}

function pass(): void {
  // Durability: with synchronous=NORMAL a commit is in the log but not yet on the disk; it is
  // after this (a power loss drops at most about a pass's commits, as with a checkpoint a pass).
  const log = fdOf(`${file}-wal`);
  if (log !== null) fdatasyncSync(log);
  // Rarely, not every pass: once a pass has copied the whole log, svcd's next commit starts the
  // log afresh, and SQLite fsyncs the new log header inside that commit, on svcd's event loop
  // (wal.c: "Sync the header ... an out-of-order write following a WAL restart could result in
  // database corruption"). On a disk a tenant is filling that fsync took up to 600 ms in
  // bench/soak, and a pass every second made it once a second.
  // PASSIVE: copies what no reader still needs and never waits on svcd's readers or writers; what
  // it leaves is taken on a later pass.
  if (logPages() >= checkpointPages) db.pragma('wal_checkpoint(PASSIVE)');
}

// This thread's own timer: the main thread's injected clock cannot reach into it, and it only
// paces the passes.
const timer = setInterval(pass, everyMs);
port.on('message', (message: unknown) => {
  if (message !== 'stop') return;
  clearInterval(timer);
  for (const fd of fds.values()) closeSync(fd);
  db.close();
  port.close();
});
