// Two svcd on one PostgreSQL store and one (in-memory) engine: the rules of taking work over from
// a svcd that died, where timing must be controlled to the millisecond. svcd A stalls in the
// middle of a request (its engine call never returns, its timers never fire: a dead process, as
// far as the store can tell); B's controller must wait out A's lease, then finish A's work.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { environmentWorkloadName } from '../src/environments/environments.js';
import { WORKLOAD_LEASE_MS } from '../src/workloads/controller.js';
import type { Runtime } from '../src/runtime/index.js';
import { PG_ADMIN_URL, freshPgDatabase, newTenant, startServer, testConfig, waitFor, type TestServer } from './harness.js';
import { memoryRuntime } from './memory-runtime.js';

const MASTER_KEY = 'd'.repeat(64);

/**
 * Two real-time svcd on a fresh store and one memory engine, a tenant of A's, and its service
 * whose deploy A has begun: its workload listens 1.5 s after its start, so the deploy is still
 * waiting for it when this resolves.
 */
async function deployingOnA() {
  const db = await freshPgDatabase();
  const image = '127.0.0.1:5999/memory/slow-start:1';
  const engine = memoryRuntime({ [image]: { serves: true, startsAfterMs: 1_500 } });
  const config = { databaseUrl: db.url, masterKey: MASTER_KEY };
  const a = await startServer({ config, realTime: true, overrides: { runtime: engine.runtime } });
  const b = await startServer({ config, realTime: true, overrides: { runtime: engine.runtime } });
  const close = async () => {
    await a.close();
    await b.close();
    await engine.driver.close();
    await db.drop();
  };
  try {
    const x = await newTenant(a);
    const s = await x.client.createService({ name: 'web', image, port: 8000 });
    const started = await waitFor('A to start the container', async () => (await engine.driver.list({ tenantId: x.id }))[0]);
    return { engine, a, b, x, s, started, close };
  } catch (err) {
    await close();
    throw err;
  }
}

