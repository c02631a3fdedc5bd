// svcd's store in a process of its own, run by store.test.ts under strace: it opens the store
// (its first commits sync the new log's header, as SQLite does), marks the start of what is
// watched by fsyncing a file named `watched-from-here` on its main thread, then makes 300
// commits over about 20 of the worker's passes, and exits without closing (closing checkpoints
// on the main thread, as it should). Prints its pid: the main thread's id in strace's output.
import { closeSync, fsyncSync, openSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { openStore } from '../src/store/index.js';

const [dataDir, passMsArg] = process.argv.slice(2) as [string, string];
const store = await openStore({ databaseUrl: null, dataDir, checkpointEveryMs: Number(passMsArg), checkpointPages: 100_000 });
await store.settings.getOrCreate('first', 'x');
await sleep(3 * Number(passMsArg));
const marker = openSync(join(dataDir, 'watched-from-here'), 'w');
fsyncSync(marker);
closeSync(marker);
for (let i = 0; i < 300; i++) {
  await store.settings.getOrCreate(`row-${i}`, 'x'.repeat(100));
  if (i % 15 === 0) await sleep(Number(passMsArg) + 10);
}
process.stdout.write(`${process.pid}\n`);
process.exit(0);
