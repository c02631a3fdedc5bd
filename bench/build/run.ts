// bench/build: a no-change rebuild of the same repository through svc (POST .../builds, then
// GET it with ?wait until it reads `succeeded`: queue, clone, image build through the engine, the
// start of its deployment), against what a user does by hand in the same run: `git clone --depth 1` of the
// same ref into a fresh folder, then the Engine API build of that clone. The two alternate round
// by round; medians of ROUNDS. Each round starts once the deployment svc's build started has
// ended, so that neither side is measured beside a container start. The repository is served by a loopback `git daemon`, as in the
// tests; its image builds on the local test image.
// Then the deploy of a directory (directory.ts): `svc deploy examples/hello` to the first 200
// through the proxy, against packing it and building, creating and starting it by hand.
// Run: make bench-build; --smoke: 1 round of each after the warm-up (bench/smoke.ts).
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { pack } from 'tar-fs';
import { SvcClient, WAIT_MAX_S } from '../../packages/client/src/index.js';
import { freePort } from '../../packages/svcd/test/harness.js';
import { BUSYBOX_IMAGE, docker, ensureTestImages, finished, removeImages, removeTenantWorkloads } from '../../packages/svcd/test/images.js';
import { startGitServer } from '../../packages/svcd/test/git-fixtures.js';
import { LABELS } from '../../packages/svcd/src/runtime/port.js';
import { sampleProblems, smokeRequested, smokeVerdict } from '../smoke.js';
import { median, spawnSvcd } from '../svcd.js';
import { deployDirectoryRounds, type DirectoryRounds } from './directory.js';

const SMOKE = smokeRequested();
const ROUNDS = SMOKE ? 1 : Number(process.env.BENCH_ROUNDS ?? 5);
const run = promisify(execFile);

await ensureTestImages();
const git = await startGitServer();
const apiPort = await freePort();
const proxyPort = await freePort();
const dir = mkdtempSync(join(tmpdir(), 'svc-bench-build-'));
const svcd = await spawnSvcd(['--dev', '--open-registration', '--data-dir', join(dir, 'data'), '--listen', `127.0.0.1:${apiPort}`, '--proxy-listen', `127.0.0.1:${proxyPort}`, '--log-level', 'warn', '--dev-rate-limit', '1000000:1000000,1000000:1000000']);
const anon = new SvcClient({ baseUrl: `http://127.0.0.1:${apiPort}` });
const reg = await anon.register({ name: 'bench-build', email: 'bench-build@x.io' });
const c = anon.withKey(reg.api_key);

async function svcBuild(serviceId: string): Promise<number> {
  const t0 = performance.now();
  const b = await c.createBuild(serviceId, { source_type: 'git', source_url: git.url('app'), source_ref: 'main' });
  let ms: number;
  // As a client waits for a build: a held ?wait, answered when it ends (asked again should 20 s
  // pass; after a pause when svcd answered at once, closing or past its caps on held waits).
  for (;;) {
    const asked = performance.now();
    const now = await c.build(serviceId, b.build_id, { wait: WAIT_MAX_S });
    if (now.status === 'succeeded') {
      ms = performance.now() - t0;
      break;
    }
    if (now.status !== 'queued' && now.status !== 'running') throw new Error(`build ${now.status}: ${now.last_error}`);
    if (performance.now() - asked < 1_000) await new Promise((r) => setTimeout(r, 50));
  }
  // Not measured: the deployment the build started runs to its end before the next round, so
  // that its container's start (both cores for a moment under gVisor) does not fall into the
  // next measurement of either side; and so does the stop of the container it replaced, which
  // a rolling deploy begins once every proxy follows the new one (ROUTE_FOLLOW_MS after the
  // route moved, as the service turns running): until this waited for it too, the old
  // sandbox's stop landed in most of the next svc rounds (the bare side's have no such work).
  while ((await c.service(serviceId)).status === 'deploying') await new Promise((r) => setTimeout(r, 20));
  for (const deadline = Date.now() + 30_000; (await docker.listContainers({ all: true, filters: { label: [`${LABELS.tenant}=${reg.tenant_id}`] } })).length > 1; ) {
    if (Date.now() > deadline) throw new Error('the container the deploy replaced is still there after 30 s');
    await new Promise((r) => setTimeout(r, 20));
  }
  return ms;
}

