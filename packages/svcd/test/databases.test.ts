// Managed databases against the real engine, on the stand-in images built from Debian packages
// (operator-images.ts), checked with the real clients: psql and redis-cli.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { after, before, describe, test } from 'node:test';
import { promisify } from 'node:util';
import type { DatabaseRecord, SvcClient } from '@svc/client';
import { tenantNetworkName } from '../src/runtime/index.js';
import { databaseWorkloadName } from '../src/databases/databases.js';
import { ADMIN_TOKEN, DATABASE_TEST_PLAN, databaseTestPlan, startServer, waitFor, type TestServer } from './harness.js';
import { BUSYBOX_IMAGE, docker, engineTenants } from './images.js';
import { POSTGRES_IMAGE, REDIS_IMAGE, ensureDbImages } from './operator-images.js';
import { killableSvcd } from './svcd-process.js';

const run = promisify(execFile);
const psql = (url: string, sql: string) => run('psql', [url, '-At', '-c', sql], { timeout: 20_000 }).then((r) => r.stdout.trim());
const redisCli = (url: string, ...args: string[]) => run('redis-cli', ['-u', url, '--no-auth-warning', ...args], { timeout: 20_000 }).then((r) => r.stdout.trim());

async function running(c: SvcClient, id: string): Promise<DatabaseRecord> {
  const d = await waitFor(`database ${id} to leave provisioning`, async () => {
    const now = await c.database(id);
    return now.status === 'provisioning' ? undefined : now;
  }, 180_000);
  assert.equal(d.status, 'running', d.last_error ?? '');
  return d;
}

/** A container on a tenant's network (what a service is, network-wise) running redis-cli. */
async function redisCliOn(tenantId: string, host: string, password: string): Promise<string> {
  const c = await docker.createContainer({
    Image: REDIS_IMAGE,
    // timeout: a connection the network drops would otherwise wait for TCP's retries.
    Entrypoint: ['timeout', '5', 'redis-cli'],
    Cmd: ['-h', host, '-a', password, '--no-auth-warning', 'PING'],
    HostConfig: { NetworkMode: tenantNetworkName(tenantId), CapDrop: ['ALL'] },
  });
  try {
    await c.start();
    await c.wait();
    const out = await c.logs({ stdout: true, stderr: true });
    return out.toString('utf8').replace(/[\x00-\x08]/g, '').trim();
  } finally {
    await c.remove({ force: true, v: true });
  }
}

