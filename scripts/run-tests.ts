// make test's run of every test file (packages/*/test/*.test.ts), in three lanes, so that a CI run
// stays under its 45 minutes on two cores (one file after another it took 48 here):
//
// - engine: the files that drive the real engine (gVisor containers, Caddy, a registry, a
//   browser), one at a time: two at once overload two cores, and first requests to fresh
//   containers then get resets.
// - beside: the files that never reach the machine's engine, iptables or cgroups (svcd in-process
//   on a stand-in runtime, whose firewall the harness keeps in memory; the stores; the rules
//   themselves), nor a port range another file uses. Most of their time is spent waiting on
//   leases and timers, so they run next to the engine lane instead of after it (8 minutes
//   beside its 26 here), one at a time, in a CPU group of their own weighted below the tenants'
//   workloads (besideCpuGroup), so that the engine lane and its containers keep the CPU they had.
// - alone: engine files whose assertions the machine's load would move (CPU shares, svcd's RSS
//   and latency bounds, the benches' smoke runs, server timeouts on real sockets, dockerd
//   stopped under its workloads): after both others have ended.
//
// A file is in the engine lane unless it is named below: a new file is safe there, only slower.
// The engine lane's report streams as it runs; the beside lane's is printed whole once it has
// ended (two reports interleaved line by line could not be read); the closing line adds up all.
// Just before it, every failure again, short (name, file, what it said): a CI log shown only by
// its tail still says what failed and why, not only which suite.
//
// Usage: node --import tsx scripts/run-tests.ts (SVC_BIN_DIR and SVC_TEST_PG_URL as make test
// sets them). `--lane beside FILE...` is the beside lane's own process (started in its CPU group).
import { execFileSync, spawn } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, writeFileSync } from 'node:fs';
import { basename, join, relative, resolve } from 'node:path';
import { run } from 'node:test';
import { spec } from 'node:test/reporters';

const PACKAGES = resolve(import.meta.dirname, '..', 'packages');
const TIMEOUT_MS = 300_000;
const BESIDE_NICENESS = '10';
/** The beside lane's CPU group, under the cgroup root (cgroup v2; v1's cpu hierarchy). */
const BESIDE_CGROUP = 'svc-test-beside';
const SUMMARY_MARK = 'svc-test-lane-summary ';
/**
 * Preloaded into every test file's process: its stdout, a pipe to this runner, written
 * synchronously. forceExit ends the process once its tests are done, and a pipe's pending writes
 * are lost then: the report's last events never arrived (seen: unit.test.ts's last five tests
 * missing from a passing run's count; reproduced with 300 tests, 4 runs of 5 short by up to 37).
 * The process's exit code still failed a file whose lost events held a failure.
 */
const BLOCKING_STDOUT = 'data:text/javascript,process.stdout._handle?.setBlocking?.(true)';

/**
 * Files of the beside lane: no engine (every svcd they start is given a stand-in runtime), no
 * browser, no child svcd. Not here though they look alike: the files whose svcd keeps the default
 * Docker runtime (it reads the engine and reconciles its containers), and http-requests (its
 * request timeouts are timed on real sockets).
 */
const BESIDE = new Set([
  'cli/test/cli-output.test.ts',
  'cli/test/source-archive.test.ts',
  'kanban/test/board.test.ts',
  'svcd/test/agent-protocol.test.ts',
  'svcd/test/build-sources.test.ts',
  'svcd/test/certificate-orders.test.ts',
  'svcd/test/deploys-memory.test.ts',
  'svcd/test/domains.test.ts',
  'svcd/test/driver-memory.test.ts',
  'svcd/test/environments-memory.test.ts',
  'svcd/test/host-names.test.ts',
  'svcd/test/layout.test.ts',
  'svcd/test/probes.test.ts',
  'svcd/test/quota-concurrency.test.ts',
  'svcd/test/resource-limits.test.ts',
  'svcd/test/retention.test.ts',
  'svcd/test/source-archive.test.ts',
  'svcd/test/source-urls.test.ts',
  'svcd/test/spec-rules.test.ts',
  'svcd/test/store.test.ts',
  'svcd/test/tenant-init.test.ts',
  'svcd/test/two-svcd-memory.test.ts',
  'svcd/test/workloads-controller.test.ts',
]);

