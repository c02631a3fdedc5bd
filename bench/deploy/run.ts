// bench/deploy: POST /v1/services until the first 200 through svc's proxy, against the bare
// Engine API doing create + start + first 200 of the same image (same OCI runtime, the same
// capabilities, memory and CPU limits as svc gives a service on the default quota, in the CPU
// group svc gives a tenant's containers: first-answer.ts) in the same run. The two alternate
// round by round, so the machine's drift hits both alike. Median of 20.
// Both deploy onto a network that exists already: the tenant keeps one resident service (as any
// tenant with a service has its network), and the bare side uses a network made once. The cost
// of a tenant's very first service, which creates its network, is measured and printed apart.
// Then a resident service is redeployed under back-to-back requests through the proxy, and the requests
// that got anything but a 200 are counted (issue 21: none, a rolling redeploy's old container
// serves until the new one is routed). No baseline: the target is an absolute 0.
// Run: make bench-deploy; --smoke: 2 rounds and 1 redeploy (bench/smoke.ts).
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { SvcClient } from '../../packages/client/src/index.js';
import { BUSYBOX_IMAGE, RESPONDER_IMAGE, docker, ensureTestImages, removeTenantWorkloads } from '../../packages/svcd/test/images.js';
import { freePort } from '../../packages/svcd/test/harness.js';
import { sampleProblems, smokeRequested, smokeVerdict } from '../smoke.js';
import { median, spawnSvcd } from '../svcd.js';
import { backToBack, bareCpuGroup, bareFirstAnswer, until200 } from '../first-answer.js';

const SMOKE = smokeRequested();
const ROUNDS = SMOKE ? 2 : Number(process.env.BENCH_ROUNDS ?? 20);
const REDEPLOYS = SMOKE ? 1 : 5;

await ensureTestImages();
const info = (await docker.info()) as { Runtimes?: Record<string, unknown> };
const runtime = 'runsc' in (info.Runtimes ?? {}) ? 'runsc' : 'runc';
const apiPort = await freePort();
const proxyPort = await freePort();
const dataDir = mkdtempSync(join(tmpdir(), 'svc-bench-deploy-'));
const svcd = await spawnSvcd(['--dev', '--open-registration', '--data-dir', dataDir, '--listen', `127.0.0.1:${apiPort}`, '--proxy-listen', `127.0.0.1:${proxyPort}`, '--log-level', 'warn']);
const anon = new SvcClient({ baseUrl: `http://127.0.0.1:${apiPort}` });
const reg = await anon.register({ name: 'bench-deploy', email: 'bench-deploy@x.io' });
const c = anon.withKey(reg.api_key);
await docker.createNetwork({ Name: 'svc-bench-bare', Driver: 'bridge', CheckDuplicate: true }).catch(() => {});

// The first service of the tenant creates its network: measured apart, then kept (the network stays).
let t0 = performance.now();
const first = await c.createService({ name: 'first', image: BUSYBOX_IMAGE });
await until200('127.0.0.1', proxyPort, '/index.html', `${first.id}.localhost:${proxyPort}`);
const firstService = performance.now() - t0;
// Redeployed under load below: a server that answers every connection (busybox httpd drops a
// few, more on a busy machine: images.ts).
const resident = await c.createService({ name: 'resident', image: RESPONDER_IMAGE });
await until200('127.0.0.1', proxyPort, '/index.html', `${resident.id}.localhost:${proxyPort}`);
// The bare side's containers go in a CPU group beside the one svc gives this tenant's.
const bareGroup = await bareCpuGroup(reg.tenant_id);
process.stderr.write(`bench-deploy: the bare side's CPU group: ${bareGroup ?? "none (svc places its tenants' containers in none)"}\n`);

const svcTimes: number[] = [];
const bareTimes: number[] = [];
let redeployLoad = { requests: 0, failed: 0 };
try {
  for (let i = 0; i < ROUNDS; i++) {
    // svc: the API call, the background deploy, Caddy's route, the first answer through it.
    t0 = performance.now();
    const s = await c.createService({ name: `bench-${i}`, image: BUSYBOX_IMAGE });
    await until200('127.0.0.1', proxyPort, '/index.html', `${s.id}.localhost:${proxyPort}`);
    svcTimes.push(performance.now() - t0);
    await c.deleteService(s.id);

    // Bare Engine API: create + start the same image (same runtime, same hardening), first 200.
    t0 = performance.now();
    const remove = await bareFirstAnswer(BUSYBOX_IMAGE, 'svc-bench-bare', runtime, '/index.html', bareGroup);
    bareTimes.push(performance.now() - t0);
    await remove();
    process.stderr.write(`bench-deploy: round ${i + 1}/${ROUNDS}: svc ${Math.round(svcTimes.at(-1)!)} ms, bare ${Math.round(bareTimes.at(-1)!)} ms\n`);
  }

  // Redeploys under load: one request at a time, back to back, through the proxy.
  const load = backToBack(proxyPort, `${resident.id}.localhost:${proxyPort}`);
  redeployLoad = load.counts;
  try {
    for (let i = 0; i < REDEPLOYS; i++) {
      const { deployment } = await c.serviceAction(resident.id, 'redeploy');
      const deadline = Date.now() + 120_000;
      for (;;) {
        const d = (await c.deployments(resident.id)).find((x) => x.id === deployment?.id);
        if (d?.status === 'succeeded') break;
        if ((d && d.status !== 'pending' && d.status !== 'running') || Date.now() > deadline) throw new Error(`redeploy ${String(i + 1)} ended ${d?.status ?? 'unseen'}`);
        await new Promise((r) => setTimeout(r, 50));
      }
      process.stderr.write(`bench-deploy: redeploy ${i + 1}/${REDEPLOYS}: ${redeployLoad.failed} of ${redeployLoad.requests} requests failed so far\n`);
    }
  } finally {
    await load.stop();
  }
} finally {
  await svcd.stop();
  await removeTenantWorkloads([reg.tenant_id]);
  await docker.getNetwork('svc-bench-bare').remove().catch(() => {});
  rmSync(dataDir, { recursive: true, force: true });
}
const svcMedian = median(svcTimes);
const bareMedian = median(bareTimes);
console.log(`\n| deploy to first 200 (${runtime}), median of ${ROUNDS} | ms |\n|---|---|`);
console.log(`| svc: POST /v1/services until the first 200 through the proxy | ${Math.round(svcMedian)} |`);
console.log(`| bare Engine API: create + start + first 200 | ${Math.round(bareMedian)} |`);
console.log(`| ratio svc / bare | ${(svcMedian / bareMedian).toFixed(2)} (target at most 1.3) |`);
console.log(`| svc, the tenant's first service (creates its network), once | ${Math.round(firstService)} |`);
console.log(`\n| ${String(REDEPLOYS)} redeploys of a running service under back-to-back requests through the proxy | requests |\n|---|---|`);
console.log(`| made | ${String(redeployLoad.requests)} |`);
console.log(`| failed (anything but 200) | ${String(redeployLoad.failed)} (target 0) |`);
if (SMOKE) {
  smokeVerdict('bench-deploy', [
    ...sampleProblems('svc deploys', svcTimes, ROUNDS),
    ...sampleProblems('bare deploys', bareTimes, ROUNDS),
    ...sampleProblems("the tenant's first service", [firstService]),
    ...(redeployLoad.requests > 0 ? [] : ['no request was made during the redeploys']),
  ]);
}
