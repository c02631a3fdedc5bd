// Environments and the warm pool as workloads of the controller, through the API on the
// in-memory workload driver: what each request writes, what the controller observes, and what is
// left on the "engine" (environments.test.ts tests the same on the real engine, end to end).
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { MemoryImage } from '../src/runtime/memory/memory-driver.js';
import { NodeUnavailableError, RuntimeUnavailableError, type Runtime } from '../src/runtime/index.js';
import { environmentWorkloadName } from '../src/environments/environments.js';
import { AGENT_PORT } from '../src/environments/agent.js';
import { KEPT_IDLE_S } from '../src/environments/warm-pool.js';
import { createServer } from 'node:net';
import { eachStore, newTenant, startServer, waitFor, type TestServer } from './harness.js';
import { memoryRuntime } from './memory-runtime.js';

const REGISTRY = '127.0.0.1:5999/memory';
const TEMPLATE = `${REGISTRY}/env:1`;
/** The `node` template here: an image no registry has (an operator's typo in --env-image-node). */
const MISSING = `${REGISTRY}/env-missing:1`;
const IMAGES: Record<string, MemoryImage> = { [TEMPLATE]: {} };
/** A service's image that serves its port (it takes the one published port of a test). */
const SERVING = `${REGISTRY}/serving:1`;
const environmentImages = { default: TEMPLATE, node: MISSING, python: TEMPLATE, go: TEMPLATE };

/**
 * waitFor, moving svcd's clock on by a second each time it looks: the warm pool's refill job
 * (every 5 s), the controller's passes and backoffs take their turns while the test waits for
 * what they do, in steps shorter than any lease's renewal, and never under a request.
 */
function waitAdvancing<T>(t: TestServer, what: string, fn: () => Promise<T | undefined | false>, ms?: number): Promise<T> {
  return waitFor(what, () => {
    t.clock.advance(1_000);
    return fn();
  }, ms);
}

