// A service's health check (beyond the spec) on the in-memory driver: its workloads answer real
// HTTP on loopback, so the deploy's check asks a real socket. services.test.ts runs one on the engine.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { MemoryImage } from '../src/runtime/memory/memory-driver.js';
import { eachStore, newTenant, startServer, type TestServer } from './harness.js';
import { memoryRuntime } from './memory-runtime.js';
import { ManualClock } from './manual-clock.js';
import { settled } from './service-fixtures.js';

const REGISTRY = '127.0.0.1:5999/memory';
/** /healthz answers 200, /moved 302 to a page that answers 404, every other path 404. */
const ROUTED = `${REGISTRY}/routed:1`;
/** Accepts connections, answers 503 on every path: ready by TCP, never by HTTP. */
const UNWELL = `${REGISTRY}/unwell:1`;
/** Sends its status line, then a header a byte every 200 ms, never finishing it. */
const TRICKLING = `${REGISTRY}/trickling:1`;
const IMAGES: Record<string, MemoryImage> = {
  [ROUTED]: { serves: true, statusFor: (path) => (path === '/healthz' || path === `/${'a'.repeat(255)}` ? 200 : path === '/moved' ? 302 : 404) },
  [UNWELL]: { serves: true, statusFor: () => 503 },
  [TRICKLING]: { serves: true, trickles: true },
};

