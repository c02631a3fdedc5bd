// bench/db: POST /v1/databases until the connection is accepted (svc's own protocol probe:
// a PostgreSQL login and SELECT 1, a Redis AUTH + PING), per type, against the bare Engine API
// starting the same image with the same container settings (runtime, user, volume, loopback
// port, hardening, and the memory/CPU/pids limits svc gives a default tenant's workload: initdb
// is CPU-bound, so a bare side without the CPU cap would measure the cap, not svc) until the same
// probe passes, in the same run, alternating; median of ROUNDS per type. The images are the local
// stand-ins (test/operator-images.ts), as svcd is pointed at them with its image flags.
// Run: make bench-db; --smoke: 1 round per type (bench/smoke.ts), for a tenant on the tests'
// one-service plan (DATABASE_TEST_PLAN: a database gets the tenant's two cores, not 0.4), both
// sides: the smoke run checks that the bench works, its figure is not one to read.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { SvcClient } from '../../packages/client/src/index.js';
import { probeDatabase } from '../../packages/svcd/src/databases/probes.js';
import { engineCpuLimit, workloadLimits } from '../../packages/svcd/src/runtime/index.js';
import { ADMIN_TOKEN, DATABASE_TEST_PLAN, freePort, tenantRow } from '../../packages/svcd/test/harness.js';
import { docker, removeTenantWorkloads } from '../../packages/svcd/test/images.js';
import { POSTGRES_IMAGE, REDIS_IMAGE, ensureDbImages } from '../../packages/svcd/test/operator-images.js';
import { sampleProblems, smokeRequested, smokeVerdict } from '../smoke.js';
import { median, spawnSvcd } from '../svcd.js';

const SMOKE = smokeRequested();
const ROUNDS = SMOKE ? 1 : Number(process.env.BENCH_ROUNDS ?? 5);
const PLAN = SMOKE ? DATABASE_TEST_PLAN : null;
const limits = workloadLimits(tenantRow('bench', 'bench', PLAN ?? {}));
const PASSWORD = 'bench-password-0123456789';

async function untilProbe(probe: () => Promise<void>): Promise<void> {
  const deadline = Date.now() + 180_000;
  for (;;) {
    try {
      await probe();
      return;
    } catch {
      if (Date.now() > deadline) throw new Error('no connection within 180 s');
      await new Promise((r) => setTimeout(r, 25));
    }
  }
}

await ensureDbImages();
const info = (await docker.info()) as { Runtimes?: Record<string, unknown> };
const runtime = 'runsc' in (info.Runtimes ?? {}) ? 'runsc' : 'runc';
const apiPort = await freePort();
const dir = mkdtempSync(join(tmpdir(), 'svc-bench-db-'));
const svcd = await spawnSvcd([
  '--dev', '--open-registration', '--data-dir', join(dir, 'data'), '--listen', `127.0.0.1:${apiPort}`, '--log-level', 'warn',
  '--dev-rate-limit', '1000000:1000000,1000000:1000000', '--postgres-image', POSTGRES_IMAGE, '--redis-image', REDIS_IMAGE,
  '--database-ports', '24000-24099',
], undefined, { SVC_ADMIN_TOKEN: ADMIN_TOKEN });
const anon = new SvcClient({ baseUrl: `http://127.0.0.1:${apiPort}`, adminToken: ADMIN_TOKEN });
const reg = await anon.register({ name: 'bench-db', email: 'bench-db@x.io' });
if (PLAN) await anon.patchQuotas(reg.tenant_id, PLAN);
const c = anon.withKey(reg.api_key);
// The bare side's own network, as a tenant has one.
await docker.createNetwork({ Name: 'svc-bench-db', Driver: 'bridge', CheckDuplicate: true }).catch(() => {});

const kinds = {
  postgres: { image: POSTGRES_IMAGE, port: 5432, user: 'postgres', dataDir: '/var/lib/postgresql/data', env: [`POSTGRES_USER=svc`, `POSTGRES_PASSWORD=${PASSWORD}`, 'POSTGRES_DB=app'], cmd: undefined as string[] | undefined },
  redis: { image: REDIS_IMAGE, port: 6379, user: 'redis', dataDir: '/data', env: [] as string[], cmd: ['redis-server', '--requirepass', PASSWORD, '--appendonly', 'yes'] },
};
const probeFor = (type: 'postgres' | 'redis', port: number, password: string) => () =>
  probeDatabase(type, { host: '127.0.0.1', port, username: type === 'postgres' ? 'svc' : 'default', password, database: type === 'postgres' ? 'app' : null });

