// --smoke, which every bench takes: one short round through the same code paths as the full run
// (the same svcd start, the same baseline measured beside it, the same report), so that `make test`
// runs each bench (packages/svcd/test/bench-smoke.test.ts, bench-soak.test.ts) and none can rot.
// The speed targets are the full run's to judge; a smoke run only has to have worked.
import { parseArgs } from 'node:util';

/** Whether the bench was started with --smoke, the one flag of the benches that take no other (bench/soak parses its own). */
export function smokeRequested(): boolean {
  return parseArgs({ options: { smoke: { type: 'boolean', default: false } } }).values.smoke;
}

/** What is wrong with a series of measurements: fewer than `expected`, or any not a positive finite number. */
export function sampleProblems(what: string, xs: number[], expected = 1): string[] {
  if (xs.length < expected) return [`${what}: ${xs.length} of ${expected} measurements`];
  const bad = xs.filter((x) => !(Number.isFinite(x) && x > 0));
  return bad.length ? [`${what}: measured ${bad.join(', ')}`] : [];
}

/** Ends a smoke run's report: the line the smoke test looks for, or what did not work and exit code 1. */
export function smokeVerdict(bench: string, problems: string[]): void {
  if (problems.length) {
    console.log(`${bench}: smoke: the run did not work: ${problems.join('; ')}`);
    process.exit(1);
  }
  console.log(`${bench}: smoke: the run worked`);
}
