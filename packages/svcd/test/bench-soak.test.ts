// The soak benchmark (bench/soak/run.ts) in its smoke mode, so that it does not rot between the
// runs that measure: phases of 10 s, 5 well-behaved tenants and the misbehaving one, on the built
// bin/svcd. It exits nonzero when the run did not work (no answers, no RSS samples, the
// misbehaving tenant idle) or broke (bench-process.ts).
import { test } from 'node:test';
import { runSmokeBench } from './bench-process.js';

test('bench/soak --smoke runs to the end against bin/svcd and exits 0', { timeout: 280_000 }, (t) => runSmokeBench(t, 'soak'));
