// Two svcd on one PostgreSQL store, tested as a pair (Workloads as desired state, item 6): what
// one of them starts, the other can stop. Each has its own data dir; they share the store and the
// master key, as two svcd of one installation do.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { workloadName } from '../src/services/deployer.js';
import { PG_ADMIN_URL, freshPgDatabase, newTenant, startServer, waitFor } from './harness.js';
import { SLEEPER_IMAGE, docker, ensureTestImages, removeTenantWorkloads } from './images.js';

const MASTER_KEY = 'b'.repeat(64);

async function containerState(name: string): Promise<string | null> {
  return docker.getContainer(name).inspect().then((c) => c.State.Status, () => null);
}

describe('two svcd on one PostgreSQL store', { skip: !PG_ADMIN_URL && 'needs PostgreSQL (make test starts it)' }, () => {
  test('a deploy running on A is cancelled through B: A stops waiting, removes its container, the service says so', async () => {
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
      const [dep] = await x.client.deployments(s.id);
      assert.ok(dep);
      // Running on A, with its container up (the same probe that must see it gone below).
      await waitFor('the deploy to run on A with its container', async () => {
        const now = (await x.client.deployments(s.id)).find((d) => d.id === dep.id);
        return now?.status === 'running' && (await containerState(workloadName(s.id))) === 'running' ? true : undefined;
      }, 60_000);
      assert.equal(a.deps.deployer.owns(dep.id, s.id), true, 'A runs it');
      assert.equal(b.deps.deployer.owns(dep.id, s.id), false, 'B does not');

      const cancelled = await b.client.withKey(x.key).cancelDeployment(s.id, dep.id);
      assert.equal(cancelled.status, 'cancelled');
      const startedAt = Date.now();
      await waitFor('A to stop the deploy and remove its container', async () => {
        return !a.deps.deployer.owns(dep.id, s.id) && (await containerState(workloadName(s.id))) === null ? true : undefined;
      }, 15_000);
      assert.ok(Date.now() - startedAt < 10_000, 'well before the minute A would have waited');

      const service = await a.client.withKey(x.key).service(s.id);
      assert.equal(service.status, 'failed');
      assert.match(service.last_error ?? '', /cancelled/);
      const after = (await x.client.deployments(s.id)).find((d) => d.id === dep.id);
      assert.ok(after);
      assert.equal(after.status, 'cancelled');
      assert.match(after.last_error ?? '', /cancelled by the tenant/);
      const entries = (await x.client.activity({ limit: 100 })).filter((e) => e.action === 'deployment.cancelled');
      assert.equal(entries.length, 1, 'recorded once, by B');
    } finally {
      await a.close();
      await b.close();
      await removeTenantWorkloads([tenant]);
      await db.drop();
    }
  });
});