/** Files of the alone lane, in this order (the benches last: they take the longest). */
const ALONE = [
  'svcd/test/cpu-fairness.test.ts',
  'svcd/test/resource-safety.test.ts',
  'svcd/test/http-hardening.test.ts',
  'svcd/test/metering.test.ts',
  'svcd/test/engine-restart.test.ts',
  'svcd/test/bench-smoke.test.ts',
  'svcd/test/bench-soak.test.ts',
];

interface Counts {
  files: number;
  tests: number;
  passed: number;
  failed: number;
  cancelled: number;
  skipped: number;
  todo: number;
  success: boolean;
  /** Each failed test or hook, told in a few lines (a suite that failed only through its tests is not repeated). */
  failures: string[];
}

/** The lines of a failure's message kept in the recap: enough for an assertion's diff. */
const RECAP_LINES = 12;

/** Nothing counted yet, and not a success until a run's own summary says so. */
function noCounts(files: number): Counts {
  return { files, tests: 0, passed: 0, failed: 0, cancelled: 0, skipped: 0, todo: 0, success: false, failures: [] };
}

/** Runs files one at a time; the spec report goes to `out`; resolves with the run's counts. */
function runLane(files: string[], out: NodeJS.WritableStream): Promise<Counts> {
  // A runner that died sends no summary: its lane stays a failure.
  const counts = noCounts(files.length);
  if (files.length === 0) return Promise.resolve({ ...counts, success: true });
  return new Promise((res, rej) => {
    // forceExit: a file whose tests are done ends even if something it started still holds the
    // event loop (a svcd whose start failed half-way, its listener and store pool open): without
    // it the file's process never exits and the whole lane waits (seen: a CI-length hang).
    const stream = run({ files, concurrency: 1, timeout: TIMEOUT_MS, forceExit: true, execArgv: ['--import', BLOCKING_STDOUT] });
    stream.on('test:summary', (s) => {
      // One summary per file, then the run's own (without a file): that one is the total.
      if (s.file !== undefined) return;
      const { tests, passed, cancelled, skipped, todo } = s.counts;
      // The event has `failed` too; @types/node does not list it yet: what is not otherwise counted failed.
      Object.assign(counts, { tests, passed, failed: tests - passed - cancelled - skipped - todo, cancelled, skipped, todo, success: s.success });
    });
    stream.on('test:fail', (f) => {
      const told = recapOf(f);
      if (told) counts.failures.push(told);
    });
    const report = stream.pipe(new spec());
    report.on('error', rej);
    report.on('end', () => res(counts));
    report.pipe(out, { end: false });
  });
}