describe('managed databases', () => {
  let t: TestServer;
  const tenants = engineTenants(() => t);
  const tenant = () => tenants.add();
  before(async () => {
    await ensureDbImages();
    t = await startServer({ realTime: true, config: { adminTokens: [ADMIN_TOKEN] }, overrides: { databaseReadyTimeoutMs: 60_000 } });
    t.client.adminToken = ADMIN_TOKEN;
  });
  after(async () => {
    await t.close();
    await tenants.cleanup();
  });

  test('validation and quota: names, types, max_databases; the record never shows the password', async () => {
    const a = await tenant();
    const bad: Array<[unknown, RegExp]> = [
      [{ name: 'db', type: 'mysql' }, /type must be postgres or redis/],
      [{ name: 'Bad_Name', type: 'redis' }, /name/],
      [{ name: '9lives', type: 'redis' }, /name/],
      [{ type: 'redis' }, /name/],
    ];
    for (const [body, msg] of bad) {
      const r = await a.client.raw<{ error: string }>('POST', '/v1/databases', { body });
      assert.equal(r.status, 400, JSON.stringify(body));
      assert.match(r.body.error, msg);
    }
    await t.client.patchQuotas(a.id, { max_databases: 1 });
    const r = await a.client.raw<DatabaseRecord>('POST', '/v1/databases', { body: { name: 'cache', type: 'redis' } });
    assert.equal(r.status, 201);
    assert.equal(r.body.status, 'provisioning');
    assert.doesNotMatch(JSON.stringify(r.body), /password/i);
    const over = await a.client.raw<{ error: string }>('POST', '/v1/databases', { body: { name: 'second', type: 'redis' } });
    assert.equal(over.status, 409);
    assert.match(over.body.error, /quota exceeded: max_databases \(1\)/);
    await t.client.patchQuotas(a.id, { max_databases: 3 });
    const dup = await a.client.raw<{ error: string }>('POST', '/v1/databases', { body: { name: 'cache', type: 'postgres' } });
    assert.equal(dup.status, 409);
    assert.match(dup.body.error, /exists/);
    assert.equal((await a.client.databases()).length, 1);
    const other = await tenant();
    assert.equal((await other.client.raw('GET', `/v1/databases/${r.body.id}`)).status, 404);
    assert.equal((await other.client.raw('GET', `/v1/databases/${r.body.id}/connection-string`)).status, 404);
    assert.equal((await other.client.raw('DELETE', `/v1/databases/${r.body.id}`)).status, 404);
  });

  test('postgres: psql connects with the revealed string, writes, and the reveal is audit-logged', async () => {
    const a = await tenant();
    await databaseTestPlan(t, a.id);
    const d = await running(a.client, (await a.client.createDatabase({ name: 'main', type: 'postgres' })).id);
    assert.deepEqual([d.host, d.port, d.username, d.database], ['main', 5432, 'svc', 'app']);
    const conn = await a.client.connectionString(d.id);
    assert.match(conn.connection_string, new RegExp(`^postgres://svc:[^@]+@127\\.0\\.0\\.1:${d.host_port}/app$`));
    assert.match(conn.internal_connection_string, /^postgres:\/\/svc:[^@]+@main:5432\/app$/);
    await psql(conn.connection_string, 'CREATE TABLE notes (body text); INSERT INTO notes VALUES (\'kept\')');
    assert.equal(await psql(conn.connection_string, 'SELECT body FROM notes'), 'kept');
    await assert.rejects(psql(conn.connection_string.replace(conn.password, 'wrong-password'), 'SELECT 1'), /password authentication failed/);
    const actions = (await a.client.activity({ resource_type: 'database' })).map((e) => e.action);
    assert.ok(actions.includes('database.connection_revealed'));
    // Hardened like every workload, with the data on a named volume.
    const info = await docker.getContainer(databaseWorkloadName(d.id)).inspect();
    assert.deepEqual(info.HostConfig.CapDrop, ['ALL']);
    assert.equal(info.Mounts[0]?.Name, databaseWorkloadName(d.id));
  });

  test('redis: the tenant reaches it by host name on its network; another tenant cannot', async () => {
    const a = await tenant();
    const b = await tenant();
    const d = await running(a.client, (await a.client.createDatabase({ name: 'cache', type: 'redis' })).id);
    const conn = await a.client.connectionString(d.id);
    assert.equal(await redisCli(conn.connection_string, 'SET', 'greeting', 'hello'), 'OK');
    assert.equal(await redisCli(conn.connection_string, 'GET', 'greeting'), 'hello');
    assert.equal(await redisCliOn(a.id, 'cache', conn.password), 'PONG', 'same tenant, by host name');
    await b.client.createDatabase({ name: 'other', type: 'redis' }); // gives b its network
    await waitFor('b network', async () => ((await docker.listNetworks({ filters: { name: [tenantNetworkName(b.id)] } })).length ? true : undefined));
    const ip = Object.values((await docker.getContainer(databaseWorkloadName(d.id)).inspect()).NetworkSettings.Networks)[0]?.IPAddress ?? '';
    assert.doesNotMatch(await redisCliOn(b.id, ip, conn.password), /PONG/, 'another tenant: not by address');
    assert.doesNotMatch(await redisCliOn(b.id, 'cache', conn.password), /PONG/, 'another tenant: not by name');
  });

  test('delete removes the container and the volume; suspension stops databases, a reveal starts them again', async () => {
    const a = await tenant();
    const d = await running(a.client, (await a.client.createDatabase({ name: 'temp', type: 'redis' })).id);
    const conn = await a.client.connectionString(d.id);
    assert.equal(await redisCli(conn.connection_string, 'SET', 'k', 'v'), 'OK');

    await a.client.raw('DELETE', '/v1/tenant');
    assert.equal((await t.deps.store.databases.findAny(d.id))?.status, 'stopped');
    await assert.rejects(docker.getContainer(databaseWorkloadName(d.id)).inspect(), /no such container/i);
    const back = await t.client.reactivateTenant(a.id);
    const c = a.client.withKey(back.api_key);
    assert.equal((await c.database(d.id)).status, 'stopped', 'reactivation leaves it stopped');
    await c.connectionString(d.id);
    await running(c, d.id);
    assert.equal(await redisCli(conn.connection_string, 'GET', 'k'), 'v', 'the data survived');

    assert.equal((await c.raw('DELETE', `/v1/databases/${d.id}`)).status, 204);
    await assert.rejects(docker.getContainer(databaseWorkloadName(d.id)).inspect(), /no such container/i);
    await assert.rejects(docker.getVolume(databaseWorkloadName(d.id)).inspect(), /no such volume/i);
    assert.equal((await c.raw('GET', `/v1/databases/${d.id}`)).status, 404);
  });

  test('a database that cannot start ends failed with last_error', async () => {
    const broken = await startServer({ realTime: true, config: { databaseImages: { postgres: BUSYBOX_IMAGE, redis: REDIS_IMAGE } }, overrides: { databaseReadyTimeoutMs: 5_000 } });
    try {
      const a = await tenants.add(broken);
      const d = await a.client.createDatabase({ name: 'nope', type: 'postgres' });
      const done = await waitFor('failed', async () => {
        const now = await a.client.database(d.id);
        return now.status === 'provisioning' ? undefined : now;
      }, 60_000);
      assert.equal(done.status, 'failed');
      assert.ok(done.last_error);
    } finally {
      await broken.close();
    }
  });
});

describe('databases across a restart of svcd', () => {
  test('postgres data survives svcd being killed and the container being recreated', async () => {
    await ensureDbImages();
    const svcd = await killableSvcd('db-restart', ['--postgres-image', POSTGRES_IMAGE, '--redis-image', REDIS_IMAGE, '--database-ports', '23000-23099'], {}, DATABASE_TEST_PLAN);
    try {
      const c = svcd.client;
      const dbId = (await c.createDatabase({ name: 'durable', type: 'postgres' })).id;
      await running(c, dbId);
      const conn = await c.connectionString(dbId);
      await psql(conn.connection_string, "CREATE TABLE t (v text); INSERT INTO t VALUES ('survives')");
      await svcd.kill();
      // The container goes too (as after a host reboot): svcd provisions it again on its volume.
      await docker.getContainer(databaseWorkloadName(dbId)).remove({ force: true });
      const c2 = await svcd.restart();
      await waitFor('the database back', async () => ((await c2.database(dbId)).status === 'running' && (await docker.getContainer(databaseWorkloadName(dbId)).inspect().then((i) => i.State.Running, () => false)) ? true : undefined), 180_000);
      assert.equal(await waitFor('the row', () => psql(conn.connection_string, 'SELECT v FROM t').catch(() => undefined), 60_000), 'survives');
    } finally {
      await svcd.close();
    }
  });
});
