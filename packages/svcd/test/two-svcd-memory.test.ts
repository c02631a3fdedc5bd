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
  test("A dies while it creates an environment: B's reconcile leaves it while A's lease lives, then finishes it; A's late failure removes nothing", async () => {
    const db = await freshPgDatabase();
    const images = Object.fromEntries(Object.values(testConfig().environmentImages).map((image) => [image, {}]));
    const engine = memoryRuntime(images);
    // A's engine: an environment's start never returns until the test lets it fail.
    let failStalled!: (err: Error) => void;
    const stalled = new Promise<never>((_, reject) => (failStalled = reject));
    const stalling: Runtime = { ...engine.runtime, apply: (r) => (r.spec.kind === 'environment' ? stalled : engine.runtime.apply(r)) };
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

      // A wakes up and its start fails: it answers 503, and B's environment stands.
      failStalled(new Error('the stalled start failed at last'));
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
});