eachStore((kind) => {
  describe(`environments as workloads on the memory driver (${kind})`, () => {
    let t: TestServer;
    let mem: ReturnType<typeof memoryRuntime>;

    /** While set, the "engine" does not answer: its info and a start of a container fail as a stopped dockerd's would. */
    let engineAway = false;
    /** While set, no node of the "cluster" can run the environment: runs and starts fail as a swarm's do (NodeUnavailableError). */
    let nodeAway: string | null = null;

    before(async () => {
      mem = memoryRuntime(IMAGES);
      const away = () => Promise.reject(new RuntimeUnavailableError('container engine unavailable'));
      const nodeGone = (why: string) => Promise.reject(new NodeUnavailableError(why));
      const runtime: Runtime = {
        ...mem.runtime,
        info: () => (engineAway ? away() : mem.runtime.info()),
        start: (ref) => (engineAway ? away() : nodeAway !== null ? nodeGone(nodeAway) : mem.runtime.start(ref)),
        apply: (request) => (nodeAway !== null ? nodeGone(nodeAway) : mem.runtime.apply(request)),
      };
      t = await startServer({ store: kind, config: { environmentImages }, overrides: { runtime } });
    });
    after(async () => {
      await t.close();
      await mem.driver.close();
    });

    test('create waits for the controller; stop keeps the container, start runs the same one again; delete removes container, workspace and row', async () => {
      const a = await newTenant(t);
      const env = await a.client.createEnvironment({ name: 'dev', template_id: 'default' });
      assert.equal(env.status, 'running');
      const name = environmentWorkloadName(env.id);
      const w = await t.deps.store.workloads.find('environment', env.id);
      const [running] = await mem.driver.list({ tenantId: a.id });
      assert.equal(running?.name, name);
      assert.deepEqual(w && [w.id, w.desired_state, w.generation, w.observed_generation, w.observed_state, w.driver_ref], [name, 'running', 1, 1, 'running', running.id]);
      assert.equal((await t.deps.store.environments.findAny(env.id))?.container_id, running.id);
      assert.equal((await a.client.activity({ resource_type: 'environment' })).filter((e) => e.action === 'environment.created').length, 1);

      const stopped = await a.client.stopEnvironment(env.id);
      assert.equal(stopped.status, 'stopped');
      assert.deepEqual((await mem.driver.list({ tenantId: a.id })).map((c) => [c.id, c.state]), [[running.id, 'exited']], 'stopped, not removed');
      assert.deepEqual((await t.deps.store.workloads.find('environment', env.id))?.observed_state, 'stopped');

      const started = await a.client.startEnvironment(env.id);
      assert.equal(started.status, 'running');
      assert.deepEqual((await mem.driver.list({ tenantId: a.id })).map((c) => [c.id, c.state]), [[running.id, 'running']], 'the same container');
      assert.equal((await a.client.exec(env.id, { command: ['true'] })).exit_code, 0);

      await a.client.deleteEnvironment(env.id);
      assert.deepEqual(await mem.driver.list({ tenantId: a.id }), []);
      assert.equal(await t.deps.store.workloads.find('environment', env.id), undefined, 'its row went once the container was removed');
    });

    test('a driver without an agent: a streamed exec runs through the driver (its output at the end), the files API is 503 and says why', async () => {
      const a = await newTenant(t);
      const env = await a.client.createEnvironment({ name: 'noagent', template_id: 'default' });
      const events = [];
      for await (const e of a.client.execStream(env.id, { command: ['echo', 'hi'] })) events.push(e);
      assert.deepEqual(events, [{ type: 'stdout', data: 'hi\n' }, { type: 'exit', exit_code: 0, truncated: false, timed_out: false, duration_ms: 0 }]);
      const files = await a.client.raw<{ error: string }>('GET', `/v1/environments/${env.id}/files/stat`, { query: { path: '/' } });
      assert.equal(files.status, 503);
      assert.match(files.body.error, /no agent/);
      // Refusals before anything: a foreign environment is 404, a stopped one 409.
      const b = await newTenant(t);
      assert.equal((await b.client.raw('POST', `/v1/environments/${env.id}/exec`, { body: { command: ['true'], stream: true } })).status, 404);
      await a.client.stopEnvironment(env.id);
      assert.equal((await a.client.raw('POST', `/v1/environments/${env.id}/exec`, { body: { command: ['true'], stream: true } })).status, 409);
      assert.equal((await a.client.raw('GET', `/v1/environments/${env.id}/files/stat`, { query: { path: '/' } })).status, 409);
    });

    test('a template whose image cannot be pulled: create answers 503 and leaves nothing (no record, container or row)', async () => {
      const a = await newTenant(t);
      const r = await a.client.raw<{ error: string }>('POST', '/v1/environments', { body: { name: 'broken', template_id: 'node' } });
      assert.equal(r.status, 503);
      assert.match(r.body.error, /could not start/);
      assert.doesNotMatch(r.body.error, /env-missing/, "the engine's words go to the log");
      assert.deepEqual(await a.client.environments(), []);
      assert.deepEqual(await mem.driver.list({ tenantId: a.id }), []);
      assert.equal((await t.deps.store.workloads.lagging(Number.MAX_SAFE_INTEGER, 100)).filter((w) => w.kind === 'environment').length, 0);
      // Nothing of it counts against the quota: two more fit.
      await a.client.createEnvironment({ name: 'one', template_id: 'default' });
      await a.client.createEnvironment({ name: 'two', template_id: 'default' });
    });

    test('a start the engine does not answer is 503 and stays stopped: nothing starts it behind the tenant\'s back later', async () => {
      const a = await newTenant(t);
      const env = await a.client.createEnvironment({ name: 'dev', template_id: 'default' });
      await a.client.stopEnvironment(env.id);
      const [c] = await mem.driver.list({ tenantId: a.id });
      assert.ok(c);
      engineAway = true;
      try {
        const r = await a.client.raw<{ error: string }>('POST', `/v1/environments/${env.id}/start`);
        assert.equal(r.status, 503);
        assert.match(r.body.error, /did not start in time/);
      } finally {
        engineAway = false;
      }
      const after = await a.client.environment(env.id);
      assert.equal(after.status, 'stopped');
      assert.match(after.last_error ?? '', /did not start in time/);
      assert.equal((await t.deps.store.workloads.find('environment', env.id))?.desired_state, 'stopped', 'asked to stay stopped');
      // The engine is back and the controller works through what is asked: the container stays down.
      t.clock.advance(60_000);
      await t.deps.workloads.passNow();
      await waitFor('the controller to be done', () => Promise.resolve(t.deps.workloads.idle() || undefined));
      assert.equal((await mem.driver.inspect(c.id))?.state, 'exited');
      assert.equal((await a.client.activity({ resource_type: 'environment' })).filter((e) => e.action === 'environment.started').length, 0, 'no start in the feed');
      // A start now runs it.
      assert.equal((await a.client.startEnvironment(env.id)).status, 'running');
      assert.equal((await a.client.activity({ resource_type: 'environment' })).filter((e) => e.action === 'environment.started').length, 1);
    });

    test("no node can take it (a cluster's): a create answers 503 at once and leaves nothing; a running one whose node is away is stopped, its last_error naming the node, and runs again once the node is back", async () => {
      const a = await newTenant(t);
      nodeAway = "no swarm node can take it now (ready, active, with svc's tenant egress rules)";
      try {
        const started = Date.now();
        const r = await a.client.raw<{ error: string }>('POST', '/v1/environments', { body: { name: 'nowhere', template_id: 'default' } });
        assert.equal(r.status, 503);
        // Not the create's whole wait (minutes) for a node to come.
        assert.ok(Date.now() - started < 20_000, String(Date.now() - started));
        assert.deepEqual(await a.client.environments(), []);
        assert.equal(await t.deps.store.workloads.find('environment', (await t.deps.store.environments.listForTenant(a.id))[0]?.id ?? 'none'), undefined);
      } finally {
        nodeAway = null;
      }
      const env = await a.client.createEnvironment({ name: 'dev', template_id: 'default' });
      const [c] = await mem.driver.list({ tenantId: a.id });
      assert.ok(c);
      nodeAway = 'swarm node node2, which holds its data, is down: it starts again there once the node is back';
      try {
        await mem.driver.stop(c.id);
        await t.deps.workloads.reconcile();
        const away = await waitFor('the environment to say its node is away', async () => {
          const now = await a.client.environment(env.id);
          return now.status === 'stopped' && now.last_error?.includes('swarm node node2') ? now : undefined;
        });
        assert.equal((await t.deps.store.environments.findAny(env.id))?.address, null, 'no address while it does not run');
        assert.equal((await t.deps.store.workloads.find('environment', env.id))?.desired_state, 'running', 'still meant to run');
        assert.equal(away.last_error, nodeAway);
      } finally {
        nodeAway = null;
      }
      // The node is back: the controller's next try runs it again, on its own.
      t.clock.advance(120_000);
      await t.deps.workloads.passNow();
      await waitFor('the environment to run again', async () => ((await a.client.environment(env.id)).status === 'running' ? true : undefined));
      assert.equal((await a.client.environment(env.id)).last_error, null);
    });

    test("a container stopped outside svc is started again by reconcile, the same container; the lease's expiry stops it for good", async () => {
      const a = await newTenant(t);
      const env = await a.client.createEnvironment({ name: 'dev', template_id: 'default' });
      const [c] = await mem.driver.list({ tenantId: a.id });
      assert.ok(c);
      await mem.driver.stop(c.id);
      await t.deps.workloads.reconcile();
      await waitFor('the controller to start it again', async () => ((await mem.driver.inspect(c.id))?.state === 'running' ? true : undefined));
      assert.equal((await a.client.environment(env.id)).status, 'running');

      // Its lease ends: the reaper stops it, and reconcile leaves it stopped.
      t.clock.advance(3600_000 + 1_000);
      await t.deps.environments.reap();
      assert.equal((await a.client.environment(env.id)).status, 'expired');
      assert.equal((await mem.driver.inspect(c.id))?.state, 'exited');
      await t.deps.workloads.reconcile();
      assert.equal((await mem.driver.inspect(c.id))?.state, 'exited', 'not started again');
    });
  });

  describe(`environments on a runtime that cannot reach them (${kind})`, () => {
    test("a swarm (its overlays not on svcd's host) without svc-init's agent: a create is 409 saying why, and writes nothing", async () => {
      const mem = memoryRuntime(IMAGES);
      const runtime: Runtime = { ...mem.runtime, capabilities: async () => ({ ...(await mem.runtime.capabilities()), addressable: false, allocatedPorts: true, agent: false }) };
      const t = await startServer({ store: kind, config: { environmentImages }, overrides: { runtime } });
      try {
        const a = await newTenant(t);
        const r = await a.client.raw<{ error: string }>('POST', '/v1/environments', { body: { name: 'dev', template_id: 'default' } });
        assert.equal(r.status, 409);
        assert.match(r.body.error, /environments are not available on this installation's runtime: svcd reaches them through svc-init's agent/);
        assert.deepEqual(await a.client.environments(), []);
        assert.deepEqual(await mem.driver.list({ tenantId: a.id }), []);
      } finally {
        await t.close();
        await mem.driver.close();
      }
    });
  });

  describe(`environments where each takes a published port (a swarm, as the memory driver plays it) (${kind})`, () => {
    test("with every port of --swarm-ports held or promised, a create is 409 saying so, and writes nothing", async () => {
      const mem = memoryRuntime({ ...IMAGES, [SERVING]: { serves: true } });
      const runtime: Runtime = { ...mem.runtime, capabilities: async () => ({ ...(await mem.runtime.capabilities()), allocatedPorts: true, setAside: false }) };
      // One port, which a service takes (promised at its creation, held from its deploy).
      const t = await startServer({ store: kind, config: { environmentImages, swarmPorts: { from: 23930, to: 23930 } }, overrides: { runtime } });
      try {
        const a = await newTenant(t);
        await a.client.createService({ name: 'web', image: SERVING, port: 8000 });
        const r = await a.client.raw<{ error: string }>('POST', '/v1/environments', { body: { name: 'dev', template_id: 'default' } });
        assert.equal(r.status, 409);
        assert.match(r.body.error, /every port of --swarm-ports is taken \(1 ports, one per service and per environment/);
        assert.deepEqual(await a.client.environments(), []);
      } finally {
        await t.close();
        await mem.driver.close();
      }
    });
  });

  describe(`an environment placed on a node without its published port now (a swarm's, as the memory driver plays it) (${kind})`, () => {
    test("its agent is not looked for at the node's own agent port (the token is never sent there): exec goes through the driver", async () => {
      const mem = memoryRuntime(IMAGES);
      // An agent is offered; the memory driver runs none, so readiness does not wait for it.
      const runtime: Runtime = {
        ...mem.runtime,
        capabilities: async () => ({ ...(await mem.runtime.capabilities()), allocatedPorts: true, agent: true, setAside: false }),
        apply: (request) => mem.runtime.apply({ ...request, ready: { ...request.ready, probe: undefined } }),
      };
      const t = await startServer({ store: kind, config: { environmentImages, swarmPorts: { from: 23940, to: 23941 } }, overrides: { runtime } });
      try {
        const a = await newTenant(t);
        const env = await a.client.createEnvironment({ name: 'dev', template_id: 'default' });
        const row = (await t.deps.store.environments.findAny(env.id)) ?? assert.fail();
        assert.ok(row.agent_token !== null && row.published_port !== null && row.address !== null, JSON.stringify(row));
        // Placed on a node, its port given back (moving into a changed range): a listener at the
        // address's own agent port counts what reaches it.
        await t.deps.store.environments.update(env.id, { node: 'node-1' });
        assert.equal(await t.deps.store.publishedPorts.release('environments', env.id, row.published_port, 0), true);
        let reached = 0;
        const listener = createServer((socket) => {
          reached += 1;
          socket.destroy();
        });
        await new Promise<void>((resolve) => listener.listen(AGENT_PORT, row.address ?? '', resolve));
        try {
          assert.equal((await a.client.exec(env.id, { command: ['true'] })).exit_code, 0);
          assert.equal(reached, 0, "nothing was sent to the node's own agent port");
        } finally {
          await new Promise((resolve) => listener.close(resolve));
        }
      } finally {
        await t.close();
        await mem.driver.close();
      }
    });
  });

  describe(`the warm pool as workloads on the memory driver (${kind})`, () => {
    let t: TestServer;
    let mem: ReturnType<typeof memoryRuntime>;

    before(async () => {
      mem = memoryRuntime(IMAGES);
      t = await startServer({ store: kind, config: { environmentImages: { ...environmentImages, node: TEMPLATE }, environmentWarmPool: 1 }, overrides: { runtime: mem.runtime } });
    });
    after(async () => {
      await t.close();
      await mem.driver.close();
    });

    test('the controller starts the pool; a create takes a ready one (its warm row goes with the claim) and the pool refills', async () => {
      // The shared pool's (a tenant no container is kept for).
      const ready = () => t.deps.store.warmPool.ready('default', TEMPLATE, 'nobody');
      const [pooled] = await waitAdvancing(t, 'the pool to fill', async () => {
        const r = await ready();
        return r.length === 1 ? r : undefined;
      });
      assert.ok(pooled);
      assert.equal(pooled.status, 'ready');
      const warm = await t.deps.store.workloads.find('warm', pooled.workload);
      assert.deepEqual(warm && [warm.observed_generation, warm.observed_state, warm.driver_ref], [1, 'running', pooled.container_id], 'observed by the controller');

      const a = await newTenant(t);
      const env = await a.client.createEnvironment({ name: 'warm', template_id: 'default' });
      assert.equal(env.status, 'running');
      assert.equal((await t.deps.store.environments.findAny(env.id))?.workload, pooled.workload);
      assert.equal(await t.deps.store.workloads.find('warm', pooled.workload), undefined, 'no longer the pool\'s');
      const w = await t.deps.store.workloads.find('environment', env.id);
      assert.deepEqual(w && [w.observed_generation, w.observed_state, w.driver_ref, (JSON.parse(w.spec) as { name: string }).name], [1, 'running', pooled.container_id, pooled.workload]);
      await waitAdvancing(t, 'the pool to refill', async () => ((await ready()).some((r) => r.workload !== pooled.workload) ? true : undefined));

      // Reconcile takes neither the waiting one nor the handed-over one for an orphan.
      await t.deps.workloads.reconcile();
      assert.equal((await mem.driver.inspect(pooled.container_id))?.state, 'running');
      assert.equal((await ready()).length, 1);

      // Its container lost (removed on the host): the controller runs a new one under the pool
      // container's name, which reconcile then leaves alone (it is the environment's, by label).
      await mem.driver.remove(pooled.container_id);
      await t.deps.workloads.reconcile();
      const again = await waitAdvancing(t, 'a new container', async () => {
        const c = await mem.driver.inspect(pooled.workload);
        return c?.state === 'running' ? c : undefined;
      });
      await waitAdvancing(t, 'the environment to be observed on it', async () => ((await t.deps.store.environments.findAny(env.id))?.container_id === again.id ? true : undefined));
      await t.deps.workloads.reconcile();
      await t.deps.workloads.reconcile();
      assert.equal((await mem.driver.inspect(pooled.workload))?.id, again.id, 'not taken for an orphan');
      assert.equal((await a.client.exec(env.id, { command: ['true'] })).exit_code, 0);

      await a.client.deleteEnvironment(env.id);
      assert.equal(await mem.driver.inspect(pooled.workload), null, 'the environment took it with it');

      // A pool container nothing owns (its hand-over's svcd died after the claim): the refill removes it.
      await mem.runtime.apply({
        spec: { name: 'svc-env-stray', image: TEMPLATE, env: {}, tenantId: '', warmPool: true, kind: 'environment', resourceId: 'svc-env-stray', limits: { memoryMb: 64, cpus: 0.1, pids: 64 }, sandbox: false },
        pull: 'missing',
        ready: { timeoutMs: 5_000, everyMs: 10, probeTimeoutMs: 1_000 },
        signal: new AbortController().signal,
      });
      await waitAdvancing(t, 'the stray to go', async () => ((await mem.driver.inspect('svc-env-stray')) === null ? true : undefined), 20_000);
      assert.equal((await ready()).length, 1, "the pool's own stay");
    });
  });

  describe(`warm containers kept for a tenant, on the memory driver (${kind})`, () => {
    let t: TestServer;
    let mem: ReturnType<typeof memoryRuntime>;
    /** Containers moved onto a tenant's network at a hand-over (tried). */
    const moved: string[] = [];
    /** While set, the move fails as an engine that went away does. */
    let engineAway = false;

    before(async () => {
      mem = memoryRuntime(IMAGES);
      const runtime: Runtime = {
        ...mem.runtime,
        assign: (ref, tenantId) => {
          moved.push(ref);
          return engineAway ? Promise.reject(new RuntimeUnavailableError('container engine unavailable')) : mem.runtime.assign(ref, tenantId);
        },
      };
      // Two shared per template; one kept in all; one not taken goes after 10 min (KEPT_IDLE_S).
      t = await startServer({ store: kind, config: { environmentImages, environmentWarmPool: 2, environmentWarmReserve: 1 }, overrides: { runtime } });
    });
    after(async () => {
      await t.close();
      await mem.driver.close();
    });

    test("a tenant that took one gets the next of the template kept on its own network: its next create moves nothing; no other tenant gets it; it goes when not taken in time, or when its tenant is suspended", async () => {
      const shared = () => t.deps.store.warmPool.ready('default', TEMPLATE, 'nobody');
      const sharedReady = () => waitAdvancing(t, 'the shared pool to fill', async () => ((await shared()).length === 2 ? true : undefined), 20_000);
      const keptFor = async (tenantId: string) => (await t.deps.store.warmPool.all()).find((r) => r.tenant_id === tenantId);
      const keptReady = (tenantId: string, not?: string) =>
        waitAdvancing(t, `a container kept for ${tenantId}`, async () => {
          const r = await keptFor(tenantId);
          return r?.status === 'kept' && r.workload !== not ? r : undefined;
        }, 20_000);
      const workloadOf = async (id: string) => (await t.deps.store.environments.findAny(id))?.workload;

      await sharedReady();
      const [a, b] = [await newTenant(t), await newTenant(t)];
      const one = await a.client.createEnvironment({ name: 'one', template_id: 'default' });
      assert.equal(moved.length, 1, 'the shared one moved onto its network');
      const kept = await keptReady(a.id);
      assert.equal(mem.driver.networkOf(kept.container_id), a.id, "started on the tenant's network");
      assert.equal((await mem.driver.inspect(kept.container_id))?.labels['svc.tenant'], 'warm-pool', "the pool's until taken");
      assert.ok(kept.address);
      // A workload of its own kind, under its tenant: an svcd of before kept ones never starts it,
      // and its removal gives the tenant's network up.
      const w = await t.deps.store.workloads.find('warm-kept', kept.workload);
      assert.deepEqual(w && [w.tenant_id, w.observed_state], [a.id, 'running']);
      assert.equal(await t.deps.store.workloads.find('warm', kept.workload), undefined, "not of the shared pool's kind");
      // An svcd of before kept ones takes `ready` rows: a kept one is never one.
      assert.equal((await t.deps.store.warmPool.all()).some((r) => r.tenant_id !== null && r.status === 'ready'), false);

      await sharedReady();
      const other = await b.client.createEnvironment({ name: 'other', template_id: 'default' });
      assert.notEqual(await workloadOf(other.id), kept.workload, 'never one kept for another tenant');
      assert.equal(await keptFor(b.id), undefined, 'one kept in all (--env-warm-reserve 1): none for b');

      const before = moved.length;
      const two = await a.client.createEnvironment({ name: 'two', template_id: 'default' });
      assert.equal(await workloadOf(two.id), kept.workload, 'the one kept for it');
      assert.equal(moved.length, before, 'no network move');
      assert.equal((await t.deps.store.environments.findAny(two.id))?.address, kept.address);
      assert.equal((await a.client.exec(two.id, { command: ['true'] })).exit_code, 0);

      // The next is kept for it again; not taken within 10 min, it goes, container and row: kept
      // a minute before (through a pass of the pool's job then), gone after.
      const next = await keptReady(a.id, kept.workload);
      t.clock.advance((KEPT_IDLE_S - 60) * 1000);
      await t.deps.warmPool.refill();
      assert.equal((await keptFor(a.id))?.workload, next.workload, 'still kept a minute before its time');
      t.clock.advance(60_000);
      await waitAdvancing(t, 'the one not taken to go', async () => ((await keptFor(a.id)) === undefined && (await mem.driver.inspect(next.container_id)) === null ? true : undefined), 30_000);

      // Kept again after a take; its tenant suspended, it goes.
      await a.client.deleteEnvironment(one.id);
      await sharedReady();
      await a.client.createEnvironment({ name: 'three', template_id: 'default' });
      const last = await keptReady(a.id);
      await a.client.suspendTenant();
      await waitAdvancing(t, "the suspended tenant's to go", async () => ((await keptFor(a.id)) === undefined && (await mem.driver.inspect(last.container_id)) === null ? true : undefined), 30_000);
    });

    test('a hand-over that fails keeps nothing for the tenant; with the engine away, one shared container is tried, not every one', async () => {
      const sharedFull = () => waitAdvancing(t, 'the shared pool to fill', async () => ((await t.deps.store.warmPool.ready('default', TEMPLATE, 'nobody')).length === 2 ? true : undefined), 20_000);
      await waitAdvancing(t, 'no container kept for anyone', async () => ((await t.deps.store.warmPool.all()).some((w) => w.tenant_id !== null) ? undefined : true), 30_000);
      await sharedFull();
      const c = await newTenant(t);
      const before = moved.length;
      engineAway = true;
      try {
        // The move fails; the controller then runs one for it (this "engine" still starts containers).
        const env = await c.client.createEnvironment({ name: 'away', template_id: 'default' });
        assert.equal(env.status, 'running');
      } finally {
        engineAway = false;
      }
      assert.equal(moved.length - before, 1, 'the next shared one is not tried while the engine is away');
      assert.equal((await t.deps.store.warmPool.all()).some((w) => w.tenant_id === c.id), false, 'nothing kept for a hand-over that did not happen');
      // The same create with the engine back keeps one (the slot was free: the check above could fail).
      await sharedFull();
      await c.client.createEnvironment({ name: 'back', template_id: 'default' });
      await waitAdvancing(t, 'one kept for the tenant', async () => ((await t.deps.store.warmPool.all()).some((w) => w.tenant_id === c.id) ? true : undefined), 20_000);
    });

    test('no more than --env-warm-reserve kept ones are started, whatever was written: a wish past it goes', async () => {
      const [d, e] = [await newTenant(t), await newTenant(t)];
      const now = Math.floor(Date.now() / 1000);
      const wish = (workload: string, tenantId: string, at: number) => ({ workload, template_id: 'python', image: TEMPLATE, container_id: '', status: 'reserved' as const, created_at: at, claimed_at: null, agent_token: null, tenant_id: tenantId, address: null });
      // What the cases before kept goes once their tenants are suspended.
      for (const w of (await t.deps.store.warmPool.all()).filter((r) => r.tenant_id !== null)) await t.deps.tenants.suspend(w.tenant_id ?? '');
      await waitAdvancing(t, 'no container kept for anyone', async () => ((await t.deps.store.warmPool.all()).some((w) => w.tenant_id !== null) ? undefined : true), 30_000);
      // Two hand-overs at once may both write one past the count (--env-warm-reserve 1 here).
      assert.equal(await t.deps.store.warmPool.keep(wish('svc-env-wish-d', d.id, now)), true);
      assert.equal(await t.deps.store.warmPool.keep(wish('svc-env-wish-e', e.id, now + 1)), true);
      const settled = await waitAdvancing(t, 'one started and the other gone', async () => {
        const rows = (await t.deps.store.warmPool.all()).filter((w) => w.tenant_id === d.id || w.tenant_id === e.id);
        return rows.length === 1 && rows[0]!.status === 'kept' ? rows : undefined;
      }, 30_000);
      assert.equal(settled[0]!.workload, 'svc-env-wish-d', 'the older wish');
    });
  });
});
