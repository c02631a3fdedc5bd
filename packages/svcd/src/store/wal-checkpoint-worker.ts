// The worker thread of wal-checkpointer.ts: a connection of its own to svc's SQLite file that,
// every `everyMs`, makes the write-ahead log durable and, once the log holds `checkpointPages`,
// copies it into the database file, off svcd's event loop.
import { closeSync, fdatasyncSync, fstatSync, openSync, readSync } from 'node:fs';
import { parentPort, workerData } from 'node:worker_threads';
import BetterSqlite3 from 'better-sqlite3';
import type { CheckpointWorkerData } from './wal-checkpointer.js';

const port = parentPort;
if (!port) throw new Error('wal-checkpoint-worker runs as a worker thread');
const { file, everyMs, checkpointPages } = workerData as CheckpointWorkerData;
const db = new BetterSqlite3(file);

/**
 * The log's descriptor, once SQLite has made the file (at the first write). Only the log: SQLite
 * locks its index (-shm) with the process's POSIX locks, which closing any descriptor of that
 * file drops (svcd's own connection's with them), and this thread's are closed when it ends.
 */
let logFd: number | null = null;
function openLog(): number | null {
  if (logFd !== null) return logFd;
  try {
    logFd = openSync(`${file}-wal`, 'r');
    return logFd;
  } catch (err) {
    // Not made yet; anything else (EMFILE, EACCES) fails the worker, and the main connection
    // checkpoints and syncs in its commits again (wal-checkpointer.ts).
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw err;
  }
}

// The log's format (https://www.sqlite.org/fileformat2.html#walformat), big-endian: a 32-byte
// header (page size at 8, the salts at 16 and 20), then frames of a 24-byte header (the salts
// again at 8 and 12) and a page. A frame belongs to the log as it is now when its salts are the
// header's: a restart changes them, so what is left of earlier rounds past the live frames does
// not match.
const LOG_HEADER_BYTES = 32;
const FRAME_HEADER_BYTES = 24;
const LOG_MAGIC = [0x377f0682, 0x377f0683];
const logHeader = Buffer.alloc(LOG_HEADER_BYTES);
const frameHeader = Buffer.alloc(FRAME_HEADER_BYTES);

/**
 * Frames in the log since it was last started afresh, found without SQLite's locks: a binary
 * search for the last frame that carries the header's salts (they are a prefix of the file). A
 * hint for when to checkpoint: a frame being written meanwhile only moves a pass.
 */
function logPages(): number {
  const fd = openLog();
  if (fd === null) return 0;
  if (readSync(fd, logHeader, 0, LOG_HEADER_BYTES, 0) < LOG_HEADER_BYTES || !LOG_MAGIC.includes(logHeader.readUInt32BE(0))) return 0;
  const pageSize = logHeader.readUInt32BE(8);
  const frameBytes = FRAME_HEADER_BYTES + pageSize;
  const live = (n: number) =>
    readSync(fd, frameHeader, 0, FRAME_HEADER_BYTES, LOG_HEADER_BYTES + (n - 1) * frameBytes) === FRAME_HEADER_BYTES &&
    frameHeader.readUInt32BE(8) === logHeader.readUInt32BE(16) &&
    frameHeader.readUInt32BE(12) === logHeader.readUInt32BE(20);
  let known = 0; // frames 1..known are live
  let beyond = Math.floor((fstatSync(fd).size - LOG_HEADER_BYTES) / frameBytes) + 1; // frame `beyond` is not
  while (beyond - known > 1) {
    const mid = Math.floor((known + beyond) / 2);
    if (live(mid)) known = mid;
    else beyond = mid;
  }
  return known;
}

function pass(): void {
  // Durability: with synchronous=NORMAL a commit is in the log but not yet on the disk; it is
  // after this (a power loss drops at most about a pass's commits, as with a checkpoint a pass).
  const log = openLog();
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
  if (logFd !== null) closeSync(logFd);
  db.close();
  port.close();
});
