// Two svcd on one PostgreSQL store, tested as a pair (Workloads as desired state, item 6): what
// one of them starts, the other can stop. Each has its own data dir; they share the store and the
// master key, as two svcd of one installation do.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import type { Deployment, SvcClient } from '@svc/client';
import { INTERRUPTED, workloadName } from '../src/services/deployer.js';
import { databaseWorkloadName } from '../src/databases/databases.js';
import { probePostgres } from '../src/databases/probes.js';
import type { Store } from '../src/store/index.js';
import type { WorkloadRow } from '../src/store/schema.js';
import { POSTGRES_IMAGE, REDIS_IMAGE, ensureDbImages } from './operator-images.js';
import { DATABASE_TEST_PLAN, PG_ADMIN_URL, freshPgDatabase, newTenant, startServer, waitFor } from './harness.js';
import { SLEEPER_IMAGE, docker, ensureTestImages, removeTenantWorkloads } from './images.js';
import { killableSvcd } from './svcd-process.js';

const MASTER_KEY = 'b'.repeat(64);

async function containerState(name: string): Promise<string | null> {
  return docker.getContainer(name).inspect().then((c) => c.State.Status, () => null);
}

/** The service's first deployment once it runs with its container up (on whichever svcd). */
async function deployRunning(client: SvcClient, serviceId: string): Promise<Deployment> {
  const [dep] = await client.deployments(serviceId);
  assert.ok(dep);
  await waitFor('the deploy to run with its container', async () => {
    const now = (await client.deployments(serviceId)).find((d) => d.id === dep.id);
    return now?.status === 'running' && (await containerState(workloadName(serviceId))) === 'running' ? true : undefined;
  }, 60_000);
  return dep;
}

/**
 * Watches a dead holder's lease on a workload until just before it lapses: nobody takes the row
 * over meanwhile (B's controller, running, must wait it out). Read from the store, not from the
 * time B took to start or to be seen taking over.
 */