const results: Record<string, { svc: number[]; bare: number[] }> = { postgres: { svc: [], bare: [] }, redis: { svc: [], bare: [] } };
try {
  for (let i = 0; i < ROUNDS; i++) {
    for (const type of ['postgres', 'redis'] as const) {
      // svc: the API call and the background provisioning until svc reports `running` (its own
      // probe passed), confirmed by one login from here. Polling the port from here instead
      // would measure TCP: a connection docker-proxy accepts while the container's network is
      // still coming up waits out a SYN retransmit (1 s), which the bare side, probing only
      // after start() returned, never meets.
      let t0 = performance.now();
      const d = await c.createDatabase({ name: `${type}-${i}`, type });
      for (;;) {
        const now = await c.database(d.id);
        if (now.status === 'running') break;
        if (now.status !== 'provisioning') throw new Error(`database ${now.status}: ${now.last_error}`);
        await new Promise((r) => setTimeout(r, 10));
      }
      await probeFor(type, d.host_port, (await c.connectionString(d.id)).password)();
      results[type]!.svc.push(performance.now() - t0);
      await c.deleteDatabase(d.id);

      // Bare Engine API: volume + create + start of the same image, the same probe.
      const k = kinds[type];
      const hostPort = await freePort();
      const volume = `svc-bench-db-${type}-${i}`;
      t0 = performance.now();
      await docker.createVolume({ Name: volume });
      const ct = await docker.createContainer({
        Image: k.image,
        Env: k.env,
        ...(k.cmd ? { Cmd: k.cmd } : {}),
        User: k.user,
        ExposedPorts: { [`${k.port}/tcp`]: {} },
        HostConfig: {
          NetworkMode: 'svc-bench-db',
          Runtime: runtime,
          CapDrop: ['ALL'],
          SecurityOpt: ['no-new-privileges'],
          PidsLimit: limits.pids,
          Memory: limits.memoryMb * 1024 * 1024,
          MemorySwap: limits.memoryMb * 1024 * 1024,
          ...engineCpuLimit(limits.cpus),
          Mounts: [{ Type: 'volume', Source: volume, Target: k.dataDir }],
          PortBindings: { [`${k.port}/tcp`]: [{ HostIp: '127.0.0.1', HostPort: String(hostPort) }] },
        },
      });
      await ct.start();
      await untilProbe(probeFor(type, hostPort, PASSWORD));
      results[type]!.bare.push(performance.now() - t0);
      await ct.remove({ force: true, v: true });
      await docker.getVolume(volume).remove();
      process.stderr.write(`bench-db: round ${i + 1}/${ROUNDS} ${type}: svc ${Math.round(results[type]!.svc.at(-1)!)} ms, bare ${Math.round(results[type]!.bare.at(-1)!)} ms\n`);
    }
  }
} finally {
  await svcd.stop();
  await removeTenantWorkloads([reg.tenant_id]);
  await docker.getNetwork('svc-bench-db').remove().catch(() => {});
  rmSync(dir, { recursive: true, force: true });
}
console.log(`\n| create -> connection accepted (${runtime}), median of ${ROUNDS} | svc ms | bare ms | ratio (target at most 1.2) |\n|---|---|---|---|`);
for (const type of ['postgres', 'redis'] as const) {
  const s = median(results[type]!.svc);
  const b = median(results[type]!.bare);
  console.log(`| ${type} | ${Math.round(s)} | ${Math.round(b)} | ${(s / b).toFixed(2)} |`);
}
if (SMOKE) {
  smokeVerdict('bench-db', (['postgres', 'redis'] as const).flatMap((type) => [
    ...sampleProblems(`svc ${type}`, results[type]?.svc ?? [], ROUNDS),
    ...sampleProblems(`bare ${type}`, results[type]?.bare ?? [], ROUNDS),
  ]));
}
