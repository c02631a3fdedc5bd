// Health routes, against the real Docker Engine that `make test` starts (and a dead address).
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import Docker from 'dockerode';
import type { Runtime } from '../src/runtime/index.js';
import { dockerOptions } from '../src/runtime/docker/docker-runtime.js';
import type { DiskReader } from '../src/system/health.js';
import { ApiError, SvcClient } from '@svc/client';
import { ADMIN_TOKEN, DOCKER_HOST, newTenant, startServer, type TestServer } from './harness.js';
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
    t = await startServer({ config: { adminTokens: [ADMIN_TOKEN] } });
  });
  after(async () => {
    await docker.getNetwork(network).remove().catch(() => {});
    await t.close();
  });

  test('needs a key', async () => {
    assert.equal((await t.client.raw('GET', '/v1/system/health/detailed')).status, 401);
  });

  test("on one engine there are no cluster nodes: the detail counts none, the operator's node routes answer 409", async () => {
    const a = await newTenant(t);
    assert.deepEqual((await a.client.healthDetailed(true)).nodes, { total: 0, down: 0 });
    const operator = new SvcClient({ baseUrl: t.url, adminToken: ADMIN_TOKEN });
    await assert.rejects(operator.listClusterNodes(), (err: ApiError) => err.status === 409 && /one Docker Engine/.test(err.message));
    await assert.rejects(operator.setClusterNodeAvailability('node2', 'drain'), (err: ApiError) => err.status === 409);
    // Not for tenants: their key is no operator's token.
    assert.equal((await a.client.raw('GET', '/v1/system/nodes')).status, 401);
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
    // What the engine counts now (tenant-* networks are the machine's: another test's may come
    // or go meanwhile), not the cached count, which still holds this test's network.
    const now = (await docker.listNetworks({ filters: { name: ['tenant-'] } })).filter((n) => n.Name.startsWith('tenant-')).length;
    assert.equal((await a.client.healthDetailed()).proxy_networks, now, 'gathered again at 30 s');
  });

  test("a df the engine is already running (the metering pass's) leaves the detail whole: concurrent readings share one", async () => {
    const a = await newTenant(t);
    const info = (await docker.info()) as { Runtimes?: Record<string, unknown> };
    // The metering pass's disk reading and the health detail's at once, a few times over: the
    // engine refuses a second df while one runs, and that used to void the detail's every part.
    for (let i = 0; i < 3; i++) {
      // Another client's df first, so that svcd's own meet it running.
      const other = docker.df().catch(() => null);
      const [detail] = await Promise.all([a.client.healthDetailed(true), t.deps.runtime.diskUsage(), t.deps.runtime.storage(), other]);
      assert.equal(detail.sandbox.available, 'runsc' in (info.Runtimes ?? {}), `round ${i}: gVisor is still reported`);
      assert.ok(detail.runtime_storage.total_size_gb > 0, `round ${i}: the storage was read (waited out another client's df)`);
    }
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
  const DATA_ROOT = '/engine-data-root';
  const fakeRuntime = (networks: number): Runtime => ({
    ...inertRuntime(),
    info: async () => ({ version: 'fake', runtimes: ['runc'], defaultRuntime: 'runc', dataRoot: DATA_ROOT, cgroupDriver: 'cgroupfs' }),
    storage: async () => ({ imagesBytes: 1, containersBytes: 2, volumesBytes: 3, buildCacheBytes: 4 }),
    countNetworks: async () => networks,
  });
  /** A disk reader with a figure for svcd's data dir and one for the engine's data root; null: it cannot be read. */
  const disks = (dataDir: number | null, engineRoot: number | null): DiskReader => async (path) => {
    const used = path === DATA_ROOT ? engineRoot : dataDir;
    if (used === null) throw new Error(`statfs ${path}: EACCES`);
    return { total_gb: 100, free_gb: 100 - used, used_percent: used };
  };
  async function detail(overrides: { runtime: Runtime; readDisk: DiskReader }) {
    const t = await startServer({ overrides });
    try {
      return await (await newTenant(t)).client.healthDetailed();
    } finally {
      await t.close();
    }
  }

  test('more than 200 tenant-* networks is degraded; 200 is not', async () => {
    for (const [n, status] of [[200, 'ok'], [201, 'degraded']] as const) {
      const d = await detail({ runtime: fakeRuntime(n), readDisk: disks(50, 50) });
      assert.equal(d.proxy_networks, n);
      assert.equal(d.runtime_storage.images_size_bytes, 1);
      assert.equal(d.status, status);
    }
  });

  test("either disk above 90 percent used is degraded, 90 is not; svcd's disk unread is degraded, the engine's is not", async () => {
    const cases: Array<[dataDir: number | null, engineRoot: number | null, status: 'ok' | 'degraded']> = [
      [90, 90, 'ok'],
      [90.01, 50, 'degraded'],
      [50, 90.01, 'degraded'],
      // Nothing says svcd's own disk is not full.
      [null, 50, 'degraded'],
      // The engine's data root is a path on the engine's host, which may be another machine.
      [50, null, 'ok'],
    ];
    for (const [dataDir, engineRoot, status] of cases) {
      const d = await detail({ runtime: fakeRuntime(0), readDisk: disks(dataDir, engineRoot) });
      assert.equal(d.status, status, `data dir ${dataDir} %, engine data root ${engineRoot} %`);
      assert.equal(d.disk.used_percent, dataDir ?? 0, 'an unread disk is reported as zeros');
      assert.equal(d.runtime_disk.used_percent, engineRoot ?? 0);
    }
  });

  test('a failing store ping is degraded', async () => {
    const t = await startServer({ overrides: { runtime: fakeRuntime(0), readDisk: disks(50, 50) } });
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