describe('two svcd on one PostgreSQL store and one memory engine', { skip: !PG_ADMIN_URL && 'needs PostgreSQL (make test starts it)' }, () => {
  test("A stalls while its controller creates an environment: B leaves it while A's lease lives, then finishes it; A's create answers with it; A removes nothing of B's", async () => {
    const db = await freshPgDatabase();
    const images = Object.fromEntries(Object.values(testConfig().environmentImages).map((image) => [image, {}]));
    const engine = memoryRuntime(images);
    // A's engine: an environment's start never returns, until it is aborted (or the test ends).
    let failStalled!: (err: Error) => void;
    const stalled = new Promise<never>((_, reject) => (failStalled = reject));
    let aStarted = false;
    const stall = (signal: AbortSignal) =>
      Promise.race([stalled, new Promise<never>((_, reject) => signal.addEventListener('abort', () => reject(signal.reason as Error), { once: true }))]);
    const stalling: Runtime = { ...engine.runtime, apply: (r) => (r.spec.kind === 'environment' ? ((aStarted = true), stall(r.signal)) : engine.runtime.apply(r)) };
    const config = { databaseUrl: db.url, masterKey: MASTER_KEY };
    const a = await startServer({ config, overrides: { runtime: stalling } });
    // B starts once A's controller has the row: any controller may claim it, and this test is
    // about one that dies holding it.
    let started: TestServer | undefined;
    try {
      const x = await newTenant(a);
      const creating = x.client.raw<{ id: string; status: string }>('POST', '/v1/environments', { body: { name: 'dev', template_id: 'default' } });
      const row = await waitFor('the record', async () => (await a.deps.store.environments.listForTenant(x.id)).find((e) => e.status === 'creating'));
      await waitFor("A's controller to be starting it", () => Promise.resolve(aStarted || undefined));
      const b = await startServer({ config, overrides: { runtime: engine.runtime } });
      started = b;
      // One time on both (registering moved A's clock on): B reads A's lease as A wrote it.
      b.clock.advance(a.clock.now() - b.clock.now());

      // While A's lease lives (B's clock where A's was when it began), B leaves it alone.
      await b.deps.workloads.reconcile();
      await b.deps.workloads.passNow();
      assert.equal(b.deps.workloads.idle(), true, 'B claimed nothing');
      assert.equal((await b.deps.store.environments.findAny(row.id))?.status, 'creating', 'not taken while its creator may be alive');
      assert.deepEqual(await engine.driver.list({ tenantId: x.id }), []);

      // A never renews (it is dead): past its lease, B's controller finishes the creation.
      b.clock.advance(WORKLOAD_LEASE_MS + 1_000);
      b.deps.workloads.kick();
      const env = await waitFor('B to finish it', async () => {
        const e = await b.client.withKey(x.key).environment(row.id);
        return e.status === 'running' ? e : undefined;
      });
      assert.equal(env.status, 'running');
      const running = (await engine.driver.list({ tenantId: x.id })).filter((w) => w.state === 'running');
      assert.deepEqual(running.map((w) => w.name), [environmentWorkloadName(row.id)]);
      const created = (await b.client.withKey(x.key).activity({ limit: 50 })).filter((e) => e.action === 'environment.created');
      assert.equal(created.length, 1);

      // A's create, waiting on the store, answers with the environment B ran; A's timers run
      // again: its renewal finds the lease lost and its start is aborted, leaving B's alone.
      const answered = await creating;
      assert.equal(answered.status, 201);
      assert.equal(answered.body.status, 'running');
      a.clock.advance(10_000);
      await waitFor("A's controller to let go", () => Promise.resolve(a.deps.workloads.idle() || undefined));
      assert.equal((await b.client.withKey(x.key).environment(row.id)).status, 'running');
      assert.equal((await engine.driver.list({ tenantId: x.id })).filter((w) => w.state === 'running').length, 1, "A removed nothing of B's");
    } finally {
      failStalled(new Error('the test is over'));
      await a.close();
      await started?.close();
      await engine.driver.close();
      await db.drop();
    }
  });

  test("A, back while B is in the middle of finishing its creation, gives up without undoing it; the create on A answers once B has finished", async () => {
    const db = await freshPgDatabase();
    const images = Object.fromEntries(Object.values(testConfig().environmentImages).map((image) => [image, {}]));
    const engine = memoryRuntime(images);
    const gate = () => {
      let open!: () => void;
      const opened = new Promise<void>((resolve) => (open = resolve));
      return { open, opened };
    };
    const aGate = gate();
    const bGate = gate();
    let aStarted = false;
    let bStarted = false;
    const waitThen = (g: { opened: Promise<void> }, r: Parameters<Runtime['apply']>[0]) =>
      Promise.race([g.opened, new Promise<never>((_, reject) => r.signal.addEventListener('abort', () => reject(r.signal.reason as Error), { once: true }))]).then(() => engine.runtime.apply(r));
    const aRuntime: Runtime = { ...engine.runtime, apply: (r) => (r.spec.kind === 'environment' ? ((aStarted = true), waitThen(aGate, r)) : engine.runtime.apply(r)) };
    const bRuntime: Runtime = { ...engine.runtime, apply: (r) => (r.spec.kind === 'environment' ? ((bStarted = true), waitThen(bGate, r)) : engine.runtime.apply(r)) };
    const config = { databaseUrl: db.url, masterKey: MASTER_KEY };
    const a = await startServer({ config, overrides: { runtime: aRuntime } });
    let started: TestServer | undefined;
    try {
      const x = await newTenant(a);
      const creating = x.client.raw<{ status: string }>('POST', '/v1/environments', { body: { name: 'dev', template_id: 'default' } });
      const row = await waitFor('the record', async () => (await a.deps.store.environments.listForTenant(x.id)).find((e) => e.status === 'creating'));
      await waitFor("A's controller to be starting it", () => Promise.resolve(aStarted || undefined));
      const b = await startServer({ config, overrides: { runtime: bRuntime } });
      started = b;
      b.clock.advance(a.clock.now() - b.clock.now());
      b.clock.advance(WORKLOAD_LEASE_MS + 1_000);
      b.deps.workloads.kick();
      await waitFor('B to be starting the container', () => Promise.resolve(bStarted || undefined));
      // A comes back now: its renewal finds the lease lost, its start is aborted; its create waits on.
      a.clock.advance(10_000);
      await waitFor("A's controller to let go", () => Promise.resolve(a.deps.workloads.idle() || undefined));
      assert.equal((await b.deps.store.environments.findAny(row.id))?.status, 'creating', "A's create, still waiting, undid nothing: the record is B's to finish");
      bGate.open();
      const answered = await creating;
      assert.equal(answered.status, 201);
      assert.equal(answered.body.status, 'running');
      assert.equal((await b.client.withKey(x.key).environment(row.id)).status, 'running');
      assert.equal((await engine.driver.list({ tenantId: x.id })).filter((w) => w.state === 'running').length, 1);
    } finally {
      aGate.open();
      bGate.open();
      await a.close();
      await started?.close();
      await engine.driver.close();
      await db.drop();
    }
  });

  test("a service's ?wait on B follows the deploy A carries out: held while it deploys, answered soon after, as it is then", async () => {
    const { a, b, x, s, close } = await deployingOnA();
    try {
      // A's controller holds the deploy: B's wait learns its end from the store alone.
      assert.equal((await a.deps.store.workloads.find('service', s.id))?.lease_holder, a.deps.holder);
      assert.equal(b.deps.workloads.idle(), true);
      const asked = performance.now();
      const answer = b.client
        .withKey(x.key)
        .service(s.id, { wait: 10 })
        .then((v) => ({ v, at: performance.now() }));
      // When the store first reads running (polled here every 10 ms).
      let ranAt = 0;
      await waitFor('the deploy to end', async () => {
        const row = await a.deps.store.services.findAny(s.id);
        if (row?.status === 'deploying') return undefined;
        ranAt = performance.now();
        return row;
      });
      const { v, at } = await answer;
      assert.equal(v.status, 'running', 'held until the deploy ended (it read deploying before)');
      assert.ok(ranAt - asked > 500, `the wait was held while A deployed (${Math.round(ranAt - asked)} ms)`);
      // B reads the store every 20 ms at first, doubling up to every 250 ms.
      assert.ok(at - ranAt < 1_000, `answered ${Math.round(at - ranAt)} ms after the deploy ended, not at the wait's end (10 s)`);
      assert.equal(b.deps.workloads.idle(), true, 'B took no part in the deploy');
    } finally {
      await close();
    }
  });

  test("both reconcile at once while A deploys: neither removes or replaces the container A's deploy started", async () => {
    const { engine, a, b, x, s, started, close } = await deployingOnA();
    try {
      // Their reconciles, at once and without their job lease: each must hold on its own.
      await Promise.all([a.deps.workloads.reconcile(), b.deps.workloads.reconcile()]);
      assert.deepEqual((await engine.driver.list({ tenantId: x.id })).map((w) => w.id), [started.id], 'the one container A started, untouched');
      const running = await waitFor('the deploy to finish', async () => {
        const now = await x.client.service(s.id);
        return now.status === 'deploying' ? undefined : now;
      });
      assert.equal(running.status, 'running');
      assert.equal((await a.deps.store.services.findAny(s.id))?.container_id, started.id);
      const deployments = await x.client.deployments(s.id);
      assert.deepEqual(deployments.map((d) => [d.reason, d.status]), [['create', 'succeeded']], 'no second deployment was started by either reconcile');
    } finally {
      await close();
    }
  });
});
