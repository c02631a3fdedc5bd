// Health routes, against the real Docker Engine that `make test` starts (and a dead address).
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import Docker from 'dockerode';
import type { Runtime } from '../src/runtime/index.js';
import { dockerOptions } from '../src/runtime/docker.js';
import { DOCKER_HOST, newTenant, startServer, type TestServer } from './harness.js';
import { inertRuntime } from './inert-runtime.js';

describe('health', () => {
  test('GET /v1/system/health is public and never touches the store', async () => {
    const t = await startServer();
    try {
      assert.deepEqual(await t.client.health(), { status: 'ok' });
      await t.deps.store.close();
      const r = await t.client.raw('GET', '/v1/system/health');
      assert.deepEqual([r.status, r.body], [200, { status: 'ok' }]);
    } finally {
      await t.close().catch(() => {});
    }
  });
});

describe('health detail against the real engine', () => {
  let t: TestServer;
  const docker = new Docker(dockerOptions(DOCKER_HOST, 10_000));
  const network = `tenant-healthtest-${randomBytes(4).toString('hex')}`;
  before(async () => {
    t = await startServer();
  });
  after(async () => {
    await docker.getNetwork(network).remove().catch(() => {});
    await t.close();
  });

  test('needs a key', async () => {
    assert.equal((await t.client.raw('GET', '/v1/system/health/detailed')).status, 401);
  });

  test('reports the engine, gVisor, disks, storage and tenant networks; cached 30 s unless fresh=true', async () => {
    const a = await newTenant(t);
    const d1 = await a.client.healthDetailed();
    const engine = await docker.version();
    assert.deepEqual(d1.runtime, { available: true, version: engine.Version });
    const info = (await docker.info()) as { Runtimes?: Record<string, unknown> };
    assert.equal(d1.sandbox.available, 'runsc' in (info.Runtimes ?? {}));
    if (d1.sandbox.available) assert.notEqual(d1.sandbox.version, '');
    assert.ok(d1.disk.total_gb > 0 && d1.disk.used_percent > 0 && d1.disk.used_percent < 100);
    assert.ok(d1.runtime_disk.total_gb > 0);
    assert.ok(d1.runtime_storage.total_size_gb >= 0);
    assert.deepEqual(d1.store, { available: true, dialect: 'sqlite' });
    assert.equal(d1.status, d1.disk.used_percent > 90 || d1.runtime_disk.used_percent > 90 ? 'degraded' : 'ok');

    await docker.createNetwork({ Name: network, Driver: 'bridge' });
    const cached = await a.client.healthDetailed();
    assert.equal(cached.proxy_networks, d1.proxy_networks, 'served from the cache');
    assert.equal(cached.checked_at, d1.checked_at);
    const fresh = await a.client.healthDetailed(true);
    assert.equal(fresh.proxy_networks, d1.proxy_networks + 1, 'fresh=true counts the new tenant-* network');
    await docker.getNetwork(network).remove();
    t.clock.advance(29_000);
    assert.equal((await a.client.healthDetailed()).proxy_networks, fresh.proxy_networks, 'still cached at 29 s');
    t.clock.advance(1_000);
    assert.equal((await a.client.healthDetailed()).proxy_networks, d1.proxy_networks, 'gathered again at 30 s');
  });

  test('an engine that does not answer is available: false, not an error', async () => {
    const dead = await startServer({ config: { dockerHost: 'unix:///nonexistent/docker.sock' } });
    try {
      const a = await newTenant(dead);
      const d = await a.client.healthDetailed();
      assert.deepEqual(d.runtime, { available: false, version: '' });
      assert.equal(d.sandbox.available, false);
    } finally {
      await dead.close();
    }
  });
});

describe('degraded rules', () => {
  const fakeRuntime = (networks: number): Runtime => ({
    ...inertRuntime(),
    info: async () => ({ version: 'fake', runtimes: ['runc'], defaultRuntime: 'runc', dataRoot: '/', cgroupDriver: 'cgroupfs' }),
    storage: async () => ({ imagesBytes: 1, containersBytes: 2, volumesBytes: 3, buildCacheBytes: 4 }),
    countNetworks: async () => networks,
  });

  test('more than 200 tenant-* networks is degraded; 200 is not', async () => {
    for (const [n, status] of [[200, 'ok'], [201, 'degraded']] as const) {
      const t = await startServer({ overrides: { runtime: fakeRuntime(n) } });
      try {
        const a = await newTenant(t);
        const d = await a.client.healthDetailed();
        assert.equal(d.proxy_networks, n);
        assert.equal(d.runtime_storage.images_size_bytes, 1);
        if (d.disk.used_percent <= 90) assert.equal(d.status, status);
      } finally {
        await t.close();
      }
    }
  });

  test('a failing store ping is degraded', async () => {
    const t = await startServer({ overrides: { runtime: fakeRuntime(0) } });
    try {
      const a = await newTenant(t);
      const store: { ping: () => Promise<void> } = t.deps.store;
      const realPing = store.ping;
      store.ping = async () => {
        throw new Error('store down');
      };
      const d = await a.client.healthDetailed(true);
      store.ping = realPing;
      assert.equal(d.status, 'degraded');
      assert.equal(d.store.available, false);
    } finally {
      await t.close();
    }
  });
});
