// bench/swarm (issue 21): on the tests' swarm of three engines (packages/svcd/test/swarm-lab.ts),
// 1. deploy to first 200: POST /v1/services until the first 200 through svc's proxy, against a
//    bare `docker service create` of the same image with the same spec svc gives it (the tenant's
//    overlay network, host-mode published port, endpoint mode dnsrr, every capability dropped,
//    the default quota's pids, memory and CPU) until its first 200 at <node>:<published port>.
//    The two alternate round by round; median of 10. Target: svc / bare at most 1.3.
// 2. a node's death: one service's node cut off the lab bridge; how long until Swarm runs its task
//    on another node (Swarm's own rescheduling: the floor, with the lab's 1 s dispatcher
//    heartbeat) and until the service answers again through svc's proxy.
// 3. a rolling redeploy: requests made back to back through svc's proxy, one at a time, from
//    before the redeploy until the old Swarm service is gone; how many failed. Target: 0. (Of a
//    service whose server answers every connection: busybox httpd drops a few, images.ts.)
// Run: make bench-swarm; --smoke: 1 round (bench/smoke.ts).
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { SvcClient } from '../../packages/client/src/index.js';
import { workloadLimits } from '../../packages/svcd/src/runtime/workload-policy.js';
import { DEFAULT_QUOTAS } from '../../packages/svcd/src/tenants/tenants.js';
import { freePort } from '../../packages/svcd/test/harness.js';
import { BUSYBOX_IMAGE, RESPONDER_IMAGE, TEST_REGISTRY, ensureTestImages } from '../../packages/svcd/test/images.js';
import { LAB_HOST, startSwarmLab } from '../../packages/svcd/test/swarm-lab.js';
import { backToBack, until200 } from '../first-answer.js';
import { sampleProblems, smokeRequested, smokeVerdict } from '../smoke.js';
import { median, spawnSvcd } from '../svcd.js';

const SMOKE = smokeRequested();
const ROUNDS = SMOKE ? 1 : Number(process.env.BENCH_ROUNDS ?? 10);
const limits = workloadLimits(DEFAULT_QUOTAS);

interface Task {
  ServiceID: string;
  NodeID: string;
  /** A task being replaced keeps State running, with DesiredState shutdown, while its node is away. */
  DesiredState: string;
  Status: { State: string; PortStatus?: { Ports?: Array<{ PublishedPort?: number }> } };
}

await ensureTestImages();
const lab = await startSwarmLab();
const manager = lab.manager.engine;
const apiPort = await freePort();
const proxyPort = await freePort();
const dataDir = mkdtempSync(join(tmpdir(), 'svc-bench-swarm-'));
const svcd = await spawnSvcd([
  '--dev',
  '--open-registration',
  '--data-dir', dataDir,
  '--listen', `127.0.0.1:${apiPort}`,
  '--proxy-listen', `127.0.0.1:${proxyPort}`,
  '--runtime', 'swarm',
  '--docker-host', lab.manager.engineUrl,
  '--swarm-node', lab.swarmNodeFlag,
  // The node firewall's helper (busybox: sleep and chroot), from the tests' registry.
  '--swarm-helper-image', BUSYBOX_IMAGE,
  // svcd and its proxy reach the nodes' published ports from the host's lab-bridge address.
  '--swarm-published-from', LAB_HOST,
  '--build-registry', TEST_REGISTRY,
  '--log-level', 'warn',
]);
const anon = new SvcClient({ baseUrl: `http://127.0.0.1:${apiPort}` });
const reg = await anon.register({ name: 'bench-swarm', email: 'bench-swarm@x.io' });
const c = anon.withKey(reg.api_key);

/** The node addresses by node id. */
const addresses = new Map(((await manager.listNodes()) as Array<{ ID: string; Status: { Addr: string } }>).map((n) => [n.ID, n.Status.Addr]));
const runningTask = async (serviceId: string): Promise<Task | undefined> =>
  ((await manager.listTasks({ filters: { service: [serviceId] } })) as Task[]).find((t) => t.Status.State === 'running' && t.DesiredState === 'running' && t.Status.PortStatus?.Ports?.[0]?.PublishedPort);

/** By hand: the service svc would make, with the Engine API of the manager, until its first 200. */
async function bareFirstAnswer(round: number): Promise<() => Promise<void>> {
  const created = (await manager.createService({
    Name: `bench-bare-${String(round)}`,
    TaskTemplate: {
      ContainerSpec: { Image: BUSYBOX_IMAGE, CapabilityDrop: ['ALL'] },
      Resources: { Limits: { NanoCPUs: Math.round(limits.cpus * 1e9), MemoryBytes: limits.memoryMb * 1024 * 1024, Pids: limits.pids } },
      RestartPolicy: { Condition: 'any' },
      Networks: [{ Target: 'bench-bare' }],
    },
    Mode: { Replicated: { Replicas: 1 } },
    // A port fixed as svc's are (one per round, below svcd's --swarm-ports).
    EndpointSpec: { Mode: 'dnsrr', Ports: [{ Protocol: 'tcp', TargetPort: 8000, PublishMode: 'host', PublishedPort: 29_000 + round }] },
  } as never)) as { id?: string; ID?: string };
  const id = created.id ?? created.ID ?? '';
  let task: Task | undefined;
  while (!(task = await runningTask(id))) await new Promise((r) => setTimeout(r, 5));
  await until200(addresses.get(task.NodeID) ?? '', task.Status.PortStatus?.Ports?.[0]?.PublishedPort ?? 0, '/index.html');
  return () => manager.getService(id).remove();
}