async function untilLapse(store: Store, held: WorkloadRow): Promise<void> {
  const holder = held.lease_holder;
  const until = held.lease_expires_at_ms ?? 0;
  assert.ok(holder !== null && until > 0, 'a lease to watch');
  while (Date.now() < until - 300) {
    const now = await store.workloads.findById(held.id);
    assert.equal(now?.lease_holder, holder, `taken over ${String(until - Date.now())} ms before the dead holder's lease lapsed`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

/** A's claim on a workload (--workload-lease-seconds): B carries on this long after A died. */
const LEASE_S = 8;
const WORKLOAD_LEASE_MS = LEASE_S * 1000;
/** A renews every third of a lease: its last renewal lapses at least two thirds of one after it died. */
const LAPSE_AT_LEAST_MS = Math.floor((WORKLOAD_LEASE_MS * 2) / 3) - 500;

describe('two svcd on one PostgreSQL store', { skip: !PG_ADMIN_URL && 'needs PostgreSQL (make test starts it)' }, () => {
  test('a deploy running on one svcd is cancelled through the other: the first stops waiting, removes its container, the service says so', async () => {
    await ensureTestImages();
    const db = await freshPgDatabase();
    // A would wait a minute for a container that never listens; the cancel must not wait for that.
    const a = await startServer({ realTime: true, config: { databaseUrl: db.url, masterKey: MASTER_KEY }, overrides: { readyTimeoutMs: 60_000 } });
    const b = await startServer({ realTime: true, config: { databaseUrl: db.url, masterKey: MASTER_KEY } });
    let tenant = '';
    try {
      const x = await newTenant(a);
      tenant = x.id;
      const s = await x.client.createService({ name: 'never-ready', image: SLEEPER_IMAGE });
      // Running on A, with its container up (the same probe that must see it gone below).
      const dep = await deployRunning(x.client, s.id);
      // Whichever controller claimed the workload runs the deploy; the cancel goes through the other.
      const holder = (await a.deps.store.workloads.find('service', s.id))?.lease_holder;
      const [runner, other] = holder === a.deps.holder ? [a, b] : [b, a];
      assert.equal(holder, runner.deps.holder, 'one of them holds the workload while it deploys');

      const startedAt = Date.now();
      const cancelled = await other.client.withKey(x.key).cancelDeployment(s.id, dep.id);
      assert.equal(cancelled.status, 'cancelled');
      await waitFor('the runner to stop the deploy and remove its container', async () => {
        const w = await runner.deps.store.workloads.find('service', s.id);
        return w?.lease_holder === null && (await containerState(workloadName(s.id))) === null ? true : undefined;
      }, 15_000);
      assert.ok(Date.now() - startedAt < 10_000, 'well before the minute the runner would have waited');

      const service = await a.client.withKey(x.key).service(s.id);
      assert.equal(service.status, 'failed');
      assert.match(service.last_error ?? '', /cancelled/);
      const after = (await x.client.deployments(s.id)).find((d) => d.id === dep.id);
      assert.ok(after);
      assert.equal(after.status, 'cancelled');
      assert.match(after.last_error ?? '', /cancelled by the tenant/);
      const entries = (await x.client.activity({ limit: 100 })).filter((e) => e.action === 'deployment.cancelled');
      assert.equal(entries.length, 1, 'recorded once');
    } finally {
      await a.close();
      await b.close();
      await removeTenantWorkloads([tenant]);
      await db.drop();
    }
  });

  test('A is killed in the middle of a deploy: B takes the deployment over once its lease lapses and finishes it', async () => {
    await ensureTestImages();
    const db = await freshPgDatabase();
    // A is a process of its own (SIGKILL); B runs in this one.
    const a = await killableSvcd('takeover-a', ['--database-url', db.url, '--workload-lease-seconds', String(LEASE_S)], { SVC_MASTER_KEY: MASTER_KEY });
    let b: Awaited<ReturnType<typeof startServer>> | null = null;
    try {
      // An image that never listens: A's deploy waits for readiness until A dies.
      const s = await a.client.createService({ name: 'taken-over', image: SLEEPER_IMAGE });
      const first = await deployRunning(a.client, s.id);
      // Taken before the kill: A's death comes no earlier, so the time to the takeover is not undercounted.
      const killedAt = Date.now();
      await a.kill();
      // B comes up after A died (were it up before, its controller might claim the row first).
      b = await startServer({ realTime: true, config: { databaseUrl: db.url, masterKey: MASTER_KEY, workloadLeaseMs: WORKLOAD_LEASE_MS }, overrides: { readyTimeoutMs: 3_000 } });
      const held = await b.deps.store.workloads.find('service', s.id);
      assert.ok(held?.lease_holder, "A's lease is on the workload");
      await untilLapse(b.deps.store, held);

      // B's controller takes the workload over once A's lease lapses.
      const c = b.client.withKey(a.apiKey);
      const resumed = await waitFor('B to take the deployment over', async () => {
        const list = await c.deployments(s.id);
        const interrupted = list.find((d) => d.id === first.id)?.status === 'failed';
        return interrupted ? list.find((d) => d.reason === 'resume') : undefined;
      }, WORKLOAD_LEASE_MS + 30_000);
      const tookMs = Date.now() - killedAt;
      assert.ok(tookMs >= LAPSE_AT_LEAST_MS, `not before A's lease lapsed (${tookMs} ms)`);
      const interrupted = (await c.deployments(s.id)).find((d) => d.id === first.id);
      assert.equal(interrupted?.last_error, INTERRUPTED);

      // B runs the new deployment to its end: the image never listens, so it fails as A's would have.
      const done = await waitFor('B to finish the deployment', async () => {
        const now = (await c.deployments(s.id)).find((d) => d.id === resumed.id);
        return now && now.status !== 'pending' && now.status !== 'running' ? now : undefined;
      }, 60_000);
      assert.equal(done.status, 'failed');
      assert.match(done.last_error ?? '', /not ready within \d+ s: no connection accepted on port 8000/);
      // The deployment's record first, then the container goes, then the service says so.
      const service = await waitFor('the service to leave deploying', async () => {
        const now = await c.service(s.id);
        return now.status === 'deploying' ? undefined : now;
      }, 30_000);
      assert.equal(service.status, 'failed');
      assert.equal(await containerState(workloadName(s.id)), null, "B removed the container A started and the one it started");
    } finally {
      await b?.close();
      await a.close();
      await db.drop();
    }
  });

  test('A is killed while it provisions a database: B waits out its lease on the workload, then provisions it to running', async () => {
    await ensureTestImages();
    await ensureDbImages();
    const db = await freshPgDatabase();
    const a = await killableSvcd('provision-a', ['--database-url', db.url, '--postgres-image', POSTGRES_IMAGE, '--redis-image', REDIS_IMAGE, '--database-ports', '23100-23199', '--workload-lease-seconds', String(LEASE_S)], { SVC_MASTER_KEY: MASTER_KEY }, DATABASE_TEST_PLAN);
    let b: Awaited<ReturnType<typeof startServer>> | null = null;
    try {
      const created = await a.client.createDatabase({ name: 'handed-over', type: 'postgres' });
      // A has claimed the workload and started its container (postgres needs seconds to answer).
      await waitFor('A to start the container', async () => ((await containerState(databaseWorkloadName(created.id))) !== null ? true : undefined), 60_000);
      // Taken before the kill: A's death comes no earlier, so the time to the takeover is not undercounted.
      const killedAt = Date.now();
      await a.kill();
      // B comes up after A died (were it up before, its controller might claim the row first).
      b = await startServer({ realTime: true, config: { databaseUrl: db.url, masterKey: MASTER_KEY, databaseImages: { postgres: POSTGRES_IMAGE, redis: REDIS_IMAGE }, databasePorts: { from: 23100, to: 23199 }, workloadLeaseMs: WORKLOAD_LEASE_MS } });
      const held = await b.deps.store.workloads.find('database', created.id);
      assert.ok(held?.lease_holder, "A's lease is on the row");
      await untilLapse(b.deps.store, held);
      const c = b.client.withKey(a.apiKey);
      let last = '';
      const done = await waitFor('B to provision it', async () => {
        const now = await c.database(created.id);
        last = `${now.status}: ${now.last_error ?? ''}`;
        return now.status === 'running' ? now : undefined;
      }, WORKLOAD_LEASE_MS + 120_000).catch((err: unknown) => assert.fail(`${String(err)} (last seen ${last})`));
      assert.equal(done.status, 'running');
      const w = await b.deps.store.workloads.find('database', created.id);
      assert.ok(w);
      assert.equal(w.observed_generation, w.generation);
      assert.ok(Date.now() - killedAt >= LAPSE_AT_LEAST_MS, "not before A's lease lapsed");
      // The container B runs is the one the record names, and it answers a real login.
      const conn = await c.connectionString(created.id);
      assert.equal((await docker.getContainer(databaseWorkloadName(created.id)).inspect()).Id, (await b.deps.store.databases.findAny(created.id))?.container_id);
      const url = new URL(conn.connection_string);
      await probePostgres({ host: url.hostname, port: Number(url.port), username: decodeURIComponent(url.username), password: decodeURIComponent(url.password), database: url.pathname.slice(1) });
    } finally {
      await b?.close();
      await a.close();
      await removeTenantWorkloads([a.tenantId]);
      await db.drop();
    }
  });
});
