// Deploy, cancel and crash rules through the API on the in-memory workload driver: the same
// deployer, crash handler and store as on the engine, with workloads that start in milliseconds
// (the driver is held to the Docker driver's contract by driver-conformance.ts). The engine-backed
// suites (services.test.ts) keep testing the same rules end to end.
import assert from 'node:assert/strict';
import { request } from 'node:http';
import { gzipSync } from 'node:zlib';
import { after, before, describe, test } from 'node:test';
import type { MemoryImage } from '../src/runtime/memory/memory-driver.js';
import type { SvcClient } from '@svc/client';
import { WAIT_MAX_S } from '@svc/contract/limits';
import { DEPLOY_DEADLINE_MS, workloadName } from '../src/services/deployer.js';
import { WAITS_PER_TENANT } from '../src/sessions/held-waits.js';
import { PORT_REST_S } from '../src/provisioning/published-ports.js';
import { LABELS, isSetAside, type Runtime } from '../src/runtime/index.js';
import { tcpAccepts } from '../src/runtime/ready-wait.js';
import { eachStore, newTenant, startServer, waitFor, type TestServer } from './harness.js';
import { memoryRuntime } from './memory-runtime.js';
import { ManualClock } from './manual-clock.js';
import { tarOf } from './archive-fixtures.js';
import { settled } from './service-fixtures.js';

const REGISTRY = '127.0.0.1:5999/memory';
const SERVING = `${REGISTRY}/serving:1`;
const EXITING = `${REGISTRY}/exiting:1`;
const SLOW = `${REGISTRY}/slow:1`;
const CRASHY = `${REGISTRY}/crashy:1`;
const LATE = `${REGISTRY}/late:1`;
const IMAGES: Record<string, MemoryImage> = {
  [SERVING]: { serves: true, output: 'serving' },
  [EXITING]: { exitsAfterMs: 0, exitCode: 7, output: 'giving up' },
  // Listens only after an hour: its deploy is still waiting when the test cancels it.
  [SLOW]: { serves: true, startsAfterMs: 3_600_000 },
  // Ready at once, then exits with code 3 a second later (50 ms on the main suite's driver,
  // time enough for a deploy to be recorded as running first): a crash loop.
  [CRASHY]: { serves: true, exitsAfterMs: 1_000, exitCode: 3 },
  // Listens after four seconds (a fifth of a second on the main suite's driver): a deploy that a ?wait sees end.
  [LATE]: { serves: true, startsAfterMs: 4_000 },
};

/**
 * Shows that a held ?wait=1 (`ask`) ends on svcd's clock: still held while a millisecond of its
 * second is left (the store read again three times meanwhile, each read followed by a pause on
 * `pausing`, counted here), answered at the very read after it is up. Returns the answer.
 */
async function heldForItsSecond<T>(t: TestServer, tenantId: string, pausing: { nextChange: (...args: never[]) => Promise<void> }, ask: () => Promise<T>): Promise<T> {
  const nextChange = pausing.nextChange.bind(pausing);
  let pauses = 0;
  pausing.nextChange = (...args: never[]) => (pauses++, nextChange(...args));
  try {
    const answer = ask();
    answer.catch(() => {}); // awaited below; a failure meanwhile is reported there
    await waitFor('the wait to be held', () => Promise.resolve(t.deps.waits.heldBy(tenantId) === 1 || undefined));
    t.clock.advance(999);
    const before = pauses;
    await waitFor('three reads with a millisecond of its second left', () => Promise.resolve(pauses >= before + 3 || undefined));
    assert.equal(t.deps.waits.heldBy(tenantId), 1, 'still held with a millisecond of its second left');
    t.clock.advance(1);
    const atItsEnd = pauses;
    const answered = await answer;
    assert.equal(pauses - atItsEnd, 0, 'answered at the read after its second was up, with no pause more');
    return answered;
  } finally {
    pausing.nextChange = nextChange;
  }
}

