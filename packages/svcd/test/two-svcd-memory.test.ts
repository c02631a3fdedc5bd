// Two svcd on one PostgreSQL store and one (in-memory) engine: the rules of taking work over from
// a svcd that died, where timing must be controlled to the millisecond. svcd A stalls in the
// middle of a request (its engine call never returns, its timers never fire: a dead process, as
// far as the store can tell); B's reconcile must wait out A's lease, then finish A's work.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { CREATE_LEASE_MS, environmentWorkloadName } from '../src/environments/environments.js';
import type { Runtime } from '../src/runtime/index.js';
import { PG_ADMIN_URL, freshPgDatabase, newTenant, startServer, testConfig, waitFor } from './harness.js';
import { memoryRuntime } from './memory-runtime.js';

const MASTER_KEY = 'd'.repeat(64);

describe('two svcd on one PostgreSQL store and one memory engine', { skip: !PG_ADMIN_URL && 'needs PostgreSQL (make test starts it)' }, () => {
  test("A stalls while it creates an environment: B's reconcile leaves it while A's lease lives, then finishes it; A, back, removes nothing of B's", async () => {
    const db = await freshPgDatabase();
    const images = Object.fromEntries(Object.values(testConfig().environmentImages).map((image) => [image, {}]));
    const engine = memoryRuntime(images);
    // A's engine: an environment's start never returns, until it is aborted (or the test ends).
    let failStalled!: (err: Error) => void;
    const stalled = new Promise<never>((_, reject) => (failStalled = reject));
    const stall = (signal: AbortSignal) =>
      Promise.race([stalled, new Promise<never>((_, reject) => signal.addEventListener('abort', () => reject(signal.reason as Error), { once: true }))]);
    const stalling: Runtime = { ...engine.runtime, apply: (r) => (r.spec.kind === 'environment' ? stall(r.signal) : engine.runtime.apply(r)) };
    const config = { databaseUrl: db.url, masterKey: MASTER_KEY };
    const a = await startServer({ config, overrides: { runtime: stalling } });
    const b = await startServer({ config, overrides: { runtime: engine.runtime } });
    try {
      const x = await newTenant(a);
      // One time on both (registering moved A's clock on): B reads A's lease as A wrote it.
      b.clock.advance(a.clock.now() - b.clock.now());
      const creating = x.client.raw<{ error: string }>('POST', '/v1/environments', { body: { name: 'dev', template_id: 'default' } });
      const row = await waitFor('the record', async () => (await b.deps.store.environments.listForTenant(x.id)).find((e) => e.status === 'creating'));

      // While A's lease lives (B's clock where A's was when it began), B leaves it alone.
      await b.deps.environments.reconcile();
      assert.equal((await b.deps.store.environments.findAny(row.id))?.status, 'creating', 'not taken while its creator may be alive');
      assert.deepEqual(await engine.driver.list({ tenantId: x.id }), []);

      // A never renews (it is dead): past its lease, B's reconcile finishes the creation.
      b.clock.advance(CREATE_LEASE_MS + 1_000);
      await b.deps.environments.reconcile();
      const env = await b.client.withKey(x.key).environment(row.id);
      assert.equal(env.status, 'running');
      const running = (await engine.driver.list({ tenantId: x.id })).filter((w) => w.state === 'running');
      assert.deepEqual(running.map((w) => w.name), [environmentWorkloadName(row.id)]);
      const created = (await b.client.withKey(x.key).activity({ limit: 50 })).filter((e) => e.action === 'environment.created');
      assert.equal(created.length, 1);
      assert.equal(created[0]?.details.finished_by, 'reconcile');

      // A's timers run again: its renewal finds the creation lost, its start is aborted, and it
      // answers 503; its undo is fenced by the lease it lost, so B's environment stands.
      a.clock.advance(10_000);
      assert.equal((await creating).status, 503);
      assert.equal((await b.client.withKey(x.key).environment(row.id)).status, 'running');
      assert.equal((await engine.driver.list({ tenantId: x.id })).filter((w) => w.state === 'running').length, 1, "A removed nothing of B's");
    } finally {
      failStalled(new Error('the test is over'));
      await a.close();
      await b.close();
      await engine.driver.close();
      await db.drop();
    }
  });

  test("A, back while B is in the middle of finishing its creation, gives up without undoing it: its undo is fenced by the lease B holds", async () => {
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
    let bStarted = false;
    const waitThen = (g: { opened: Promise<void> }, r: Parameters<Runtime['apply']>[0]) =>
      Promise.race([g.opened, new Promise<never>((_, reject) => r.signal.addEventListener('abort', () => reject(r.signal.reason as Error), { once: true }))]).then(() => engine.runtime.apply(r));
    const aRuntime: Runtime = { ...engine.runtime, apply: (r) => (r.spec.kind === 'environment' ? waitThen(aGate, r) : engine.runtime.apply(r)) };
    const bRuntime: Runtime = { ...engine.runtime, apply: (r) => (r.spec.kind === 'environment' ? ((bStarted = true), waitThen(bGate, r)) : engine.runtime.apply(r)) };
    const config = { databaseUrl: db.url, masterKey: MASTER_KEY };
    const a = await startServer({ config, overrides: { runtime: aRuntime } });
    const b = await startServer({ config, overrides: { runtime: bRuntime } });
    try {
      const x = await newTenant(a);
      b.clock.advance(a.clock.now() - b.clock.now());
      const creating = x.client.raw('POST', '/v1/environments', { body: { name: 'dev', template_id: 'default' } });
      const row = await waitFor('the record', async () => (await b.deps.store.environments.listForTenant(x.id)).find((e) => e.status === 'creating'));
      b.clock.advance(CREATE_LEASE_MS + 1_000);
      const finishing = b.deps.environments.reconcile();
      await waitFor('B to be starting the container', () => Promise.resolve(bStarted || undefined));
      // A comes back now: its renewal finds the creation lost, its start is aborted, it answers 503.
      a.clock.advance(10_000);
      assert.equal((await creating).status, 503);
      assert.equal((await b.deps.store.environments.findAny(row.id))?.status, 'creating', "A's undo was refused: the record is B's to finish");
      bGate.open();
      await finishing;
      assert.equal((await b.client.withKey(x.key).environment(row.id)).status, 'running');
      assert.equal((await engine.driver.list({ tenantId: x.id })).filter((w) => w.state === 'running').length, 1);
    } finally {
      aGate.open();
      bGate.open();
      await a.close();
      await b.close();
      await engine.driver.close();
      await db.drop();
    }
  });

  test("both reconcile at once while A deploys: neither removes or replaces the container A's deploy started", async () => {
    const db = await freshPgDatabase();
    const image = '127.0.0.1:5999/memory/slow-start:1';
    // Listens 1.5 s after its start: A's deploy is waiting for it while both reconcile.
    const engine = memoryRuntime({ [image]: { serves: true, startsAfterMs: 1_500 } });
    const config = { databaseUrl: db.url, masterKey: MASTER_KEY };
    const a = await startServer({ config, realTime: true, overrides: { runtime: engine.runtime } });
    const b = await startServer({ config, realTime: true, overrides: { runtime: engine.runtime } });
    try {
      const x = await newTenant(a);
      const s = await x.client.createService({ name: 'web', image, port: 8000 });
      const started = await waitFor('A to start the container', async () => (await engine.driver.list({ tenantId: x.id }))[0]);
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
      await a.close();
      await b.close();
      await engine.driver.close();
      await db.drop();
    }
  });
});
