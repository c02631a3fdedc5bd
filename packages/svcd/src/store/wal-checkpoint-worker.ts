// The worker thread of wal-checkpointer.ts: a connection of its own to svc's SQLite file that
// copies the write-ahead log into the database every `everyMs`, off svcd's event loop.
import { parentPort, workerData } from 'node:worker_threads';
import BetterSqlite3 from 'better-sqlite3';
import type { CheckpointWorkerData } from './wal-checkpointer.js';

const port = parentPort;
if (!port) throw new Error('wal-checkpoint-worker runs as a worker thread');
const { file, everyMs } = workerData as CheckpointWorkerData;
const db = new BetterSqlite3(file);
// PASSIVE: copies what no reader still needs and never waits on svcd's readers or writers; what
// it leaves is taken on a later pass. A writer starts the log afresh once a pass has copied it all.
// This thread's own timer: the main thread's injected clock cannot reach into it, and it only
// paces the passes.
const timer = setInterval(() => db.pragma('wal_checkpoint(PASSIVE)'), everyMs);
port.on('message', (message: unknown) => {
  if (message !== 'stop') return;
  clearInterval(timer);
  db.close();
  port.close();
});