eachStore((kind) => {
  describe(`deploys on the memory driver (${kind})`, () => {
    let t: TestServer;
    let mem: ReturnType<typeof memoryRuntime>;
    let stopDriverClock = () => {};

    before(async () => {
      // The driver's time (its workloads' starts and exits, readiness) runs twenty times faster
      // than real time; svcd's own clock is the test's, moved by hand.
      const driverClock = new ManualClock(Date.now());
      stopDriverClock = driverClock.run(20);
      mem = memoryRuntime(IMAGES, driverClock);
      // Readiness waits an hour of the driver's time (three minutes): the deadline test's ten
      // minutes on svcd's clock end first however slow the store is (the other cases never wait for it).
      t = await startServer({ store: kind, overrides: { runtime: mem.runtime, readyTimeoutMs: 3_600_000, crashBackoffMs: 10 } });
    });
    after(async () => {
      await t.close();
      await mem.driver.close();
      stopDriverClock();
    });

    test('a deploy runs the workload at its endpoint, and the service is routed there', async () => {
      const a = await newTenant(t);
      const s = await a.client.createService({ name: 'web', image: SERVING, port: 8000 });
      assert.equal((await settled(a, s.id)).status, 'running');
      const running = (await mem.driver.list({ tenantId: a.id })).filter((w) => w.state === 'running');
      assert.equal(running.length, 1);
      const row = await t.deps.store.services.findAny(s.id);
      assert.ok(row?.upstream);
      assert.equal(row.container_id, running[0]?.id);
      assert.equal(row.upstream, `${running[0]?.address?.host}:8000`);
      const [host, port] = row.upstream.split(':');
      assert.equal(await tcpAccepts(host ?? '', Number(port)), true, 'the upstream answers');
      assert.equal(await tcpAccepts(host ?? '', Number(port) + 1), false, 'and only on its port');
      assert.equal((await a.client.deployments(s.id))[0]?.status, 'succeeded');
    });

    test('replicas (beyond the spec): 1 by default; above 1 refused on a single engine with nothing made or deployed', async () => {
      const a = await newTenant(t);
      const refused = (err: { status?: number; message?: string }) => err.status === 400 && /replicas above 1 need a cluster \(svcd --runtime swarm\)/.test(err.message ?? '');
      await assert.rejects(a.client.createService({ name: 'many', image: SERVING, replicas: 2 }), refused);
      assert.deepEqual(await a.client.listServices(), []);
      const s = await a.client.createService({ name: 'one', image: SERVING, replicas: 1 });
      assert.equal(s.replicas, 1);
      assert.equal((await settled(a, s.id)).status, 'running');
      await assert.rejects(a.client.scaleService(s.id, 3), refused);
      const same = await a.client.scaleService(s.id, 1);
      assert.equal(same.deployment, null, 'the count it has: nothing to deploy');
      assert.equal((await a.client.deployments(s.id)).length, 1);
      // The schema's bounds.
      for (const bad of [0, 11]) await assert.rejects(a.client.scaleService(s.id, bad), (err: { status?: number }) => err.status === 400, String(bad));
      assert.equal((await a.client.service(s.id)).replicas, 1);
    });

    test('a workload that exits before it is ready fails the deployment with its output, and leaves nothing', async () => {
      const a = await newTenant(t);
      const s = await a.client.createService({ name: 'quitter', image: EXITING, port: 8000 });
      const done = await settled(a, s.id);
      assert.equal(done.status, 'failed');
      assert.match(done.last_error ?? '', /container exited with code 7 before it was ready: giving up/);
      assert.equal((await a.client.deployments(s.id))[0]?.status, 'failed');
      assert.deepEqual(await mem.driver.list({ tenantId: a.id }), []);
    });

    test('?wait (beyond the spec) answers once the deploy ended, with the service as it is then; without it the answer comes at once', async () => {
      const a = await newTenant(t);
      const s = await a.client.createService({ name: 'late', image: LATE, port: 8000 });
      assert.equal((await a.client.service(s.id)).status, 'deploying', 'without ?wait: at once, still deploying');
      const waited = await a.client.service(s.id, { wait: 20 });
      assert.equal(waited.status, 'running');
      assert.equal((await a.client.deployments(s.id))[0]?.status, 'succeeded');
      // A service that is not deploying is answered at once.
      assert.equal((await a.client.service(s.id, { wait: 20 })).status, 'running');
    });

    test('?wait answers after its seconds with the service still deploying; past 10 waits of a tenant at once the answer comes at once; bounds and 404 as without it', async () => {
      const a = await newTenant(t);
      const s = await a.client.createService({ name: 'slow-waited', image: SLOW, port: 8000 });
      // Made first: a new tenant moves the test's clock on by minutes (harness), past the held
      // waits' request timeout (and past the slow deploy's lease, which is taken over: it stays deploying).
      const b = await newTenant(t);
      const other = await b.client.createService({ name: 'slow-other', image: SLOW, port: 8000 });
      const waited = await heldForItsSecond(t, a.id, t.deps.workloads, () => a.client.service(s.id, { wait: 1 }));
      assert.equal(waited.status, 'deploying');

      // Ten held at once; the eleventh is answered without waiting, and the ten are still held.
      const held = Array.from({ length: WAITS_PER_TENANT }, () => a.client.service(s.id, { wait: WAIT_MAX_S }).then(() => 'answered', (err: unknown) => (err as { status?: number }).status));
      await waitFor('the ten waits to be held', () => Promise.resolve(t.deps.waits.heldBy(a.id) === WAITS_PER_TENANT || undefined));
      const eleventh = Date.now();
      assert.equal((await a.client.service(s.id, { wait: WAIT_MAX_S })).status, 'deploying');
      assert.ok(Date.now() - eleventh < 5_000, `the eleventh wait took ${Date.now() - eleventh} ms`);
      assert.equal(t.deps.waits.heldBy(a.id), WAITS_PER_TENANT, 'the ten are still held');
      // Another tenant's waits are its own.
      const otherHeld = b.client.service(other.id, { wait: WAIT_MAX_S }).then(() => 'answered', (err: unknown) => (err as { status?: number }).status);
      await waitFor("the other tenant's wait to be held", () => Promise.resolve(t.deps.waits.heldBy(b.id) === 1 || undefined));

      for (const wait of [0, WAIT_MAX_S + 1]) {
        await assert.rejects(a.client.service(s.id, { wait }), (err: { status?: number }) => err.status === 400);
      }
      await assert.rejects(b.client.service(s.id, { wait: 1 }), (err: { status?: number }) => err.status === 404, "another tenant's service is not found");
      await assert.rejects(a.client.service('nope', { wait: 1 }), (err: { status?: number }) => err.status === 404);
      // A service deleted while it is waited for is gone: 404, as a read after the delete.
      await a.client.deleteService(s.id);
      await b.client.deleteService(other.id);
      assert.deepEqual(await Promise.all([...held, otherHeld]), Array.from({ length: WAITS_PER_TENANT + 1 }, () => 404));
      assert.equal(t.deps.waits.heldBy(a.id) + t.deps.waits.heldBy(b.id), 0, 'nothing held once they were answered');
    });

    test('a held ?wait ends when its client hangs up (its place under the caps freed), and when the server closes (answered as the service is)', async () => {
      const a = await newTenant(t);
      const s = await a.client.createService({ name: 'slow-hung-up', image: SLOW, port: 8000 });
      const req = request(`${t.url}/v1/services/${s.id}?wait=${WAIT_MAX_S}`, { headers: { authorization: `Bearer ${a.key}` } });
      req.on('error', () => {});
      req.end();
      await waitFor('the wait to be held', () => Promise.resolve(t.deps.waits.heldBy(a.id) === 1 || undefined));
      req.destroy();
      await waitFor('the wait to end with its client', () => Promise.resolve(t.deps.waits.heldBy(a.id) === 0 || undefined), 5_000);
      await a.client.deleteService(s.id);

      // A server of its own, closed while a wait is held: the wait is answered at once (not
      // after its 20 s), as the service is, and its connection goes with the answer (kept alive,
      // it would hold the close until the client let it go).
      const own = await startServer({ store: kind, overrides: { runtime: mem.runtime, readyTimeoutMs: 3_600_000 } });
      let closes: Promise<void> | null = null;
      try {
        const b = await newTenant(own);
        const slow = await b.client.createService({ name: 'slow-closing', image: SLOW, port: 8000 });
        const answer = new Promise<{ status: number; connection: string | undefined; body: string; at: number }>((resolve, reject) => {
          const held = request(`${own.url}/v1/services/${slow.id}?wait=${WAIT_MAX_S}`, { headers: { authorization: `Bearer ${b.key}` } }, (res) => {
            let body = '';
            res.on('data', (c: Buffer) => (body += c.toString()));
            res.on('end', () => resolve({ status: res.statusCode ?? 0, connection: res.headers.connection, body, at: Date.now() }));
          });
          held.on('error', reject);
          held.end();
        });
        await waitFor('the wait to be held', () => Promise.resolve(own.deps.waits.heldBy(b.id) === 1 || undefined));
        const closing = Date.now();
        closes = own.close();
        const got = await answer;
        assert.equal(got.status, 200);
        assert.equal((JSON.parse(got.body) as { status: string }).status, 'deploying', 'answered as it was');
        assert.equal(got.connection, 'close', 'its connection goes with the answer');
        assert.ok(got.at - closing < 10_000, `answered ${got.at - closing} ms into the close, not after its wait`);
      } finally {
        // Closed once, whatever failed.
        await (closes ?? own.close()).catch(() => {});
      }
    });

    test('a deploy cancelled while it waits ends cancelled, and its workload is removed', async () => {
      const a = await newTenant(t);
      const s = await a.client.createService({ name: 'slow', image: SLOW, port: 8000 });
      const dep = await waitFor('the deploy to start its workload', async () => {
        const d = (await a.client.deployments(s.id))[0];
        return d?.status === 'running' && (await mem.driver.list({ tenantId: a.id })).length === 1 ? d : undefined;
      });
      assert.equal((await a.client.cancelDeployment(s.id, dep.id)).status, 'cancelled');
      await waitFor('the workload to go', async () => (await mem.driver.list({ tenantId: a.id })).length === 0);
      assert.equal((await a.client.deployments(s.id))[0]?.status, 'cancelled');
      assert.notEqual((await a.client.service(s.id)).status, 'running');
    });

    test('a redeploy whose image cannot be pulled fails, and takes the running workload with it', async () => {
      const a = await newTenant(t);
      const s = await a.client.createService({ name: 'redeployed', image: SERVING, port: 8000 });
      assert.equal((await settled(a, s.id)).status, 'running');
      const pull = mem.runtime.pullImage.bind(mem.runtime);
      mem.runtime.pullImage = () => Promise.reject(new Error('registry unreachable'));
      try {
        await a.client.serviceAction(s.id, 'redeploy');
        const done = await settled(a, s.id);
        assert.equal(done.status, 'failed');
        assert.match(done.last_error ?? '', /could not be pulled/);
      } finally {
        mem.runtime.pullImage = pull;
      }
      // Not left running where nothing routes to it and no crash would be seen.
      assert.deepEqual((await mem.driver.list({ tenantId: a.id })).filter((w) => w.state === 'running'), []);
    });

    test('a deployment that ran and waits again (the engine away) is recorded when it is cancelled', async () => {
      const a = await newTenant(t);
      const s = await a.client.createService({ name: 'waiting', image: SLOW, port: 8000 });
      const dep = await waitFor('the deploy to run', async () => {
        const d = (await a.client.deployments(s.id))[0];
        return d?.status === 'running' ? d : undefined;
      });
      // As the controller leaves a deployment that met the engine away: pending again, having run.
      assert.equal(await t.deps.store.deployments.transition(dep.id, ['running'], { status: 'pending' }), true);
      assert.equal((await a.client.cancelDeployment(s.id, dep.id)).status, 'cancelled');
      const entries = (await a.client.activity({ limit: 50 })).filter((e) => e.action === 'deployment.cancelled');
      assert.deepEqual(entries.map((e) => e.resource_id), [dep.id]);
    });

    test('a deploy still waiting at the 10-minute deadline fails, saying so, and leaves nothing', async () => {
      // The deadline runs on the test's clock (readiness would wait minutes of real time).
      const a = await newTenant(t);
      const s = await a.client.createService({ name: 'too-slow', image: SLOW, port: 8000 });
      await waitFor('the deploy to wait for its workload', async () => {
        const d = (await a.client.deployments(s.id))[0];
        return d?.status === 'running' && (await mem.driver.list({ tenantId: a.id })).length === 1 ? true : undefined;
      });
      // Ten minutes in 5 s steps, each once the controller's lease renewal of the step before
      // was written (it renews every 10 s of the test's clock, a store write), as on a live svcd;
      // polled often.
      const renewedOrEnded = async () => {
        const w = await t.deps.store.workloads.find('service', s.id);
        return w?.observed_generation === w?.generation || (w?.lease_expires_at_ms != null && w.lease_expires_at_ms - t.clock.now() > 15_000);
      };
      for (let ms = 0; ms < DEPLOY_DEADLINE_MS; ms += 5_000) {
        t.clock.advance(5_000);
        // Generous: one step starved of a core (make test runs this lane beside the engine's) must not fail it.
        const until = Date.now() + 30_000;
        let waited = false;
        while (!(await renewedOrEnded())) {
          assert.ok(Date.now() < until, `the lease was renewed after ${ms / 1000} s of the test's clock`);
          waited = true;
          await new Promise((r) => setTimeout(r, 2));
        }
        // The store has the renewal; the controller takes note of it when the write's answer
        // reaches it (on PostgreSQL another connection may tell this test first; SQLite answers
        // within the call): longer after a step that waited for it, which a starved lane may take
        // long to deliver.
        await new Promise((r) => setTimeout(r, waited ? 150 : kind === 'postgres' ? 10 : 1));
      }
      const done = await settled(a, s.id);
      assert.equal(done.status, 'failed');
      assert.equal(done.last_error, 'deploy timed out after 10 minutes');
      assert.equal((await a.client.deployments(s.id))[0]?.status, 'failed');
      await waitFor('the workload to go', async () => ((await mem.driver.list({ tenantId: a.id })).length === 0 ? true : undefined));
    });

    test('crashes restart the service with backoff until five in ten minutes open the circuit; a reset deploys again', async () => {
      const a = await newTenant(t);
      const s = await a.client.createService({ name: 'crashy', image: CRASHY, port: 8000 });
      // The crash handler's settle and backoff run on the test's clock: it moves on, by half a
      // second every few milliseconds, only while an exit waits to be judged and restarted (an
      // exited workload is listed), so that five crashes take seconds of the circuit's 10-minute
      // window however slow the restarts between them are in real time.
      let crashed: Awaited<ReturnType<typeof a.client.service>> | undefined;
      for (const until = Date.now() + 60_000; !crashed; ) {
        assert.ok(Date.now() < until, 'the circuit opened within a minute');
        if ((await mem.driver.list({ tenantId: a.id })).some((w) => w.state === 'exited')) t.clock.advance(500);
        const now = await a.client.service(s.id);
        if (now.status === 'crashed') crashed = now;
        else await new Promise((r) => setTimeout(r, 5));
      }
      assert.match(crashed.last_error ?? '', /exited with code 3; 5 crashes in 10 minutes opened the circuit/);
      const reasons = (await a.client.deployments(s.id)).map((d) => d.reason);
      assert.equal(reasons.filter((r) => r === 'crash').length, 4, 'restarted after each of the first four crashes');
      assert.equal((await mem.driver.list({ tenantId: a.id })).filter((w) => w.state === 'running').length, 0);
      await a.client.serviceAction(s.id, 'reset');
      const d = await waitFor('a deployment after the reset', async () => (await a.client.deployments(s.id)).find((x) => x.reason !== 'crash' && x.reason !== 'create'));
      assert.ok(d);
    });
  });

  describe(`rolling redeploys on the memory driver (${kind})`, () => {
    let t: TestServer;
    let mem: ReturnType<typeof memoryRuntime>;
    /** The names of the tenant's running workloads when each apply's workload turned ready. */
    const runningAtReady: string[][] = [];
    let stopsFail = false;
    let stopsTried = 0;

    before(async () => {
      mem = memoryRuntime(IMAGES);
      const runtime = {
        ...mem.runtime,
        apply: async (r: Parameters<typeof mem.runtime.apply>[0]) => {
          const applied = await mem.runtime.apply(r);
          runningAtReady.push((await mem.driver.list({ tenantId: r.spec.tenantId })).filter((w) => w.state === 'running').map((w) => w.name).sort());
          return applied;
        },
        // The engine refusing a stop (reconcile's cleanup is tested on what that leaves).
        stop: (ref: string) => {
          stopsTried++;
          return stopsFail ? Promise.reject(new Error('the engine refused the stop')) : mem.runtime.stop(ref);
        },
      };
      t = await startServer({ store: kind, overrides: { runtime, readyTimeoutMs: 60_000 } });
    });
    after(async () => {
      await t.close();
      await mem.driver.close();
    });

    test('a redeploy starts the new workload beside the old one, still running under another name; the route moves to the new one, and the old one goes', async () => {
      const a = await newTenant(t);
      const s = await a.client.createService({ name: 'rolling', image: SERVING, port: 8000 });
      assert.equal((await settled(a, s.id)).status, 'running');
      const old = await t.deps.store.services.findAny(s.id);
      runningAtReady.length = 0;
      await a.client.serviceAction(s.id, 'redeploy');
      assert.equal((await settled(a, s.id)).status, 'running');
      const name = workloadName(s.id);
      assert.equal(runningAtReady.length, 1);
      const atReady = runningAtReady[0] ?? assert.fail('no apply');
      assert.equal(atReady.length, 2, JSON.stringify(atReady));
      assert.ok(atReady.some((n) => isSetAside(n, name)) && atReady.includes(name), JSON.stringify(atReady));
      // The old one is stopped and removed after the deployment succeeded (it is not waited for).
      const left = await waitFor('the old workload to go', async () => {
        const ws = await mem.driver.list({ tenantId: a.id });
        return ws.length === 1 ? ws : undefined;
      });
      assert.deepEqual(left.map((w) => w.name), [name]);
      const now = await t.deps.store.services.findAny(s.id);
      assert.notEqual(left[0]?.id, old?.container_id);
      assert.equal(now?.container_id, left[0]?.id);
      assert.equal(now?.upstream, `${left[0]?.address?.host ?? ''}:8000`);
    });

    /** Redeploys `s` while the engine refuses stops: the old workload is left set aside. */
    const redeployLeavingOld = async (a: Awaited<ReturnType<typeof newTenant>>, id: string) => {
      stopsFail = true;
      const tried = stopsTried;
      try {
        await a.client.serviceAction(id, 'redeploy');
        await waitFor('the redeploy', async () => ((await a.client.deployments(id)).filter((d) => d.status === 'succeeded').length === 2 ? true : undefined));
        await waitFor('the refused stop of the old workload', async () => (stopsTried > tried ? true : undefined));
      } finally {
        stopsFail = false;
      }
      const both = (await mem.driver.list({ tenantId: a.id })).filter((w) => w.labels[LABELS.resource] === id);
      assert.equal(both.length, 2, 'the stop failed: the old workload is still there');
      assert.ok(both.some((w) => isSetAside(w.name, workloadName(id))));
    };

    test('a workload set aside and left behind (its stop failed, or its svcd died) is removed by reconcile once nothing applies the service; the serving one stays', async () => {
      const a = await newTenant(t);
      const s = await a.client.createService({ name: 'leftover', image: SERVING, port: 8000 });
      assert.equal((await settled(a, s.id)).status, 'running');
      await redeployLeavingOld(a, s.id);
      const name = workloadName(s.id);
      await t.deps.workloads.reconcile();
      const left = await mem.driver.list({ tenantId: a.id });
      assert.deepEqual(left.map((w) => w.name), [name]);
      assert.equal(left[0]?.id, (await t.deps.store.services.findAny(s.id))?.container_id);
      assert.equal((await a.client.service(s.id)).status, 'running');
    });

    test('a stop removes what a redeploy set aside along with the serving workload; so does a delete', async () => {
      const a = await newTenant(t);
      const stopped = await a.client.createService({ name: 'stopped-leftover', image: SERVING, port: 8000 });
      const deleted = await a.client.createService({ name: 'deleted-leftover', image: SERVING, port: 8000 });
      for (const s of [stopped, deleted]) {
        assert.equal((await settled(a, s.id)).status, 'running');
        await redeployLeavingOld(a, s.id);
      }
      const of = async (id: string) => (await mem.driver.list({ tenantId: a.id })).filter((w) => w.labels[LABELS.resource] === id);
      await a.client.serviceAction(stopped.id, 'stop');
      assert.deepEqual(await of(stopped.id), []);
      await a.client.deleteService(deleted.id);
      assert.deepEqual(await of(deleted.id), []);
    });
  });

  describe(`a rolling redeploy's wait for the proxies (${kind})`, () => {
    let t: TestServer;
    let mem: ReturnType<typeof memoryRuntime>;
    const FOLLOW_MS = 5_000;

    before(async () => {
      mem = memoryRuntime(IMAGES);
      // The test's clock: the wait ends when the test moves it.
      t = await startServer({ store: kind, overrides: { runtime: mem.runtime, readyTimeoutMs: 60_000, routeFollowMs: FOLLOW_MS } });
    });
    after(async () => {
      await t.close();
      await mem.driver.close();
    });

    /** Redeploys `id` and resolves once the route moved to the new workload (the wait begins): the new one's id. */
    const redeployUntilMoved = async (a: Awaited<ReturnType<typeof newTenant>>, id: string, oldId: string) => {
      await a.client.serviceAction(id, 'redeploy');
      return waitFor('the route to move to the new workload', async () => {
        const row = await t.deps.store.services.findAny(id);
        const fresh = (await mem.driver.list({ tenantId: a.id })).find((w) => w.name === workloadName(id) && w.id !== oldId);
        return fresh && row?.container_id === fresh.id && row.upstream === `${fresh.address?.host ?? ''}:8000` ? fresh.id : undefined;
      });
    };

    test('through the wait both run and the deployment is still running; at its end the old one goes and the service reads running', async () => {
      const a = await newTenant(t);
      const s = await a.client.createService({ name: 'waiting', image: SERVING, port: 8000 });
      assert.equal((await settled(a, s.id)).status, 'running');
      const oldId = (await t.deps.store.services.findAny(s.id))?.container_id ?? assert.fail('no container');
      const fresh = await redeployUntilMoved(a, s.id, oldId);
      assert.equal((await mem.driver.list({ tenantId: a.id })).filter((w) => w.state === 'running').length, 2);
      // By reason: both deployments carry the same instant on the test's clock, so their order is not told by it.
      assert.equal((await a.client.deployments(s.id)).find((d) => d.reason === 'redeploy')?.status, 'running');
      t.clock.advance(FOLLOW_MS);
      assert.equal((await settled(a, s.id)).status, 'running');
      const left = await waitFor('the old workload to go', async () => {
        const ws = await mem.driver.list({ tenantId: a.id });
        return ws.length === 1 ? ws : undefined;
      });
      assert.equal(left[0]?.id, fresh);
    });

    test('a new workload gone by the end of the wait fails the deploy (its exit is no crash while the service deploys), and the old one goes with it', async () => {
      const a = await newTenant(t);
      const s = await a.client.createService({ name: 'vanishing', image: SERVING, port: 8000 });
      assert.equal((await settled(a, s.id)).status, 'running');
      const oldId = (await t.deps.store.services.findAny(s.id))?.container_id ?? assert.fail('no container');
      const fresh = await redeployUntilMoved(a, s.id, oldId);
      await mem.driver.remove(fresh);
      t.clock.advance(FOLLOW_MS);
      const done = await settled(a, s.id);
      assert.equal(done.status, 'failed');
      assert.match(done.last_error ?? '', /the new container vanished while the route moved to it/);
      await waitFor('nothing left running', async () => ((await mem.driver.list({ tenantId: a.id })).length === 0 ? true : undefined));
      assert.equal((await t.deps.store.services.findAny(s.id))?.upstream, null);
    });
  });

  describe(`ports svcd allocates, for a driver that publishes each service on its own (${kind})`, () => {
    let t: TestServer;
    let mem: ReturnType<typeof memoryRuntime>;
    /** The published port of each apply, by service id. */
    const published = new Map<string, Array<number | null>>();

    before(async () => {
      mem = memoryRuntime(IMAGES);
      // The memory driver as a swarm would be: it asks svcd for the port (allocatedPorts), and
      // cannot start a replacement beside what runs (setAside): both would take the one port.
      const runtime = {
        ...mem.runtime,
        capabilities: async () => ({ ...(await mem.runtime.capabilities()), allocatedPorts: true, setAside: false }),
        apply: (r: Parameters<typeof mem.runtime.apply>[0]) => {
          published.set(r.spec.resourceId, [...(published.get(r.spec.resourceId) ?? []), r.spec.publish?.port ?? null]);
          return mem.runtime.apply(r);
        },
      };
      // Below the ephemeral range, and apart from the other suites' host ports: the memory driver binds them.
      t = await startServer({ store: kind, config: { swarmPorts: { from: 23900, to: 23902 } }, overrides: { runtime, readyTimeoutMs: 60_000 } });
    });
    after(async () => {
      await t.close();
      await mem.driver.close();
    });

    test("each service gets a port of the range for its life, also when created at once; past the range a new service is refused with 409; a deleted service's port rests before it is given again", async () => {
      const a = await newTenant(t);
      const services = await Promise.all(['p1', 'p2', 'p3'].map((name) => a.client.createService({ name, image: SERVING, port: 8000 })));
      for (const s of services) assert.equal((await settled(a, s.id)).status, 'running');
      const ports = services.map((s) => published.get(s.id)?.[0]);
      assert.deepEqual([...ports].sort(), [23900, 23901, 23902], JSON.stringify(ports));
      const first = services[0] ?? assert.fail();
      await a.client.serviceAction(first.id, 'redeploy');
      await waitFor('redeployed', async () => ((await a.client.deployments(first.id)).filter((d) => d.status === 'succeeded').length === 2 ? true : undefined));
      assert.deepEqual(published.get(first.id), [ports[0], ports[0]], 'kept across deploys');

      // Operators see it coming: the free ports of the range (figures at most a scrape old).
      const gauge = async (state: string) => waitFor(`svc_swarm_ports ${state}`, async () => {
        const m = new RegExp(`^svc_swarm_ports\\{state="${state}"\\} (\\d+)$`, 'm').exec(await t.deps.metrics.registry.metrics());
        return m?.[1] === undefined ? undefined : Number(m[1]);
      });
      assert.equal(await gauge('total'), 3);
      await waitFor('no port free', async () => ((await gauge('free')) === 0 ? true : undefined));
      // Past the range, a new service is refused before anything is written.
      const full = (err: { status?: number; message?: string }) => err.status === 409 && /every port of --swarm-ports is taken \(3 ports/.test(err.message ?? '');
      await assert.rejects(a.client.createService({ name: 'p4', image: SERVING, port: 8000 }), full);
      assert.equal((await a.client.listServices()).length, 3);

      // A deleted service's port is not given again at once: its task may still stop on its node,
      // and a proxy still route to it.
      await a.client.deleteService(first.id);
      await assert.rejects(a.client.createService({ name: 'p5', image: SERVING, port: 8000 }), full);
      t.clock.advance(PORT_REST_S * 1000);
      const sixth = await a.client.createService({ name: 'p6', image: SERVING, port: 8000 });
      assert.equal((await settled(a, sixth.id)).status, 'running');
      assert.deepEqual(published.get(sixth.id), [ports[0]], "the deleted service's port, once it rested");
      // A service not deployed yet counts as holding a port: one created to await its first build
      // takes the last one free.
      await a.client.deleteService(sixth.id);
      t.clock.advance(PORT_REST_S * 1000);
      const waiting = await a.client.createService({ name: 'p7', await_build: true, port: 8000 });
      await assert.rejects(a.client.createService({ name: 'p8', image: SERVING, port: 8000 }), full);
      await a.client.deleteService(waiting.id);

      // A port from before the operator changed --swarm-ports (outside the range, where the
      // nodes' gate does not reach) is moved into the range at the next deploy.
      const second = services[1] ?? assert.fail();
      await t.deps.store.services.update(second.id, { published_port: 23999 });
      const deploys = (await a.client.deployments(second.id)).length;
      await a.client.serviceAction(second.id, 'redeploy');
      await waitFor('redeployed', async () => ((await a.client.deployments(second.id)).filter((d) => d.status === 'succeeded').length === deploys + 1 ? true : undefined));
      // (Its own earlier port is free again too, since the record names 23999: one of the two.)
      const moved = published.get(second.id)?.at(-1);
      assert.ok(moved === ports[0] || moved === ports[1], `a free port of the range: ${String(moved)}`);
      assert.equal((await t.deps.store.services.findAny(second.id))?.published_port, moved);
    });
  });

  describe(`two deploys that pick the same port at once (${kind})`, () => {
    let t: TestServer;
    let mem: ReturnType<typeof memoryRuntime>;

    before(async () => {
      mem = memoryRuntime(IMAGES);
      const runtime = { ...mem.runtime, capabilities: async () => ({ ...(await mem.runtime.capabilities()), allocatedPorts: true, setAside: false }) };
      // One port: both deploys pick it.
      t = await startServer({ store: kind, config: { swarmPorts: { from: 23910, to: 23910 } }, overrides: { runtime, readyTimeoutMs: 60_000 } });
    });
    after(async () => {
      await t.close();
      await mem.driver.close();
    });

    test("the store's unique index settles it: the loser reads the ports again and picks again (here: none left, said so), never a raw SQL error", async () => {
      const services = t.deps.store.services;
      const ports = t.deps.store.publishedPorts;
      const read = ports.taken.bind(ports);
      // The deploys' allocation is what is tried here: the check at creation (which reads the same
      // ports, and is tested above) stands aside.
      const assertPortLeft = t.deps.deployer.assertPortLeft.bind(t.deps.deployer);
      t.deps.deployer.assertPortLeft = () => Promise.resolve();
      // Both deploys read the ports in use before either writes: the first two reads wait for each other.
      let reads = 0;
      let bothRead: () => void = () => {};
      const barrier = new Promise<void>((resolve) => (bothRead = resolve));
      ports.taken = async (releasedAfter) => {
        const used = await read(releasedAfter);
        if (++reads === 2) bothRead();
        await barrier;
        return used;
      };
      try {
        const a = await newTenant(t);
        const [one, two] = await Promise.all(['r1', 'r2'].map((name) => a.client.createService({ name, image: SERVING, port: 8000 })));
        const ends = [await settled(a, one?.id ?? ''), await settled(a, two?.id ?? '')];
        assert.deepEqual(ends.map((e) => e.status).sort(), ['failed', 'running'], JSON.stringify(ends));
        const loser = ends.find((e) => e.status === 'failed');
        assert.match(loser?.last_error ?? '', /every port of --swarm-ports is taken/);
        assert.equal(reads, 3, 'the loser read the ports again after the store refused its pick');
        const winner = ends.find((e) => e.status === 'running');
        assert.equal((await services.findAny(winner?.id ?? ''))?.published_port, 23910);
        assert.equal((await services.findAny(loser?.id ?? ''))?.published_port, null);
      } finally {
        ports.taken = read;
        t.deps.deployer.assertPortLeft = assertPortLeft;
      }
    });
  });
});

eachStore((kind) => {
  describe(`a service created to await its first build (${kind})`, () => {
    test('is settled stopped from its creation, without a question to the engine; deleted, its name is removed there', async () => {
      const mem = memoryRuntime(IMAGES);
      // Every engine call, with its arguments (a signal reads as {}).
      const calls: string[] = [];
      const runtime = new Proxy(mem.runtime, {
        get(target, key, receiver) {
          const value: unknown = Reflect.get(target, key, receiver);
          if (typeof value !== 'function') return value;
          return (...args: unknown[]) => {
            calls.push(`${String(key)} ${JSON.stringify(args)}`);
            return (value as (...a: unknown[]) => unknown).apply(target, args);
          };
        },
      });
      const t = await startServer({ store: kind, overrides: { runtime } });
      try {
        const a = await newTenant(t);
        const s = await a.client.createService({ name: 'waits', await_build: true });
        assert.equal(s.status, 'stopped');
        // Settled by the request itself: the controller has nothing to carry out (before, it asked
        // the engine to stop and remove the name, and for containers set aside under it: none).
        const row = await t.deps.store.workloads.find('service', s.id);
        assert.equal(row?.desired_state, 'stopped');
        assert.equal(row.observed_state, 'stopped');
        assert.equal(row.observed_generation, row.generation);
        // A pass of the controller finds nothing to do for it either.
        t.deps.workloads.kick();
        assert.equal(await t.deps.workloads.settled('service', s.id, 5_000), true);
        const aboutIt = () => calls.filter((c) => c.includes(s.id));
        assert.deepEqual(aboutIt(), [], 'no engine call names the new service');
        // The control, through the same recorder: its deletion asks the engine to remove its name.
        await a.client.deleteService(s.id);
        await waitFor('the deletion to reach the engine', () => Promise.resolve(aboutIt().some((c) => c.startsWith('remove ')) || undefined));
        assert.ok(aboutIt().some((c) => c.includes(workloadName(s.id))), JSON.stringify(aboutIt()));
      } finally {
        await t.close();
        await mem.driver.close();
      }
    });
  });
});

eachStore((kind) => {
  describe(`a build with the sandbox required (${kind})`, () => {
    test("refused when the engine's default runtime is not gVisor's (its RUN steps would run outside it), begun when it is, failed when it changed while the engine built", async () => {
      const mem = memoryRuntime(IMAGES);
      let stepRuntime = 'runc';
      let buildImage: Runtime['buildImage'] = (spec) => mem.runtime.buildImage(spec);
      const runtime: Runtime = { ...mem.runtime, stepRuntime: () => Promise.resolve(stepRuntime), buildImage: (spec) => buildImage(spec) };
      const t = await startServer({ store: kind, config: { sandbox: 'required' }, overrides: { runtime } });
      try {
        const a = await newTenant(t);
        const s = await a.client.createService({ name: 'built', await_build: true });
        const build = async () => {
          const up = await a.client.uploadSource(s.id, new Uint8Array(gzipSync(await tarOf([{ name: 'Dockerfile', body: `FROM ${SERVING}\n` }]))));
          const b = await a.client.createBuild(s.id, { source_type: 'archive', source_id: up.id });
          return waitFor('the build to end', async () => {
            const now = await a.client.build(s.id, b.build_id);
            return now.status === 'queued' || now.status === 'running' ? undefined : now;
          });
        };
        const refused = await build();
        assert.equal(refused.status, 'failed');
        assert.match(refused.last_error ?? '', /builds need the engine's default runtime to be runsc \(it is runc\)/);
        stepRuntime = 'runsc';
        const begun = await build();
        assert.equal(begun.status, 'failed');
        assert.match(begun.last_error ?? '', /the memory runtime builds and pushes nothing/, 'past the check: the engine was asked to build');
        // The engine reloaded with another default while it built (the later RUN steps ran under
        // it): the answer after the build fails the build, and nothing is deployed.
        buildImage = () => {
          stepRuntime = 'runc';
          return Promise.resolve();
        };
        const changed = await build();
        assert.equal(changed.status, 'failed');
        assert.match(changed.last_error ?? '', /builds need the engine's default runtime to be runsc \(it is runc\)/);
        assert.equal(changed.deployment_id, null);
        // The control: a build the engine carried out under runsc throughout succeeds, and deploys.
        stepRuntime = 'runsc';
        buildImage = () => Promise.resolve();
        const built = await build();
        assert.equal(built.status, 'succeeded', built.last_error ?? '');
        assert.notEqual(built.deployment_id, null);
      } finally {
        await t.close();
        await mem.driver.close();
      }
    });
  });
});

eachStore((kind) => {
  describe(`base images: pulled from an upload's start, and a tenant's recent pull used again (${kind})`, () => {
    test("an upload begins the pull of the base image the tenant's latest build named, and the build that follows takes it instead of pulling again", async () => {
      const mem = memoryRuntime(IMAGES);
      const pulls: string[] = [];
      const runtime: Runtime = { ...mem.runtime, buildImage: () => Promise.resolve(), pullImage: (image, signal) => (pulls.push(image), mem.runtime.pullImage(image, signal)) };
      // Every build pulls: the tenant's recent pull is not used again (the next test).
      const t = await startServer({ store: kind, config: { baseImageReuseSeconds: 0 }, overrides: { runtime } });
      try {
        const a = await newTenant(t);
        const archive = async () => new Uint8Array(gzipSync(await tarOf([{ name: 'Dockerfile', body: `FROM ${SERVING}\n` }])));
        const built = async (serviceId: string, sourceId: string) => {
          const b = await a.client.createBuild(serviceId, { source_type: 'archive', source_id: sourceId });
          const done = await a.client.build(serviceId, b.build_id, { wait: WAIT_MAX_S });
          assert.equal(done.status, 'succeeded', done.last_error ?? '');
        };
        // The tenant's first build: nothing to guess from, so its pull comes with the build.
        const first = await a.client.createService({ name: 'first', await_build: true });
        const up = await a.client.uploadSource(first.id, await archive());
        assert.deepEqual(pulls, [], 'no build of the tenant named a base image yet');
        await built(first.id, up.id);
        assert.deepEqual(pulls, [SERVING]);

        // A new service's upload: its pull begins before any build is asked for.
        const second = await a.client.createService({ name: 'second', await_build: true });
        const next = await a.client.uploadSource(second.id, await archive());
        await waitFor('the upload to begin the pull', () => Promise.resolve(pulls.length === 2 || undefined));
        assert.deepEqual(pulls, [SERVING, SERVING]);
        await built(second.id, next.id);
        assert.deepEqual(pulls, [SERVING, SERVING], 'the build took the pull its upload began');
      } finally {
        await t.close();
        await mem.driver.close();
      }
    });

    test("a tenant's pull of a base image serves its next builds for --base-image-reuse: never another tenant's, not once the engine's copy under the name changed, not past the window", async () => {
      const mem = memoryRuntime(IMAGES);
      const pulls: string[] = [];
      /** What the engine holds under a name: its ID changes when the tag moves to another copy. */
      let copy = 'first';
      const runtime: Runtime = {
        ...mem.runtime,
        buildImage: () => Promise.resolve(),
        pullImage: (image, signal) => (pulls.push(image), mem.runtime.pullImage(image, signal)),
        baseImage: (image) => Promise.resolve({ id: `sha256:${copy}-${image.length}`, triggers: [] }),
      };
      const t = await startServer({ store: kind, overrides: { runtime } });
      try {
        assert.equal(t.deps.config.baseImageReuseSeconds, 60, 'the default');
        const archive = async () => new Uint8Array(gzipSync(await tarOf([{ name: 'Dockerfile', body: `FROM ${SERVING}\n` }])));
        /** An upload and its build into the tenant's one service; resolves to the build's log once it succeeded. */
        const services = new Map<string, string>();
        const build = async (tenant: { id: string; client: SvcClient }) => {
          const serviceId = services.get(tenant.id) ?? (await tenant.client.createService({ name: 'app', await_build: true })).id;
          services.set(tenant.id, serviceId);
          const up = await tenant.client.uploadSource(serviceId, await archive(), { build: true });
          const done = await tenant.client.build(serviceId, up.build?.build_id ?? '', { wait: WAIT_MAX_S });
          assert.equal(done.status, 'succeeded', done.last_error ?? '');
          return tenant.client.buildLogs(serviceId, done.id);
        };
        const basePulls = () => pulls.filter((p) => p === SERVING).length;
        const a = await newTenant(t);
        const b = await newTenant(t);

        assert.match(await build(a), /==> pulling /);
        assert.equal(basePulls(), 1);
        // Within the window: neither the upload's warm-up nor the build asks the registry.
        const reused = await build(a);
        assert.match(reused, /was pulled for this tenant 0 s ago: not pulled again \(within --base-image-reuse, 60 s\)/);
        assert.match(reused, /is sha256:first-/, 'pinned to the copy that pull left');
        assert.doesNotMatch(reused, /==> pulling /);
        assert.equal(basePulls(), 1);
        // Another tenant's pull proves nothing for this one.
        assert.match(await build(b), /==> pulling /);
        assert.equal(basePulls(), 2);
        // The engine's copy under the name is not the one A's pull checked (the tag moved): pulled again.
        copy = 'second';
        assert.match(await build(a), /==> pulling /);
        assert.equal(basePulls(), 3);
        // The window counts from that pull, not from a use of it.
        t.clock.advance(45_000);
        assert.match(await build(a), /45 s ago: not pulled again/);
        assert.equal(basePulls(), 3);
        t.clock.advance(15_000);
        assert.match(await build(a), /==> pulling /);
        assert.equal(basePulls(), 4);
        // With less than the 10 s a pull ahead is kept left of the window, the upload pulls ahead
        // and the build takes that pull, the newer one.
        t.clock.advance(55_000);
        assert.match(await build(a), /==> pulling /);
        assert.equal(basePulls(), 5);
        // Pulled ahead, and the name moved to another copy before the build checked it: pulled
        // again, and built from what that pull left.
        t.clock.advance(55_000);
        const serviceId = services.get(a.id) ?? '';
        const up = await a.client.uploadSource(serviceId, await archive());
        await waitFor('the upload to pull ahead', () => Promise.resolve(basePulls() === 6 || undefined));
        copy = 'third';
        const moved = await a.client.createBuild(serviceId, { source_type: 'archive', source_id: up.id });
        assert.equal((await a.client.build(serviceId, moved.build_id, { wait: WAIT_MAX_S })).status, 'succeeded');
        assert.equal(basePulls(), 7);
        assert.match(await a.client.buildLogs(serviceId, moved.build_id), /is sha256:third-/);
      } finally {
        await t.close();
        await mem.driver.close();
      }
    });
  });

  describe(`a build's ?wait (beyond the spec) (${kind})`, () => {
    test('answers once the build ended, with the build as it is then; after its seconds while it runs; counted with the tenant\'s other held waits; bounds and 404 as without it', async () => {
      const mem = memoryRuntime(IMAGES);
      // The engine's build holds until the test lets it end, or the build's signal stops it.
      let release = () => {};
      let engineBuilds = 0;
      /** Lets the engine's build end, once the build got that far (it reads running from its pick-up on). */
      const releaseBuild = async (nth: number) => {
        await waitFor(`build ${nth} to reach the engine`, () => Promise.resolve(engineBuilds >= nth || undefined));
        release();
      };
      const runtime: Runtime = {
        ...mem.runtime,
        buildImage: (spec) =>
          new Promise<void>((resolve, reject) => {
            engineBuilds++;
            release = resolve;
            spec.signal.addEventListener('abort', () => reject(new Error('stopped')), { once: true });
          }),
      };
      const t = await startServer({ store: kind, overrides: { runtime } });
      try {
        const a = await newTenant(t);
        const b = await newTenant(t);
        const s = await a.client.createService({ name: 'built', await_build: true });
        const up = await a.client.uploadSource(s.id, new Uint8Array(gzipSync(await tarOf([{ name: 'Dockerfile', body: `FROM ${SERVING}\n` }]))));
        const build = await a.client.createBuild(s.id, { source_type: 'archive', source_id: up.id });
        await waitFor('the build to run', async () => (await a.client.build(s.id, build.build_id)).status === 'running' || undefined);

        const waited = await heldForItsSecond(t, a.id, t.deps.buildRunner, () => a.client.build(s.id, build.build_id, { wait: 1 }));
        assert.equal(waited.status, 'running', 'after its second, as it is then');
        for (const wait of [0, WAIT_MAX_S + 1]) {
          await assert.rejects(a.client.build(s.id, build.build_id, { wait }), (err: { status?: number }) => err.status === 400, String(wait));
        }
        await assert.rejects(b.client.build(s.id, build.build_id, { wait: 1 }), (err: { status?: number }) => err.status === 404, "another tenant's build is not found");
        await assert.rejects(a.client.build(s.id, 'nope', { wait: 1 }), (err: { status?: number }) => err.status === 404);

        // Held, under the tenant's count of held waits (services' and builds' together), its
        // pauses on the runner's (watched here: the wait must pause there to be woken by its end).
        const runner = t.deps.buildRunner;
        const nextChange = runner.nextChange.bind(runner);
        const pausedOn: string[] = [];
        runner.nextChange = (pauseMs, buildId, signal) => (pausedOn.push(buildId), nextChange(pauseMs, buildId, signal));
        const held = a.client.build(s.id, build.build_id, { wait: WAIT_MAX_S });
        await waitFor('the wait to be held', () => Promise.resolve(t.deps.waits.heldBy(a.id) === 1 || undefined));
        // The runner's end of the build wakes a pause on it at once (not at the pause's end):
        // without it this pause of a minute would outlast the 10 s below.
        const woken = nextChange(60_000, build.build_id).then(() => 'woken');
        await releaseBuild(1);
        const done = await held;
        assert.ok(pausedOn.length > 0 && pausedOn.every((id) => id === build.build_id), `the wait paused on the runner, on its build: ${JSON.stringify(pausedOn)}`);
        assert.equal(done.status, 'succeeded', done.last_error ?? '');
        assert.notEqual(done.deployment_id, null);
        assert.equal(await Promise.race([woken, new Promise((resolve) => setTimeout(() => resolve('not woken within 10 s'), 10_000).unref())]), 'woken');
        assert.equal(t.deps.waits.heldBy(a.id), 0, 'nothing held once it was answered');
        // An ended build is answered at once.
        const ended = Date.now();
        assert.equal((await a.client.build(s.id, build.build_id, { wait: WAIT_MAX_S })).status, 'succeeded');
        assert.ok(Date.now() - ended < 5_000, `an ended build's wait took ${Date.now() - ended} ms`);

        // A cancel wakes the waits on the build as it writes the record: here one of a build that
        // waits in the queue (one build at a time for this tenant, and one runs), which no run ends.
        await t.deps.store.tenants.updateQuotas(a.id, { max_builds_concurrent: 1 }, Math.floor(Date.now() / 1000));
        const archive = async () => a.client.uploadSource(s.id, new Uint8Array(gzipSync(await tarOf([{ name: 'Dockerfile', body: `FROM ${SERVING}\n` }]))));
        const running = await a.client.createBuild(s.id, { source_type: 'archive', source_id: (await archive()).id });
        await waitFor('the second build to run', async () => (await a.client.build(s.id, running.build_id)).status === 'running' || undefined);
        const cancelled = await a.client.createBuild(s.id, { source_type: 'archive', source_id: (await archive()).id });
        assert.equal((await a.client.build(s.id, cancelled.build_id)).status, 'queued');
        const heldOnCancel = a.client.build(s.id, cancelled.build_id, { wait: WAIT_MAX_S });
        await waitFor('the wait to be held', () => Promise.resolve(t.deps.waits.heldBy(a.id) === 1 || undefined));
        const wokenByCancel = nextChange(60_000, cancelled.build_id).then(() => 'woken');
        assert.equal((await a.client.cancelBuild(s.id, cancelled.build_id)).status, 'cancelled');
        assert.equal(await Promise.race([wokenByCancel, new Promise((resolve) => setTimeout(() => resolve('not woken within 10 s'), 10_000).unref())]), 'woken');
        assert.equal((await heldOnCancel).status, 'cancelled');
        await releaseBuild(2);
        assert.equal((await a.client.build(s.id, running.build_id, { wait: WAIT_MAX_S })).status, 'succeeded');
      } finally {
        await t.close();
        await mem.driver.close();
      }
    });
  });
});