eachStore((kind) => {
  describe(`health checks on the memory driver (${kind})`, () => {
    let t: TestServer;
    let mem: ReturnType<typeof memoryRuntime>;
    let stopClock = () => {};

    before(async () => {
      // The driver's time (its readiness deadline, the probes' pauses and bounds, the trickling
      // answer's pace) runs fifty times faster than real time: a check that never passes fails
      // its deploy after 10 s of it (0.2 s), and a try of 5 s takes a tenth of a second. It moves
      // a step per turn of the event loop: a starved test process slows it as much as its probes.
      const clock = new ManualClock(Date.now());
      stopClock = clock.run(50);
      mem = memoryRuntime(IMAGES, clock);
      t = await startServer({ store: kind, overrides: { runtime: mem.runtime, readyTimeoutMs: 10_000 } });
    });
    after(async () => {
      await t.close();
      await mem.driver.close();
      stopClock();
    });

    test('an HTTP check: ready once its path answers 2xx or 3xx; a path answering 404 fails the deploy saying so', async () => {
      const a = await newTenant(t);
      const healthy = await a.client.createService({ name: 'healthy', image: ROUTED, health_check: { type: 'http', path: '/healthz' } });
      assert.deepEqual(healthy.health_check, { type: 'http', path: '/healthz' });
      assert.equal((await settled(a, healthy.id)).status, 'running');
      const moved = await a.client.createService({ name: 'moved', image: ROUTED, health_check: { type: 'http', path: '/moved' } });
      assert.equal((await settled(a, moved.id)).status, 'running', 'a redirect counts as an answer, and is not followed (its page answers 404)');
      const longest = await a.client.createService({ name: 'longest', image: ROUTED, health_check: { type: 'http', path: `/${'a'.repeat(255)}` } });
      assert.equal((await settled(a, longest.id)).status, 'running', 'a path of 256 characters');

      const missing = await a.client.createService({ name: 'missing', image: ROUTED, health_check: { type: 'http', path: '/nowhere?x=1' } });
      const failed = await settled(a, missing.id);
      assert.equal(failed.status, 'failed');
      assert.match(failed.last_error ?? '', /not ready within 10 s: health check GET \/nowhere\?x=1: answered 404/);
      const left = (await mem.driver.list({ tenantId: a.id })).filter((w) => w.state === 'running').map((w) => w.name);
      assert.equal(left.length, 3, `only the three ready services run: ${left.join(', ')}`);
    });

    test('the default is a TCP connect: a service answering 503 everywhere is ready without a check, not with an HTTP one', async () => {
      const a = await newTenant(t);
      const plain = await a.client.createService({ name: 'plain', image: UNWELL });
      assert.deepEqual(plain.health_check, { type: 'tcp' });
      assert.equal((await settled(a, plain.id)).status, 'running');
      const tcp = await a.client.createService({ name: 'tcp', image: UNWELL, health_check: { type: 'tcp' } });
      assert.equal((await settled(a, tcp.id)).status, 'running');
      const checked = await a.client.createService({ name: 'checked', image: UNWELL, health_check: { type: 'http', path: '/' } });
      const failed = await settled(a, checked.id);
      assert.equal(failed.status, 'failed');
      assert.match(failed.last_error ?? '', /health check GET \/: answered 503/);
    });

    test('a try is bounded as a whole: a service trickling its answer fails the deploy after 5 s, not never', async () => {
      const a = await newTenant(t);
      const s = await a.client.createService({ name: 'trickling', image: TRICKLING, health_check: { type: 'http', path: '/' } });
      const failed = await settled(a, s.id);
      assert.equal(failed.status, 'failed');
      assert.match(failed.last_error ?? '', /health check GET \/: no answer within 5 s/);
    });

    test('a snapshot keeps the check, and a service made from it checks the same path', async () => {
      const a = await newTenant(t);
      const s = await a.client.createService({ name: 'original', image: ROUTED, health_check: { type: 'http', path: '/healthz' } });
      await settled(a, s.id);
      const snap = await a.client.createSnapshot(s.id, 'with-check');
      assert.deepEqual(snap.health_check, { type: 'http', path: '/healthz' });
      const copy = await a.client.serviceFromSnapshot(snap.id, 'copy');
      assert.deepEqual(copy.health_check, { type: 'http', path: '/healthz' });
      assert.equal((await settled(a, copy.id)).status, 'running');
      const refused = await a.client.raw('POST', '/v1/services', { query: { from_snapshot: snap.id }, body: { name: 'other', health_check: { type: 'tcp' } } });
      assert.equal(refused.status, 400, 'the check comes from the snapshot');
    });

    test('a check that is not one is refused with 400 and creates nothing', async () => {
      const a = await newTenant(t);
      const refusedChecks: Array<[unknown, string]> = [
        [{ type: 'http', path: 'healthz' }, 'body: health_check.path must match pattern "^/[!-"$-~]*$"'],
        [{ type: 'http', path: '/a b' }, 'body: health_check.path must match pattern "^/[!-"$-~]*$"'],
        [{ type: 'http', path: '/a\r\nX-Injected: 1' }, 'body: health_check.path must match pattern "^/[!-"$-~]*$"'],
        [{ type: 'http', path: '/é' }, 'body: health_check.path must match pattern "^/[!-"$-~]*$"'],
        [{ type: 'http', path: '/#top' }, 'body: health_check.path must match pattern "^/[!-"$-~]*$"'],
        [{ type: 'http', path: `/${'a'.repeat(256)}` }, 'body: health_check.path must NOT have more than 256 characters'],
        [{ type: 'http' }, 'body: health_check: an http check needs a path, such as "/healthz"'],
        [{ type: 'tcp', path: '/' }, 'body: health_check: a tcp check takes no path'],
        [{ type: 'grpc', path: '/' }, 'body: health_check.type must be equal to constant'],
        [{ type: 'http', path: '/', port: 1 }, 'body: health_check: unknown or invalid field "port"'],
        ['http', 'body: health_check must be object'],
      ];
      for (const [health_check, message] of refusedChecks) {
        const r = await a.client.raw<{ error: string }>('POST', '/v1/services', { body: { name: 'bad', image: ROUTED, health_check } });
        assert.equal(r.status, 400, JSON.stringify(health_check));
        assert.equal(r.body.error, message, JSON.stringify(health_check));
      }
      assert.deepEqual(await a.client.listServices(), []);
    });
  });
});