const svcTimes: number[] = [];
const bareTimes: number[] = [];
let rescheduledMs = NaN;
let answeredMs = NaN;
const rolling = { requests: 0, failed: 0, ms: NaN };
try {
  await manager.createNetwork({ Name: 'bench-bare', Driver: 'overlay', Attachable: true });
  // The tenant's overlay network exists for both sides: a resident service made it (the one
  // redeployed under load below).
  const resident = await c.createService({ name: 'resident', image: RESPONDER_IMAGE });
  await until200('127.0.0.1', proxyPort, '/index.html', `${resident.id}.localhost:${proxyPort}`);
  for (let i = 0; i < ROUNDS; i++) {
    let t0 = performance.now();
    const s = await c.createService({ name: `bench-${String(i)}`, image: BUSYBOX_IMAGE });
    await until200('127.0.0.1', proxyPort, '/index.html', `${s.id}.localhost:${proxyPort}`);
    svcTimes.push(performance.now() - t0);
    await c.deleteService(s.id);

    t0 = performance.now();
    const remove = await bareFirstAnswer(i);
    bareTimes.push(performance.now() - t0);
    await remove();
    process.stderr.write(`bench-swarm: round ${String(i + 1)}/${String(ROUNDS)}: svc ${String(Math.round(svcTimes.at(-1) ?? 0))} ms, bare ${String(Math.round(bareTimes.at(-1) ?? 0))} ms\n`);
  }

  // A rolling redeploy of the resident service under back-to-back requests through the proxy.
  const residentHost = `${resident.id}.localhost:${proxyPort}`;
  const swarmServices = () => manager.listServices({ filters: { label: [`svc.resource=${resident.id}`] } });
  const [old] = await swarmServices();
  const load = backToBack(proxyPort, residentHost);
  try {
    const t0 = performance.now();
    await c.serviceAction(resident.id, 'redeploy');
    for (;;) {
      const list = await swarmServices();
      if ((await c.service(resident.id)).status === 'running' && list.length === 1 && list[0]?.ID !== old?.ID) break;
      if (performance.now() - t0 > 120_000) throw new Error('the rolling redeploy did not end within 120 s');
      await new Promise((r) => setTimeout(r, 100));
    }
    rolling.ms = performance.now() - t0;
  } finally {
    await load.stop();
    rolling.requests = load.counts.requests;
    rolling.failed = load.counts.failed;
  }

  // A node's death under the resident service.
  const [service] = await swarmServices();
  const before = await runningTask(service?.ID ?? '');
  const nodes = (await manager.listNodes()) as Array<{ ID: string; Description: { Hostname: string } }>;
  const lost = nodes.find((n) => n.ID === before?.NodeID)?.Description.Hostname ?? '';
  const t0 = performance.now();
  lab.disconnect(lost);
  try {
    for (;;) {
      const now = await runningTask(service?.ID ?? '');
      if (now && now.NodeID !== before?.NodeID) break;
      if (performance.now() - t0 > 120_000) throw new Error('no task on another node within 120 s');
      await new Promise((r) => setTimeout(r, 50));
    }
    rescheduledMs = performance.now() - t0;
    await until200('127.0.0.1', proxyPort, '/index.html', `${resident.id}.localhost:${proxyPort}`);
    answeredMs = performance.now() - t0;
  } finally {
    lab.reconnect(lost);
  }
} finally {
  await svcd.stop();
  await lab.stop();
  rmSync(dataDir, { recursive: true, force: true });
}
const svcMedian = median(svcTimes);
const bareMedian = median(bareTimes);
console.log(`\n| Swarm of three engines, median of ${String(ROUNDS)} | ms |\n|---|---|`);
console.log(`| svc: POST /v1/services until the first 200 through the proxy | ${String(Math.round(svcMedian))} |`);
console.log(`| bare: docker service create (same spec) until the first 200 at the node's published port | ${String(Math.round(bareMedian))} |`);
console.log(`| ratio svc / bare | ${(svcMedian / bareMedian).toFixed(2)} (target at most 1.3) |`);
console.log(`| a node cut off: Swarm runs the task on another node (its rescheduling, the floor; 1 s heartbeat) | ${String(Math.round(rescheduledMs))} |`);
console.log(`| a node cut off: the service answers again through svc's proxy | ${String(Math.round(answeredMs))} |`);
console.log(`| a rolling redeploy, until the old Swarm service is gone | ${String(Math.round(rolling.ms))} |`);
console.log(`| requests through the proxy during it, back to back: failed / made | ${String(rolling.failed)} / ${String(rolling.requests)} (target 0) |`);
if (SMOKE) {
  smokeVerdict('bench-swarm', [
    ...sampleProblems('svc deploys', svcTimes, ROUNDS),
    ...sampleProblems('bare deploys', bareTimes, ROUNDS),
    ...sampleProblems('the rescheduling', [rescheduledMs]),
    ...sampleProblems('the answer after a node died', [answeredMs]),
    ...sampleProblems('the rolling redeploy', [rolling.ms]),
  ]);
}