/** A failure in a few lines, or null for a suite whose only failure is its tests' (they are told). */
function recapOf(f: { name: string; file?: string; todo?: string | boolean; details: { error: Error } }): string | null {
  // node:test wraps what was thrown in an ERR_TEST_FAILURE whose cause is the thrown error.
  const wrapped = f.details.error as Error & { failureType?: string; cause?: unknown };
  // Told by another entry: a suite's failing tests, a failed hook's cancelled tests; a todo test is not counted as failed.
  if (wrapped.failureType === 'subtestsFailed' || wrapped.failureType === 'cancelledByParent' || f.todo) return null;
  const thrown = wrapped.cause instanceof Error ? wrapped.cause : wrapped;
  const where = f.file ? relative(PACKAGES, f.file) : 'no file';
  // The stack without node's own frames: the test's line is among the first that remain.
  const said = (thrown.stack ?? `${thrown.name}: ${thrown.message}`)
    .split('\n')
    .filter((l) => !/^\s*at ((async )?node:|.*\(node:|.*\(<anonymous>\)$)/.test(l))
    .slice(0, RECAP_LINES)
    .map((l) => `    ${l}`);
  return [`  ✖ ${f.name} (${where}${wrapped.failureType ? `, ${wrapped.failureType}` : ''})`, ...said].join('\n');
}

function add(a: Counts, b: Counts): Counts {
  return {
    files: a.files + b.files,
    tests: a.tests + b.tests,
    passed: a.passed + b.passed,
    failed: a.failed + b.failed,
    cancelled: a.cancelled + b.cancelled,
    skipped: a.skipped + b.skipped,
    todo: a.todo + b.todo,
    success: a.success && b.success,
    failures: [...a.failures, ...b.failures],
  };
}

/**
 * The beside lane's CPU group, made with a weight a fifth of svc's tenant group's (svcd gives
 * the tenants' parent 10 against the host's 100: runtime/tenant-cgroups.ts), or null where it
 * cannot be made (not root). Nice alone is not enough: it only orders processes within one
 * group, and against the tenants' group a niced process weighs as much as all the tenants' workloads
 * together (110 against 102 on cgroup v1's scale). A beside file busy on the CPU then halved what
 * the engine lane's containers got, and their deploys and first handshakes missed the tests'
 * deadlines (seen: tls.test.ts's services not running within 30 s beside two niced busy loops).
 * Against svcd and the engine lane's own processes the group weighs little too (20 against 1024
 * each): its files mostly wait on leases and timers, and the report gives the lane's time beside
 * the engine lane's, so a lane that starts to outlast it shows.
 */
function besideCpuGroup(): string | null {
  const v2 = existsSync('/sys/fs/cgroup/cgroup.controllers');
  const dir = v2 ? join('/sys/fs/cgroup', BESIDE_CGROUP) : join('/sys/fs/cgroup/cpu', BESIDE_CGROUP);
  try {
    mkdirSync(dir, { recursive: true });
    // v2's weight 2 against the tenants' 10; v1's shares 20 against their 102.
    writeFileSync(join(dir, v2 ? 'cpu.weight' : 'cpu.shares'), v2 ? '2' : '20');
    return dir;
  } catch {
    return null;
  }
}

/**
 * Says so when svc's workloads already run on the engine before the tests start: a test file
 * killed mid-way (its after hooks never ran) leaves its containers running, and each gVisor
 * sandbox takes CPU from the tests' own (seen: four left by a killed tls.test.ts took 40 percent of
 * a core for an hour, while a full run beside them failed three engine tests on their deadlines). Not
 * removed here: they may be a developer's own svcd's on the same engine.
 */
function warnOfLeftWorkloads(): void {
  let ids: string[];
  try {
    ids = execFileSync('docker', ['ps', '-q', '--filter', 'label=svc.resource'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).split('\n').filter(Boolean);
  } catch {
    return; // no engine yet: nothing runs on it
  }
  if (ids.length > 0) process.stdout.write(`run-tests: warning: ${String(ids.length)} svc workload containers already run on the engine (left by an interrupted test run? \`docker rm -f $(docker ps -q --filter label=svc.resource)\` removes them): they take CPU from the tests\n`);
}

/** The beside lane in its own process, in `cpuGroup` when there is one, niced: its report, and its counts from the last line. */
function besideLane(files: string[], cpuGroup: string | null): Promise<{ report: string; counts: Counts }> {
  return new Promise((res, rej) => {
    const lane = ['nice', '-n', BESIDE_NICENESS, process.execPath, ...process.execArgv, import.meta.filename, '--lane', 'beside', ...files];
    // The shell joins the group, then becomes the lane: every process the lane starts is in it.
    // A group it cannot join (a delegated cgroup v2 tree may refuse) leaves the lane niced only, and says so.
    const joinGroup = '{ echo $$ > "$0/cgroup.procs"; } 2>/dev/null || echo "run-tests: the beside lane could not join $0: niced only" >&2; exec "$@"';
    const [command = 'nice', ...args] = cpuGroup ? ['sh', '-c', joinGroup, cpuGroup, ...lane] : lane;
    const child = spawn(command, args, {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    const chunks: Buffer[] = [];
    child.stdout.on('data', (b: Buffer) => chunks.push(b));
    child.on('error', rej);
    child.on('close', (code, signal) => {
      const text = Buffer.concat(chunks).toString('utf8');
      const at = text.lastIndexOf(SUMMARY_MARK);
      if (at < 0 || code !== 0) {
        rej(new Error(`the beside lane ended (${String(code ?? signal)}) ${at < 0 ? 'without its counts' : 'with an error'}:\n${text}`));
        return;
      }
      res({ report: text.slice(0, at), counts: JSON.parse(text.slice(at + SUMMARY_MARK.length)) as Counts });
    });
  });
}

const minutes = (ms: number) => `${(ms / 60_000).toFixed(1)} min`;

async function main(): Promise<void> {
  const args = process.argv.slice(2);
  if (args[0] === '--lane') {
    const counts = await runLane(args.slice(2), process.stdout);
    process.stdout.write(`\n${SUMMARY_MARK}${JSON.stringify(counts)}\n`);
    // The counts carry the outcome; a nonzero exit is kept for a lane that broke.
    process.exitCode = 0;
    return;
  }
  const started = Date.now();
  // Every packages/*/test/*.test.ts, named as the lists above name them.
  const all = readdirSync(PACKAGES)
    .flatMap((p) => {
      const dir = join(PACKAGES, p, 'test');
      return existsSync(dir) ? readdirSync(dir).filter((f) => f.endsWith('.test.ts')).map((f) => `${p}/test/${f}`) : [];
    })
    .sort();
  const unknown = [...BESIDE, ...ALONE].filter((k) => !all.includes(k));
  if (unknown.length) throw new Error(`scripts/run-tests.ts names files that do not exist: ${unknown.join(', ')}`);
  const twice = ALONE.filter((k) => BESIDE.has(k));
  if (twice.length) throw new Error(`scripts/run-tests.ts names files in two lanes: ${twice.join(', ')}`);
  const abs = (k: string) => join(PACKAGES, k);
  const beside = all.filter((k) => BESIDE.has(k)).map(abs);
  const alone = ALONE.map(abs);
  const engine = all.filter((k) => !BESIDE.has(k) && !ALONE.includes(k)).map(abs);
  warnOfLeftWorkloads();
  const cpuGroup = besideCpuGroup();
  const placed = cpuGroup ? `in the CPU group ${cpuGroup}, below the tenants'` : 'niced only: no CPU group of their own could be made';
  process.stdout.write(`run-tests: ${all.length} files: ${engine.length} on the engine one at a time, ${beside.length} beside them (${placed}; their report follows the engine lane's), then ${alone.length} alone\n`);

  // Settled, not awaited, until the engine lane has ended: a beside lane that broke is reported
  // after the engine lane's report, as a failure, instead of cutting that report off.
  const besideRun = besideLane(beside, cpuGroup).then(
    (ok) => ({ ...ok, tookMs: Date.now() - started }),
    (err: unknown) => ({
      report: `${err instanceof Error ? err.message : String(err)}\n`,
      counts: { ...noCounts(beside.length), failed: 1, failures: ['  ✖ the beside lane broke (its report says how)'] },
      tookMs: Date.now() - started,
    }),
  );
  const engineCounts = await runLane(engine, process.stdout);
  const { report, counts: besideCounts, tookMs } = await besideRun;
  // Its time, against the engine lane's: a beside lane that outlasts it lengthens the run.
  process.stdout.write(`\nrun-tests: the beside lane (${beside.map((f) => basename(f)).join(' ')}), ${minutes(tookMs)}; the engine lane took ${minutes(Date.now() - started)}:\n${report}`);
  process.stdout.write(`\nrun-tests: the alone lane (${ALONE.map((f) => basename(f)).join(' ')}):\n`);
  const aloneCounts = await runLane(alone, process.stdout);

  const total = add(add(engineCounts, besideCounts), aloneCounts);
  const ok = total.success && total.tests > 0 && total.failed === 0 && total.cancelled === 0;
  if (total.failures.length > 0) process.stdout.write(`\nrun-tests: what failed, again:\n${total.failures.join('\n')}\n`);
  process.stdout.write(
    `\nrun-tests: ${ok ? 'PASSED' : 'FAILED'}: ${total.files} files, ${total.tests} tests: ${total.passed} passed, ${total.failed} failed, ${total.cancelled} cancelled, ${total.skipped} skipped, ${total.todo} todo, in ${minutes(Date.now() - started)}\n`,
  );
  process.exitCode = ok ? 0 : 1;
}

await main();