/** By hand: a shallow clone of the ref into a fresh folder, then docker build of it through the Engine API, to the end of its output. */
async function bareBuild(tag: string): Promise<number> {
  const contextDir = mkdtempSync(join(dir, 'clone-'));
  const t0 = performance.now();
  await run('git', ['clone', '-q', '--depth', '1', '--branch', 'main', git.url('app'), contextDir]);
  const stream = await docker.buildImage(pack(contextDir, { ignore: (name) => name === join(contextDir, '.git') }), { t: tag, rm: true, forcerm: true });
  await finished(stream);
  const ms = performance.now() - t0;
  rmSync(contextDir, { recursive: true, force: true });
  return ms;
}

const svcTimes: number[] = [];
const bareTimes: number[] = [];
let directory: DirectoryRounds = { svc: [], bare: [], runtime: '' };
try {
  const s = await c.createService({ name: 'bench-build', image: BUSYBOX_IMAGE });
  // Warm-up: the first build fills the engine's layer cache for both sides (same context).
  await svcBuild(s.id);
  await bareBuild('svc-bench/bare-build:warm');
  for (let i = 0; i < ROUNDS; i++) {
    svcTimes.push(await svcBuild(s.id));
    bareTimes.push(await bareBuild(`svc-bench/bare-build:${i}`));
    process.stderr.write(`bench-build: round ${i + 1}/${ROUNDS}: svc ${Math.round(svcTimes.at(-1)!)} ms, bare ${Math.round(bareTimes.at(-1)!)} ms\n`);
  }
  const cliEnv = { PATH: process.env.PATH, SVC_URL: `http://127.0.0.1:${apiPort}`, SVC_API_KEY: reg.api_key, SVC_CONFIG: join(dir, 'cli-config.json') };
  directory = await deployDirectoryRounds(c, cliEnv, proxyPort, ROUNDS);
} finally {
  await svcd.stop();
  await removeTenantWorkloads([reg.tenant_id]);
  for (const ref of [`svc/${reg.tenant_id}/*`, 'svc-bench/bare-build', 'svc-bench/bare-directory']) await removeImages(ref);
  await git.stop();
  rmSync(dir, { recursive: true, force: true });
}
const svcMedian = median(svcTimes);
const bareMedian = median(bareTimes);
console.log(`\n| no-change rebuild, median of ${ROUNDS} | ms |\n|---|---|`);
console.log(`| svc: POST .../builds, GET ?wait until succeeded (clone + build + deployment started) | ${Math.round(svcMedian)} |`);
console.log(`| by hand: git clone --depth 1 + Engine API build of the clone | ${Math.round(bareMedian)} |`);
console.log(`| ratio svc / by hand | ${(svcMedian / bareMedian).toFixed(2)} (target at most 1.2) |`);
const deployMedian = median(directory.svc);
const byHandMedian = median(directory.bare);
console.log(`\n| a directory to the first 200 (${directory.runtime}), median of ${ROUNDS} | ms |\n|---|---|`);
console.log(`| svc deploy examples/hello: a new service, packed, uploaded, built, deployed, first 200 through the proxy | ${Math.round(deployMedian)} |`);
console.log(`| by hand: pack the directory + Engine API build + create + start + first 200 | ${Math.round(byHandMedian)} |`);
console.log(`| ratio svc / by hand | ${(deployMedian / byHandMedian).toFixed(2)} (target at most 1.3) |`);
if (SMOKE) {
  smokeVerdict('bench-build', [
    ...sampleProblems('svc builds', svcTimes, ROUNDS),
    ...sampleProblems('bare builds', bareTimes, ROUNDS),
    ...sampleProblems('svc deploy of a directory', directory.svc, ROUNDS),
    ...sampleProblems('a directory by hand', directory.bare, ROUNDS),
  ]);
}
