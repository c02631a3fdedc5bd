// Every bench in its smoke mode (--smoke: one short round through the same code paths as the
// full run, bench/smoke.ts), so that none rots between the runs that measure: each on the built
// bin/svcd and the real engine, one after the other (bench-process.ts). bench/soak has its own
// file (bench-soak.test.ts). A smoke run took here, on 2 cores beside another test run: api 20 s,
// deploy 11 s, proxy 18 s, build 6 s, db 40 s, env 21 s; the timeouts leave five times that or
// more, for a busy CI machine.
import { test } from 'node:test';
import { runSmokeBench } from './bench-process.js';

const BENCHES: Array<{ bench: string; timeout: number }> = [
  { bench: 'api', timeout: 120_000 }, // SQLite and PostgreSQL (SVC_TEST_PG_URL)
  { bench: 'deploy', timeout: 180_000 }, // the first to need the tests' images: it may build them
  { bench: 'proxy', timeout: 120_000 }, // wrk and nginx: scripts/ensure-bench-tools.sh
  { bench: 'tls', timeout: 180_000 }, // pebble (ensure-test-tools.sh), h2load (ensure-bench-tools.sh)
  { bench: 'build', timeout: 90_000 },
  { bench: 'db', timeout: 240_000 }, // PostgreSQL's initdb under a 0.4-CPU share, on both sides
  { bench: 'env', timeout: 120_000 },
  { bench: 'swarm', timeout: 180_000 }, // three engines in network namespaces (swarm-lab.ts)
];

for (const { bench, timeout } of BENCHES) {
  test(`bench/${bench} --smoke runs to the end against bin/svcd and exits 0`, { timeout }, (t) => runSmokeBench(t, bench));
}
