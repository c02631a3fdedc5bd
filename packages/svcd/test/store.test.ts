// One store suite, run against SQLite and PostgreSQL alike.
import assert from 'node:assert/strict';
import type { SealedText } from '../src/secrets/sealer.js';
import { after, before, describe, test } from 'node:test';
import { execFile } from 'node:child_process';
import { existsSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import BetterSqlite3 from 'better-sqlite3';
import { Kysely, PostgresDialect, SqliteDialect } from 'kysely';
import { Migrator } from 'kysely/migration';
import pg from 'pg';
import { isUniqueViolation, openStore, type Database, type Store } from '../src/store/index.js';
import { migrationProvider } from '../src/store/migrations/index.js';
import { WalCheckpointer } from '../src/store/wal-checkpointer.js';
import { eachStore, storeLocation, tenantRow as seedRow, waitFor } from './harness.js';

const T = 1_800_000_000;

/** A unique violation, on either store: PostgreSQL's 23505, SQLite's "UNIQUE constraint failed". */
const uniqueViolation = (e: unknown) => (e as { code?: string }).code === '23505' || String((e as Partial<Error>).message).includes('UNIQUE');

function tenantRow(id: string, name: string, status: 'active' | 'suspended' = 'active') {
  // A fractional CPU quota checks that floats survive both engines.
  return seedRow(id, name, { status, created_at: T, updated_at: T, max_cpu_cores: 2.5 });
}

/** A running service of `tenantId` as the services table holds it (port 8000, nothing deployed). */
function serviceRow(id: string, tenantId: string, name: string, dnsLabel: string) {
  return {
    id, tenant_id: tenantId, name, name_key: name, image: 'x', port: 8000, status: 'running' as const, desired_state: 'running' as const,
    dns_label: dnsLabel, last_error: null, container_id: null, upstream: null, crash_count: 0, crash_window_start: null,
    last_crash_at: null, circuit_open_at: null, created_at: T, updated_at: T,
  };
}

eachStore((kind) => {
  describe(`store (${kind})`, () => {
    let store: Store;
    let second: Store;
    let cleanup: () => Promise<void>;

    before(async () => {
      const loc = await storeLocation(kind);
      cleanup = loc.cleanup;
      store = await openStore(loc);
      // A second handle on the same database stands for a second svcd process; opening it
      // also proves migrations are idempotent.
      second = await openStore(loc);
    });
    after(async () => {
      await store.close();
      await second.close();
      await cleanup();
    });

    test('tenants: insert, read back with numeric types, unique name and email regardless of case', async () => {
      await store.tenants.insert(tenantRow('t1', 'Alpha'));
      const t = await store.tenants.findById('t1');
      assert.equal(t?.name, 'Alpha');
      assert.equal(t.created_at, T);
      assert.equal(typeof t.created_at, 'number');
      assert.equal(t.max_cpu_cores, 2.5);
      await assert.rejects(store.tenants.insert({ ...tenantRow('t2', 'ALPHA'), email_key: 'other@x.io' }), uniqueViolation, 'the name, in another case');
      await assert.rejects(store.tenants.insert({ ...tenantRow('t3', 'beta'), email_key: 'alpha@x.io' }), uniqueViolation, 'the email key');
      assert.equal(await store.tenants.countActive(), 1);
    });

    test('tenants: status transitions only from the expected state', async () => {
      await store.tenants.insert(tenantRow('s1', 'gamma'));
      assert.equal(await store.tenants.transitionStatus('s1', 'active', 'suspended', T + 1), true);
      assert.equal(await store.tenants.transitionStatus('s1', 'active', 'suspended', T + 2), false);
      assert.equal((await store.tenants.findById('s1'))?.status, 'suspended');
      assert.equal(await store.tenants.transitionStatus('missing', 'active', 'suspended', T), false);
    });

    test('transactions roll back everything when the function throws', async () => {
      await assert.rejects(
        store.transaction(async (tx) => {
          await tx.tenants.insert(tenantRow('r1', 'rolled'));
          throw new Error('boom');
        }),
        /boom/,
      );
      assert.equal(await store.tenants.findById('r1'), undefined);
    });

    test('api keys: scoped revoke, active counts, auth read joins the tenant status', async () => {
      await store.tenants.insert(tenantRow('k1', 'keyowner'));
      await store.tenants.insert(tenantRow('k2', 'other'));
      const key = { tenant_id: 'k1', name: 'n', prefix: 'p', secret_hash: 'ab', created_at: T, last_used_at: null, expires_at: null, revoked_at: null };
      await store.apiKeys.insert({ ...key, id: 'key-a' });
      await store.apiKeys.insert({ ...key, id: 'key-b', created_at: T + 1 });
      assert.equal(await store.apiKeys.countActive('k1'), 2);
      assert.equal(await store.apiKeys.revoke('k2', 'key-a', T), false, 'another tenant cannot revoke it');
      assert.equal(await store.apiKeys.revoke('k1', 'key-a', T), true);
      assert.equal(await store.apiKeys.revoke('k1', 'key-a', T), false, 'already revoked');
      assert.deepEqual((await store.apiKeys.listActive('k1')).map((k) => k.id), ['key-b']);
      const auth = await store.apiKeys.findForAuth('key-b');
      assert.equal(auth?.tenant_status, 'active');
      await store.apiKeys.touch('key-b', T + 99);
      assert.equal((await store.apiKeys.findForAuth('key-b'))?.last_used_at, T + 99);
    });

    test('activity: newest first, filters and pagination, scoped by tenant', async () => {
      for (let i = 0; i < 5; i++) {
        await store.activity.insert({
          id: `a${i}`,
          tenant_id: 'act',
          action: i % 2 ? 'key.created' : 'service.created',
          resource_type: i % 2 ? 'key' : 'service',
          resource_id: `r${i}`,
          service_id: i % 2 ? null : 'svc1',
          details: '{}',
          created_at: T + i,
        });
      }
      await store.activity.insert({ id: 'foreign', tenant_id: 'other', action: 'key.created', resource_type: 'key', resource_id: 'x', service_id: null, details: '{}', created_at: T });
      const all = await store.activity.list({ tenantId: 'act', limit: 10, offset: 0 });
      assert.deepEqual(all.map((a) => a.id), ['a4', 'a3', 'a2', 'a1', 'a0']);
      assert.deepEqual((await store.activity.list({ tenantId: 'act', limit: 2, offset: 1 })).map((a) => a.id), ['a3', 'a2']);
      assert.deepEqual((await store.activity.list({ tenantId: 'act', action: 'key.created', limit: 10, offset: 0 })).map((a) => a.id), ['a3', 'a1']);
      assert.deepEqual((await store.activity.list({ tenantId: 'act', resourceType: 'service', since: T + 2, limit: 10, offset: 0 })).map((a) => a.id), ['a4', 'a2']);
      assert.equal((await store.activity.list({ tenantId: 'act', serviceId: 'svc1', limit: 10, offset: 0 })).length, 3);
    });

    test('idempotency: one claim wins, the stored answer comes back, expired keys are reused', async () => {
      const c = { tenantId: 'i1', key: 'k', method: 'POST', path: '/v1/x', bodyHash: 'h', now: T, expiresAt: T + 600 };
      assert.equal(await store.idempotency.claim(c), undefined);
      const held = await second.idempotency.claim(c);
      assert.equal(held?.state, 'pending');
      // The store keeps what it is given; sealing is the API layer's (api/idempotency.ts).
      await store.idempotency.complete('i1', 'k', 201, 'application/json', '{"ok":true}' as SealedText);
      const done = await second.idempotency.claim(c);
      assert.equal(done?.state, 'done');
      assert.equal(done.status_code, 201);
      assert.equal(done.response_body, '{"ok":true}');
      assert.equal(await store.idempotency.claim({ ...c, now: T + 600, expiresAt: T + 1200 }), undefined, 'expired: claimable again');
      assert.equal(await store.idempotency.pruneExpired(T + 1200), 1);
    });

    test('job locks: one holder at a time across processes; expired leases are taken over', async () => {
      const now = T * 1000;
      assert.equal(await store.jobLocks.tryAcquire('job', 'p1', now, 1000), true);
      assert.equal(await second.jobLocks.tryAcquire('job', 'p2', now + 10, 1000), false);
      assert.equal(await store.jobLocks.tryAcquire('job', 'p1', now + 20, 1000), true, 'the holder extends its lease');
      assert.equal(await second.jobLocks.tryAcquire('job', 'p2', now + 1020, 1000), true, 'expired lease taken over');
      await second.jobLocks.release('job', 'p2');
      assert.equal(await store.jobLocks.tryAcquire('job', 'p1', now + 1030, 1000), true);
    });

    test('builds: one claim wins across processes; output is capped with its tail kept; they go with their service', async () => {
      await store.tenants.insert(tenantRow('b1', 'builder'));
      await store.services.insert(serviceRow('svc1', 'b1', 'web', 'web'));
      const build = (id: string, created: number) => ({
        id, tenant_id: 'b1', service_id: 'svc1', status: 'queued' as const, source_type: 'git', source_url: 'https://x/y.git', source_ref: null,
        image: `svc/b1/svc1:${id}`, commit_sha: null, last_error: null, deployment_id: null, holder: null, lease_until_ms: null,
        log_bytes: 0, log_truncated: 0, created_at: created, started_at: null, finished_at: null, duration_ms: null,
      });
      await store.builds.insert(build('bb2', T + 1));
      await store.builds.insert(build('bb1', T));
      assert.deepEqual((await store.builds.listQueued(10)).map((b) => b.id), ['bb1', 'bb2'], 'oldest first');
      assert.equal(await store.builds.countWithStatus('b1', 'queued'), 2);

      const claim = { status: 'running' as const, started_at: T + 5 };
      const [one, two] = await Promise.all([
        store.builds.transition('bb1', ['queued'], { ...claim, holder: 'p1' }),
        second.builds.transition('bb1', ['queued'], { ...claim, holder: 'p2' }),
      ]);
      assert.equal(Number(one) + Number(two), 1, 'exactly one process takes the build');
      const holder = (await store.builds.findAny('bb1'))!.holder!;
      assert.equal(await store.builds.updateRunning('bb1', holder === 'p1' ? 'p2' : 'p1', { commit_sha: 'abc' }), false, 'only the holder updates it');
      assert.equal(await store.builds.updateRunning('bb1', holder, { commit_sha: 'abc' }), true);
      assert.equal(await store.builds.find('other-tenant', 'svc1', 'bb1'), undefined, 'scoped by tenant');

      // 10-byte cap: the oldest chunks go, the last one always stays.
      for (const chunk of ['aaaa\n', 'bbbb\n', 'cccc\n']) await store.builds.appendLog('bb1', chunk, 10);
      assert.deepEqual((await store.builds.logChunks('bb1', 0, 1000)).map((c) => c.chunk), ['bbbb\n', 'cccc\n']);
      const row = await store.builds.findAny('bb1');
      assert.deepEqual([row?.log_bytes, row?.log_truncated], [10, 1]);
      assert.deepEqual((await store.builds.logChunks('bb1', 2, 1000)).map((c) => c.seq), [3], 'chunks after a sequence number');

      await store.services.delete('b1', 'svc1', 0);
      assert.equal(await store.builds.findAny('bb1'), undefined);
      assert.deepEqual(await store.builds.logChunks('bb1', 0, 1000), []);
    });

    test('databases: names unique per tenant, host ports unique across tenants, scoped reads and deletes', async () => {
      await store.tenants.insert(tenantRow('d1', 'dbowner'));
      await store.tenants.insert(tenantRow('d2', 'dbother'));
      const row = (id: string, tenant: string, name: string, port: number) => ({
        id, tenant_id: tenant, name, type: 'redis' as const, status: 'provisioning' as const, desired_state: 'running' as const,
        image: 'redis:7-alpine', username: 'default', database_name: '', sealed_password: 'sealed', host_port: port,
        container_id: null, last_error: null, created_at: T, updated_at: T,
      });
      await store.databases.insert(row('db1', 'd1', 'cache', 21001));
      await store.databases.insert(row('db2', 'd2', 'cache', 21002)); // same name, other tenant: fine
      await assert.rejects(store.databases.insert(row('db3', 'd1', 'cache', 21003)), uniqueViolation, 'a name once per tenant');
      await assert.rejects(second.databases.insert(row('db4', 'd2', 'other', 21001)), uniqueViolation, 'a host port once');
      assert.deepEqual((await store.databases.hostPorts()).sort(), [21001, 21002]);
      assert.equal(await store.databases.count('d1'), 1);
      assert.equal(await store.databases.find('d2', 'db1'), undefined, 'scoped by tenant');
      assert.equal(await store.databases.delete('d2', 'db1'), false);
      assert.equal(await store.databases.delete('d1', 'db1'), true);
      assert.deepEqual((await store.databases.listForTenant('d1')).length, 0);
    });

    test('kanban boards: one per tenant, host ports unique across tenants, deletes scoped by tenant', async () => {
      await store.tenants.insert(tenantRow('kt1', 'kbowner'));
      await store.tenants.insert(tenantRow('kt2', 'kbother'));
      const row = (id: string, tenant: string, port: number) => ({
        id, tenant_id: tenant, status: 'provisioning' as const, desired_state: 'running' as const, sealed_admin_token: 'sealed',
        host_port: port, container_id: null, last_error: null, node: null, ready_at: null, created_at: T, updated_at: T,
      });
      await store.kanban.insert(row('kb1', 'kt1', 7101));
      await assert.rejects(store.kanban.insert(row('kb2', 'kt1', 7102)), 'one board per tenant');
      await assert.rejects(second.kanban.insert(row('kb3', 'kt2', 7101)), 'a host port once');
      await store.kanban.insert(row('kb4', 'kt2', 7102));
      assert.deepEqual((await store.kanban.hostPorts()).sort(), [7101, 7102]);
      assert.equal((await store.kanban.findForTenant('kt2'))?.id, 'kb4');
      await store.kanban.update('kb4', { status: 'running', host_port: 7103, updated_at: T + 1 });
      assert.deepEqual((await store.kanban.listForTenant('kt2')).map((b) => [b.status, b.host_port]), [['running', 7103]]);
      assert.equal(await store.kanban.delete('kt2', 'kb1'), false, 'scoped by tenant');
      assert.equal(await store.kanban.delete('kt1', 'kb1'), true);
      assert.equal(await store.kanban.findAny('kb1'), undefined);
      assert.deepEqual((await store.kanban.listAll()).map((b) => b.id), ['kb4']);
    });

    test('environments: names unique per tenant, lease and expiry queries, previews go with their environment', async () => {
      await store.tenants.insert(tenantRow('et1', 'envowner'));
      await store.tenants.insert(tenantRow('et2', 'envother'));
      const row = (id: string, tenant: string, name: string, lease: number, status: 'creating' | 'running' | 'stopped' | 'expired' = 'running', expired: number | null = null) => ({
        id, tenant_id: tenant, name, template_id: 'default', image: 'ubuntu:24.04', status, lease_expires_at: lease, expired_at: expired,
        container_id: null, address: null, workload: null, last_error: null, created_at: T, updated_at: T, agent_token: null, published_port: null, node: null,
      });
      await store.environments.insert(row('e1', 'et1', 'dev', T + 10));
      await store.environments.insert(row('e2', 'et2', 'dev', T - 5, 'stopped')); // same name, other tenant: fine
      await assert.rejects(second.environments.insert(row('e3', 'et1', 'dev', T)), 'a name once per tenant');
      await store.environments.insert(row('e4', 'et1', 'old', T - 100, 'expired', T - 90_000));
      await store.environments.insert(row('e5', 'et1', 'new', T - 1, 'creating'));
      assert.deepEqual((await store.environments.leaseEnded(T)).map((e) => e.id), ['e2'], 'ended, not expired yet, not being created');
      assert.deepEqual((await store.environments.expiredBefore(T - 86_400)).map((e) => e.id), ['e4']);
      assert.equal(await store.environments.count('et1'), 3);
      assert.equal(await store.environments.find('et2', 'e1'), undefined, 'scoped by tenant');
      await store.environments.insertPreview({ id: 'p1', environment_id: 'e1', tenant_id: 'et1', name: 'web', port: 8000, created_at: T });
      await assert.rejects(store.environments.insertPreview({ id: 'p2', environment_id: 'e1', tenant_id: 'et1', name: 'web', port: 9000, created_at: T }), 'a preview name once per environment');
      await store.environments.update('e1', { address: '10.0.0.5' });
      assert.deepEqual((await store.environments.previewRoutes()).map((p) => [p.id, p.env_status, p.address]), [['p1', 'running', '10.0.0.5']]);
      assert.equal(await store.environments.deletePreview('e2', 'p1'), false, 'only through its environment');
      assert.equal(await store.environments.delete('e1', T), true);
      assert.deepEqual(await store.environments.previews('e1'), [], 'previews went with it');
    });

    test("published ports (a swarm's): one owner per port whatever its kind, also when two handles race; given up, a port rests, and a deleted owner's goes with it", async () => {
      await store.tenants.insert(tenantRow('pp1', 'portowner'));
      await store.services.insert(serviceRow('pps1', 'pp1', 'api', 'api-pp'));
      const env = (id: string) => ({
        id, tenant_id: 'pp1', name: id, template_id: 'default', image: 'ubuntu:24.04', status: 'running' as const, lease_expires_at: T + 60, expired_at: null,
        container_id: null, address: null, workload: null, last_error: null, created_at: T, updated_at: T, agent_token: null, published_port: null, node: null,
      });
      await store.environments.insert(env('ppe1'));
      await store.environments.insert(env('ppe2'));
      const ports = store.publishedPorts;
      // A service and an environment race for one port (on PostgreSQL on two handles: two svcd;
      // SQLite's, in one process, would wait on each other synchronously): one has it, the other
      // is refused by the claim's key.
      const other = kind === 'postgres' ? second : store;
      const race = await Promise.allSettled([ports.allocate('services', 'pps1', 31000), other.publishedPorts.allocate('environments', 'ppe1', 31000)]);
      assert.deepEqual(race.map((r) => r.status).sort(), ['fulfilled', 'rejected'], JSON.stringify(race));
      const refused = race.find((r): r is PromiseRejectedResult => r.status === 'rejected');
      assert.ok(isUniqueViolation(refused?.reason), String(refused?.reason));
      const serviceWon = race[0].status === 'fulfilled';
      assert.equal((await store.services.findAny('pps1'))?.published_port, serviceWon ? 31000 : null);
      assert.equal((await store.environments.findAny('ppe1'))?.published_port, serviceWon ? null : 31000, 'the loser holds nothing');
      // The loser takes another; an owner that has one is not given a second.
      assert.equal(await (serviceWon ? ports.allocate('environments', 'ppe1', 31001) : ports.allocate('services', 'pps1', 31001)), true);
      assert.equal(await ports.allocate('environments', 'ppe1', 31002), false, 'it has one');
      assert.deepEqual((await ports.taken(T)).sort(), [31000, 31001]);
      // Given up (moved into a changed range): unclaimed, and resting until `releasedAfter` passes it.
      const envPort = (await store.environments.findAny('ppe1'))?.published_port ?? assert.fail();
      assert.equal(await ports.release('environments', 'ppe1', envPort + 5, T), false, 'not the port it holds');
      assert.equal(await ports.release('environments', 'ppe1', envPort, T + 10), true);
      assert.deepEqual((await ports.taken(T)).sort(), [31000, 31001], 'resting');
      assert.deepEqual(await ports.taken(T + 10), [envPort === 31000 ? 31001 : 31000], 'rested');
      assert.equal(await ports.allocate('environments', 'ppe2', envPort), true, 'a rested port is given again');
      // A service's port written without a claim (an svcd of before the claims, mid-upgrade) is taken too.
      await store.services.insert(serviceRow('pps2', 'pp1', 'old', 'old-pp'));
      await store.services.update('pps2', { published_port: 31009 });
      assert.ok((await ports.taken(T + 100)).includes(31009));
      assert.equal(await store.services.delete('pp1', 'pps2', T + 20), true);
      // Deleting an owner gives its port up with it.
      assert.equal(await store.environments.delete('ppe2', T + 20), true);
      assert.equal(await store.services.delete('pp1', 'pps1', T + 20), true);
      assert.deepEqual(await ports.taken(T + 20), []);
      assert.deepEqual((await ports.taken(T + 19)).sort(), [31000, 31001, 31009]);
    });

    test('warm pool: a ready container is claimed once, even by two stores at once', async () => {
      const row = (workload: string, status: 'starting' | 'ready' | 'claimed', at = T) => ({ workload, template_id: 'default', image: 'ubuntu:24.04', container_id: `c-${workload}`, status, created_at: at, claimed_at: null, agent_token: null, tenant_id: null, address: null });
      await store.warmPool.insert(row('w1', 'ready', T + 1));
      await store.warmPool.insert(row('w2', 'starting'));
      await store.warmPool.insert(row('w0', 'ready', T));
      assert.deepEqual((await store.warmPool.ready('default', 'ubuntu:24.04', 'tA')).map((w) => w.workload), ['w0', 'w1'], 'ready ones, oldest first');
      assert.deepEqual(await store.warmPool.ready('default', 'ubuntu:22.04', 'tA'), [], 'of that image only');
      const claims = await Promise.all([store.warmPool.claim('w0', T), second.warmPool.claim('w0', T)]);
      assert.deepEqual(claims.sort(), [false, true]);
      assert.equal(await store.warmPool.claim('w2', T), false, 'not ready yet');
      await store.warmPool.markReady('w2', 'c-real', '10.0.0.2', 'ready');
      assert.equal((await store.warmPool.find('w2'))?.address, '10.0.0.2');
      assert.equal(await store.warmPool.claim('w2', T), true);
      await store.warmPool.delete('w0');
      assert.deepEqual((await store.warmPool.all()).map((w) => [w.workload, w.status]).sort(), [['w1', 'ready'], ['w2', 'claimed']]);
    });

    test("warm pool: a container kept for a tenant goes to that tenant first and never to another; one per tenant and template waits", async () => {
      const kept = (workload: string, tenant: string, template = 'node') => ({ workload, template_id: template, image: 'node:24', container_id: '', status: 'reserved' as const, created_at: T, claimed_at: null, agent_token: null, tenant_id: tenant, address: null });
      await store.warmPool.insert({ ...kept('k-shared', 'x'), tenant_id: null, status: 'ready', container_id: 'c-shared', created_at: T - 5 });
      assert.equal(await store.warmPool.keep(kept('k-a', 'tA')), true);
      // Two claims at once (two stores) each keeping the next one for the tenant: one row waits.
      const both = await Promise.all([store.warmPool.keep(kept('k-a2', 'tA')), second.warmPool.keep(kept('k-a3', 'tA'))]);
      assert.deepEqual(both, [false, false], 'one is kept for tA already');
      assert.equal(await store.warmPool.keep(kept('k-a-go', 'tA', 'go')), true, 'another template');
      assert.equal(await store.warmPool.keep(kept('k-b', 'tB')), true, 'another tenant');
      assert.equal(await store.warmPool.keptCount(), 3);
      assert.equal(await store.warmPool.markStarting('k-a', T + 1), true);
      assert.equal(await store.warmPool.markStarting('k-a', T + 1), false, 'once');
      await store.warmPool.markReady('k-a', 'c-a', '10.1.0.5', 'kept');
      await store.warmPool.markStarting('k-b', T + 1);
      await store.warmPool.markReady('k-b', 'c-b', '10.2.0.5', 'kept');
      assert.deepEqual((await store.warmPool.ready('node', 'node:24', 'tA')).map((w) => w.workload), ['k-a', 'k-shared'], "its own first (though newer), then the shared one");
      assert.deepEqual((await store.warmPool.ready('node', 'node:24', 'tC')).map((w) => w.workload), ['k-shared'], "never one kept for another tenant");
      // Taken: the next one may be kept for the tenant while the taken one is still on its way out.
      assert.equal(await store.warmPool.claim('k-a', T + 2), true);
      assert.equal(await store.warmPool.keptCount(), 2, 'a taken one counts no more');
      assert.equal(await store.warmPool.keep(kept('k-a4', 'tA')), true);
    });

    test('host names: one holder per host whatever the kind or tenant; deleting the resource frees it', async () => {
      await store.tenants.insert(tenantRow('h1', 'hostowner'));
      await store.tenants.insert(tenantRow('h2', 'hostother'));
      const claim = (hostname: string, tenant: string, kind: 'service' | 'preview', resource: string) => ({ hostname, tenant_id: tenant, kind, resource_id: resource, created_at: T });
      const isUnique = (e: unknown) => isUniqueViolation(e);
      await store.services.insert(serviceRow('hs1', 'h1', 'shop', 'shop'));
      await store.hostNames.claim(claim('shop', 'h1', 'service', 'hs1'));
      await assert.rejects(second.hostNames.claim(claim('shop', 'h2', 'preview', 'hp0')), isUnique, 'another tenant, another kind: still taken');
      assert.equal(await store.services.delete('h2', 'hs1', 0), false, 'scoped by tenant');
      assert.equal((await store.hostNames.find('shop'))?.resource_id, 'hs1', 'a refused delete frees nothing');
      assert.equal(await store.services.delete('h1', 'hs1', 0), true);
      assert.equal(await store.hostNames.find('shop'), undefined, 'the service took its label with it');

      const env = (id: string) => ({
        id, tenant_id: 'h2', name: id, template_id: 'default', image: 'ubuntu:24.04', status: 'running' as const, lease_expires_at: T + 60, expired_at: null,
        container_id: null, address: null, workload: null, last_error: null, created_at: T, updated_at: T, agent_token: null, published_port: null, node: null,
      });
      await store.environments.insert(env('he1'));
      for (const [id, name] of [['hp1', 'web'], ['hp2', 'api']] as const) {
        await store.environments.insertPreview({ id, environment_id: 'he1', tenant_id: 'h2', name, port: 8000, created_at: T });
        await store.hostNames.claim(claim(`${name}-he1`, 'h2', 'preview', id));
      }
      await store.hostNames.claim(claim('unrelated', 'h1', 'service', 'hs9'));
      assert.equal(await store.environments.deletePreview('he1', 'hp1'), true);
      assert.equal(await store.hostNames.find('web-he1'), undefined, 'a deleted preview frees its host');
      assert.equal(await store.environments.delete('he1', T), true);
      assert.equal(await store.hostNames.find('api-he1'), undefined, "an environment's previews free their hosts with it");
      assert.equal((await store.hostNames.find('unrelated'))?.resource_id, 'hs9', 'other hosts stay');
      await store.hostNames.release('service', 'hs9');
    });

    test("quota lock: concurrent count-then-insert of one tenant never overruns (two handles on PostgreSQL: two processes)", async () => {
      await store.tenants.insert(tenantRow('q1', 'quota'));
      assert.equal(await store.tenants.lockForQuota('missing'), false);
      const limit = 5;
      // SQLite: one handle (two handles in one process would wait on each other synchronously);
      // in production, the second process's write waits in its busy handler.
      const handles = kind === 'postgres' ? [store, second] : [store];
      let refused = 0;
      await Promise.all(
        Array.from({ length: 30 }, (_, i) =>
          handles[i % handles.length]!.transaction(async (tx) => {
            assert.equal(await tx.tenants.lockForQuota('q1'), true);
            if ((await tx.apiKeys.countActive('q1')) >= limit) {
              refused += 1;
              return;
            }
            await tx.apiKeys.insert({ id: `qk${i}`, tenant_id: 'q1', name: 'k', prefix: `svc_${i}`, secret_hash: `h${i}`, created_at: T, last_used_at: null, expires_at: null, revoked_at: null });
          }),
        ),
      );
      assert.equal(await store.apiKeys.countActive('q1'), limit);
      assert.equal(refused, 30 - limit);
      assert.equal((await store.tenants.findById('q1'))?.updated_at, T, 'the lock changes nothing');
    });

    test('ping answers', async () => {
      await store.ping();
    });
  });

  if (kind === 'sqlite') {
    describe('quota lock across processes on one SQLite file', () => {
      test('two processes creating at once never overrun the quota, and none of their transactions fails', async () => {
        const loc = await storeLocation('sqlite');
        try {
          const setup = await openStore(loc);
          await setup.tenants.insert(tenantRow('x1', 'crossproc'));
          await setup.close();
          const limit = 10;
          const startAt = Date.now() + 1500;
          const results = await Promise.all(['a', 'b'].map((prefix) => runWorker([loc.dataDir, 'x1', prefix, '15', String(limit), String(startAt)])));
          const store = await openStore(loc);
          try {
            const summary = JSON.stringify(results);
            assert.equal(await store.apiKeys.countActive('x1'), limit, summary);
            assert.deepEqual(results.flatMap((r) => r.errors), [], `a deferred transaction that read first cannot take the write lock later: ${summary}`);
            assert.equal(results.reduce((n, r) => n + r.inserted, 0), limit, summary);
          } finally {
            await store.close();
          }
        } finally {
          await loc.cleanup();
        }
      });
    });
  }

  describe(`migration 0010_host_names on an existing database (${kind})`, () => {
    test("backfills services' labels (a shared one is kept by the oldest) and previews (a service's host stays the service's)", async () => {
      const loc = await storeLocation(kind);
      try {
        const db = await migratedTo(kind, loc, '0009_metering');
        await db.insertInto('tenants').values([tenantRow('m1', 'one'), tenantRow('m2', 'two')]).execute();
        const service = (id: string, tenant: string, name: string, label: string, created: number) => ({
          id, tenant_id: tenant, name, name_key: name, image: 'x', port: 8000, status: 'running' as const, desired_state: 'running' as const,
          dns_label: label, last_error: null, container_id: null, upstream: null, crash_count: 0, crash_window_start: null,
          last_crash_at: null, circuit_open_at: null, created_at: created, updated_at: created,
        });
        // Without a base domain, labels were never checked across tenants: two services share "web".
        await db.insertInto('services').values([
          service('aaaa1111bbbb2222cccc3333', 'm2', 'web', 'web', T + 1),
          service('dddd4444eeee5555ffff6666', 'm1', 'web', 'web', T),
          service('99990000999900009999000a', 'm1', 'docs-env1', 'docs-env1', T),
        ]).execute();
        await db.insertInto('environments').values({
          id: 'env1', tenant_id: 'm2', name: 'dev', template_id: 'default', image: 'ubuntu:24.04', status: 'running', lease_expires_at: T + 60,
          expired_at: null, container_id: null, address: null, workload: null, last_error: null, created_at: T, updated_at: T,
        }).execute();
        await db.insertInto('previews').values([
          { id: 'pv1', environment_id: 'env1', tenant_id: 'm2', name: 'Site', port: 3000, created_at: T },
          // The collision the table exists for: the service's route came first, so the host is the service's.
          { id: 'pv2', environment_id: 'env1', tenant_id: 'm2', name: 'docs', port: 3001, created_at: T },
        ]).execute();
        await db.destroy();

        const migrated = await openStore(loc);
        try {
          assert.deepEqual(await migrated.hostNames.find('web'), { hostname: 'web', tenant_id: 'm1', kind: 'service', resource_id: 'dddd4444eeee5555ffff6666', created_at: T });
          const newer = await migrated.services.findAny('aaaa1111bbbb2222cccc3333');
          assert.equal(newer?.dns_label, 'web-aaaa1111', 'the newer one gets a label of its own');
          assert.equal((await migrated.hostNames.find('web-aaaa1111'))?.resource_id, 'aaaa1111bbbb2222cccc3333');
          assert.equal((await migrated.hostNames.find('site-env1'))?.resource_id, 'pv1', 'preview hosts are lower case');
          assert.equal((await migrated.hostNames.find('docs-env1'))?.kind, 'service');
          await assert.rejects(migrated.hostNames.claim({ hostname: 'web', tenant_id: 'm2', kind: 'service', resource_id: 'x', created_at: T }), (e: unknown) => isUniqueViolation(e));
        } finally {
          await migrated.close();
        }
      } finally {
        await loc.cleanup();
      }
    });
  });

  describe(`migration 0015_service_workloads on an existing database (${kind})`, () => {
    test('every service gets its workload row as its record says; one unfinished deployment per deploying service carries generation 1, the others end interrupted', async () => {
      const loc = await storeLocation(kind);
      try {
        const db = await migratedTo(kind, loc, '0014_workloads');
        await db.insertInto('tenants').values([tenantRow('w1', 'one')]).execute();
        const statuses = ['deploying', 'running', 'stopped', 'failed', 'crashed'] as const;
        const id = (status: string) => status.padEnd(12, '0').slice(0, 12);
        await db.insertInto('services').values(statuses.map((status) => ({
          id: id(status), tenant_id: 'w1', name: status, name_key: status, image: 'x', port: 8000, status,
          desired_state: status === 'stopped' ? ('stopped' as const) : ('running' as const), dns_label: status, last_error: null,
          container_id: status === 'running' || status === 'crashed' ? `c-${status}` : null, upstream: null, crash_count: 0, crash_window_start: null,
          last_crash_at: null, circuit_open_at: status === 'crashed' ? T : null, created_at: T, updated_at: T,
        }))).execute();
        const dep = (depId: string, service: string, status: 'pending' | 'running' | 'succeeded') => ({
          id: depId, service_id: id(service), tenant_id: 'w1', status, reason: 'create', image: 'x', pull: 1, build_id: null, last_error: null,
          created_at: T, started_at: status === 'pending' ? null : T, finished_at: null,
        });
        // The deploying service: an older one left running by a killed svcd, and the newest pending.
        // The running service: an unfinished one left behind as well.
        await (db as unknown as Kysely<Record<string, Record<string, unknown>>>).insertInto('deployments').values([
          dep('dep-a', 'deploying', 'running'), dep('dep-b', 'deploying', 'pending'), dep('dep-c', 'running', 'succeeded'), dep('dep-d', 'running', 'pending'),
        ]).execute();
        await db.destroy();

        const migrated = await openStore(loc);
        try {
          const rows = await Promise.all(statuses.map((status) => migrated.workloads.find('service', id(status))));
          assert.deepEqual(rows.map((w) => w && [w.id, w.desired_state, w.generation, w.observed_generation, w.observed_state, w.driver_ref]), [
            [`svc-${id('deploying')}`, 'running', 1, 0, 'pending', null],
            [`svc-${id('running')}`, 'running', 1, 1, 'running', 'c-running'],
            [`svc-${id('stopped')}`, 'stopped', 1, 1, 'stopped', null],
            [`svc-${id('failed')}`, 'running', 1, 1, 'failed', null],
            [`svc-${id('crashed')}`, 'running', 1, 1, 'failed', 'c-crashed'],
          ]);
          assert.deepEqual(JSON.parse(rows[0]?.spec ?? '{}'), { name: `svc-${id('deploying')}`, volumes: [], stopTimeoutS: 10 });
          const deps = await Promise.all(['dep-a', 'dep-b', 'dep-c', 'dep-d'].map((d) => migrated.deployments.find(d)));
          assert.deepEqual(deps.map((d) => d && [d.id, d.status, d.generation]), [
            ['dep-a', 'failed', null],
            ['dep-b', 'pending', 1],
            ['dep-c', 'succeeded', null],
            ['dep-d', 'failed', null],
          ]);
          assert.match(deps[0]?.last_error ?? '', /^interrupted/);
          assert.equal((await migrated.deployments.atGeneration(id('deploying'), 1))?.id, 'dep-b');
        } finally {
          await migrated.close();
        }
      } finally {
        await loc.cleanup();
      }
    });
  });

  describe(`migration 0023_database_ready_at on an existing database (${kind})`, () => {
    test('every existing database counts as answered (ready_at is its creation), so no take-over ever starts its volume again empty', async () => {
      const loc = await storeLocation(kind);
      try {
        const db = await migratedTo(kind, loc, '0022_published_ports');
        await db.insertInto('tenants').values([tenantRow('d1', 'one')]).execute();
        const row = (id: string, status: 'provisioning' | 'running' | 'stopped', created: number) => ({
          id, tenant_id: 'd1', name: id, type: 'postgres' as const, status, desired_state: 'running' as const, image: 'x', username: 'u', database_name: 'd',
          sealed_password: 's', host_port: 15000 + created % 1000, container_id: null, last_error: null, created_at: created, updated_at: created,
        });
        // Inserted as the table was before 0023: without the column.
        await (db as unknown as Kysely<Record<string, Record<string, unknown>>>).insertInto('databases').values([row('db-running', 'running', T), row('db-provisioning', 'provisioning', T + 7)]).execute();
        await db.destroy();

        const migrated = await openStore(loc);
        try {
          assert.equal((await migrated.databases.findAny('db-running'))?.ready_at, T);
          // Even one provisioning when svc was upgraded: its volume may hold a tenant's data already.
          assert.equal((await migrated.databases.findAny('db-provisioning'))?.ready_at, T + 7);
        } finally {
          await migrated.close();
        }
      } finally {
        await loc.cleanup();
      }
    });
  });

  describe(`migration 0027_environment_ports on an existing database (${kind})`, () => {
    test("the services' published ports are claimed: an environment cannot be given one a service holds", async () => {
      const loc = await storeLocation(kind);
      try {
        const db = await migratedTo(kind, loc, '0026_replicas');
        await db.insertInto('tenants').values([tenantRow('m1', 'one')]).execute();
        const service = (id: string, port: number | null) => ({ ...serviceRow(id, 'm1', id, id), published_port: port });
        await db.insertInto('services').values([service('ms1', 30500), service('ms2', null)]).execute();
        await (db as unknown as Kysely<Record<string, Record<string, unknown>>>).insertInto('environments').values({
          id: 'me1', tenant_id: 'm1', name: 'dev', template_id: 'default', image: 'x', status: 'running', lease_expires_at: T + 60, expired_at: null,
          container_id: null, address: null, workload: null, last_error: null, created_at: T, updated_at: T, agent_token: null,
        }).execute();
        await db.destroy();

        const migrated = await openStore(loc);
        try {
          assert.deepEqual(await migrated.publishedPorts.taken(T), [30500]);
          await assert.rejects(migrated.publishedPorts.allocate('environments', 'me1', 30500), (err: unknown) => isUniqueViolation(err));
          assert.equal((await migrated.environments.findAny('me1'))?.published_port, null);
          assert.equal(await migrated.publishedPorts.allocate('environments', 'me1', 30501), true);
          // An svcd of before the claims, still running during the upgrade, deletes ms1 and gives
          // its port to ms2 as it did (its column alone): ms1's claim is left over (its port held
          // by another owner), and the sweep's release gives it up; the claims of owners that hold
          // theirs stay.
          const older = rawHandle(kind, loc);
          const claimsOf = (port: number) => older.selectFrom('port_claims').select('owner').where('port', '=', port).execute();
          try {
            await older.deleteFrom('services').where('id', '=', 'ms1').execute();
            await older.updateTable('services').set({ published_port: 30500 }).where('id', '=', 'ms2').execute();
            assert.deepEqual(await claimsOf(30500), [{ owner: 'service:ms1' }]);
            assert.equal(await migrated.publishedPorts.releaseOrphanedClaims(T + 50), 1);
            assert.deepEqual(await claimsOf(30500), [], "ms1's claim, though its port is held (by ms2)");
            assert.deepEqual((await migrated.publishedPorts.taken(T + 50)).sort(), [30500, 30501], "ms2's column still holds it");
            assert.equal(await migrated.publishedPorts.releaseOrphanedClaims(T + 60), 0, "me1's claim is its own");
            assert.deepEqual(await claimsOf(30501), [{ owner: 'environment:me1' }]);
            assert.equal((await migrated.environments.findAny('me1'))?.published_port, 30501);
            // An owner deleted without its claim, its port held by no one: given up, and it rests.
            await migrated.services.insert({ ...serviceRow('ms4', 'm1', 'ms4', 'ms4'), published_port: null });
            assert.equal(await migrated.publishedPorts.allocate('services', 'ms4', 30505), true);
            await older.deleteFrom('services').where('id', '=', 'ms4').execute();
            assert.equal(await migrated.publishedPorts.releaseOrphanedClaims(T + 65), 1);
            assert.deepEqual(await claimsOf(30505), []);
            assert.ok((await migrated.publishedPorts.taken(T + 64)).includes(30505), 'resting');
            assert.ok(!(await migrated.publishedPorts.taken(T + 65)).includes(30505), 'rested');
          } finally {
            await older.destroy();
          }
          // A claim whose owner's column names another port by now (an older svcd moved it) goes too.
          await migrated.services.insert({ ...serviceRow('ms3', 'm1', 'ms3', 'ms3'), published_port: null });
          assert.equal(await migrated.publishedPorts.allocate('services', 'ms3', 30503), true);
          await migrated.services.update('ms3', { published_port: 30504 });
          assert.equal(await migrated.publishedPorts.releaseOrphanedClaims(T + 70), 1);
          assert.deepEqual((await migrated.publishedPorts.taken(T + 70)).sort(), [30500, 30501, 30504]);
        } finally {
          await migrated.close();
        }
      } finally {
        await loc.cleanup();
      }
    });
  });

  describe(`migration 0017_environment_workloads on an existing database (${kind})`, () => {
    test('every environment gets its workload row as its record says: the container it runs on (a warm one too), kept when stopped; a creation waits a lease before the controller takes it; the warm pool\'s get rows of their own', async () => {
      const loc = await storeLocation(kind);
      try {
        const db = await migratedTo(kind, loc, '0016_build_base_images');
        await db.insertInto('tenants').values([tenantRow('e1', 'one')]).execute();
        const statuses = ['creating', 'running', 'stopped', 'expired'] as const;
        const id = (status: string) => status.padEnd(12, '0').slice(0, 12);
        await db.insertInto('environments').values(statuses.map((status) => ({
          id: id(status), tenant_id: 'e1', name: status, template_id: 'default', image: 'x', status, lease_expires_at: T + 3600,
          expired_at: status === 'expired' ? T : null, container_id: status === 'creating' ? null : `c-${status}`, address: null,
          // The running one was handed a warm container.
          workload: status === 'running' ? 'svc-env-warm00000001' : null, last_error: null, created_at: T, updated_at: T,
        }))).execute();
        const pool = (workload: string, status: 'starting' | 'ready' | 'claimed') => ({ workload, template_id: 'default', image: 'x', container_id: status === 'starting' ? '' : `c-${workload}`, status, created_at: T });
        await (db as unknown as Kysely<Record<string, Record<string, unknown>>>).insertInto('warm_environments').values([pool('svc-env-ready', 'ready'), pool('svc-env-starting', 'starting'), pool('svc-env-claimed', 'claimed')]).execute();
        await db.destroy();

        const migrated = await openStore(loc);
        try {
          const rows = await Promise.all(statuses.map((status) => migrated.workloads.find('environment', id(status))));
          assert.deepEqual(rows.map((w) => w && [w.id, w.desired_state, w.generation, w.observed_generation, w.observed_state, w.driver_ref, w.retry_at_ms]), [
            [`svc-env-${id('creating')}`, 'running', 1, 0, 'pending', null, T * 1000 + 30_000],
            [`svc-env-${id('running')}`, 'running', 1, 1, 'running', 'c-running', null],
            [`svc-env-${id('stopped')}`, 'stopped', 1, 1, 'stopped', 'c-stopped', null],
            [`svc-env-${id('expired')}`, 'stopped', 1, 1, 'stopped', 'c-expired', null],
          ]);
          assert.deepEqual(JSON.parse(rows[1]?.spec ?? '{}'), { name: 'svc-env-warm00000001', volumes: ['svc-env-warm00000001'], stopTimeoutS: 5, keepStopped: true });
          assert.equal((JSON.parse(rows[2]?.spec ?? '{}') as { name: string }).name, `svc-env-${id('stopped')}`);
          assert.deepEqual((await migrated.workloads.lagging(T * 1000 + 29_000, 10)).map((w) => w.resource_id), ['svc-env-starting'], 'the creation is left alone for a lease');
          assert.deepEqual((await migrated.workloads.lagging(T * 1000 + 30_000, 10)).map((w) => w.resource_id).sort(), [id('creating'), 'svc-env-starting']);

          // The warm pool's: a ready one observed running on its container, a starting one left
          // to the controller, a claimed one (the environment's already) none; the claim's time kept.
          const warm = await Promise.all(['svc-env-ready', 'svc-env-starting', 'svc-env-claimed'].map((w) => migrated.workloads.find('warm', w)));
          assert.deepEqual(warm.map((w) => w && [w.tenant_id, w.desired_state, w.observed_generation, w.observed_state, w.driver_ref]), [
            ['warm-pool', 'running', 1, 'running', 'c-svc-env-ready'],
            ['warm-pool', 'running', 0, 'pending', null],
            undefined,
          ]);
          assert.deepEqual(JSON.parse(warm[0]?.spec ?? '{}'), { name: 'svc-env-ready', volumes: ['svc-env-ready'] });
          assert.deepEqual((await migrated.warmPool.all()).map((w) => [w.workload, w.claimed_at]).sort(), [['svc-env-claimed', T], ['svc-env-ready', null], ['svc-env-starting', null]]);
        } finally {
          await migrated.close();
        }
      } finally {
        await loc.cleanup();
      }
    });
  });
});

/** The store at `loc` opened directly, with the migrations up to `name` applied: a database as an older svcd left it. */
async function migratedTo(kind: 'sqlite' | 'postgres', loc: { dataDir: string; databaseUrl: string | null }, name: string): Promise<Kysely<Database>> {
  const db = rawHandle(kind, loc);
  const before = await new Migrator({ db, provider: migrationProvider(kind) }).migrateTo(name);
  assert.equal(before.error, undefined);
  return db;
}

/** The store at `loc` opened directly, as it is (an older svcd's handle on it). */
function rawHandle(kind: 'sqlite' | 'postgres', loc: { dataDir: string; databaseUrl: string | null }): Kysely<Database> {
  return kind === 'postgres'
    ? new Kysely<Database>({ dialect: new PostgresDialect({ pool: new pg.Pool({ connectionString: loc.databaseUrl ?? '' }) }) })
    : new Kysely<Database>({ dialect: new SqliteDialect({ database: new BetterSqlite3(join(loc.dataDir, 'svc.db')) }) });
}

/** Runs test/quota-lock-worker.ts in its own node process (tsx, as the tests run). */
function runWorker(args: string[]): Promise<{ inserted: number; refused: number; errors: string[] }> {
  return new Promise((resolve, reject) => {
    execFile(process.execPath, ['--import', 'tsx', join(import.meta.dirname, 'quota-lock-worker.ts'), ...args], { timeout: 60_000 }, (err, stdout, stderr) => {
      if (err) reject(new Error(`worker failed: ${err.message}\n${stderr}`));
      else resolve(JSON.parse(stdout) as { inserted: number; refused: number; errors: string[] });
    });
  });
}

describe('SQLite checkpoints run on a worker thread, never in one of svcd\'s commits', () => {
  // 1500 rows of 3 KB: past the 1000 pages at which SQLite's automatic checkpoint would run
  // inside a commit (copy the log into the database file, fsync it).
  async function writePages(store: Store): Promise<void> {
    for (let i = 0; i < 1500; i++) await store.settings.getOrCreate(`filler-${i}`, 'x'.repeat(3000));
  }
  const databaseBytes = (dataDir: string) => statSync(join(dataDir, 'svc.db')).size;

  test('the main connection leaves the log to the worker: the database file grows only on a pass', async () => {
    const loc = await storeLocation('sqlite');
    // A worker that waits an hour: nothing but an automatic checkpoint could copy the log now.
    const store = await openStore({ ...loc, checkpointEveryMs: 3_600_000 });
    try {
      const before = databaseBytes(loc.dataDir);
      await writePages(store);
      assert.equal(databaseBytes(loc.dataDir), before, 'a commit checkpointed the log into the database file');
      assert.ok(statSync(join(loc.dataDir, 'svc.db-wal')).size > 4 * 1024 * 1024);
    } finally {
      await store.close();
      await loc.cleanup();
    }
  });

  test('the worker copies the log into the database file, and closing leaves every row there', async () => {
    const loc = await storeLocation('sqlite');
    // A log of 1000 pages is long enough to copy (svcd waits for 8192).
    const store = await openStore({ ...loc, checkpointEveryMs: 50, checkpointPages: 1000 });
    try {
      const before = databaseBytes(loc.dataDir);
      await writePages(store);
      await waitFor('a checkpoint pass', async () => databaseBytes(loc.dataDir) > before + 4 * 1024 * 1024);
    } finally {
      await store.close();
    }
    // Closed: the log is gone (the last connection checkpoints it) and the rows are in the file.
    assert.equal(existsSync(join(loc.dataDir, 'svc.db-wal')), false);
    const reopened = await openStore(loc);
    try {
      assert.equal(await reopened.settings.getOrCreate('filler-1499', 'other'), 'x'.repeat(3000));
    } finally {
      await reopened.close();
      await loc.cleanup();
    }
  });

  // The first commit after a checkpoint copied the whole log starts the log afresh and fsyncs its
  // header, on svcd's event loop; under a tenant's disk filler that fsync took up to 600 ms. Watched
  // with strace (a store in a child process it starts: fsync-probe.ts): which threads sync what.
  test('svcd\'s own thread does not fsync: the worker makes the log durable each pass and checkpoints only a long log', async () => {
    const loc = await storeLocation('sqlite');
    const trace = join(loc.dataDir, 'strace.txt');
    try {
      const { stdout } = await new Promise<{ stdout: string }>((resolve, reject) => {
        execFile(
          'strace',
          ['-f', '-y', '-qq', '--seccomp-bpf', '-e', 'trace=fsync,fdatasync', '-o', trace, process.execPath, '--import', 'tsx', join(import.meta.dirname, 'fsync-probe.ts'), loc.dataDir, '50'],
          { timeout: 120_000 },
          (err, out, stderr) => (err ? reject(new Error(`strace of the probe failed: ${err.message}\n${stderr}`)) : resolve({ stdout: out })),
        );
      });
      const mainThread = Number(stdout.trim());
      const syncs = readFileSync(trace, 'utf8')
        .split('\n')
        .map((line) => /^(\d+)\s+(fsync|fdatasync)\(\d+<([^>]*)>/.exec(line))
        .flatMap((m) => (m ? [{ thread: Number(m[1]), file: m[3]! }] : []));
      const from = syncs.findIndex((s) => s.file.endsWith('/watched-from-here'));
      assert.ok(from >= 0 && syncs[from]!.thread === mainThread, `the probe's marker is in the trace, from its main thread (${mainThread}): ${JSON.stringify(syncs)}`);
      const watched = syncs.slice(from + 1);
      // Positive probe: strace sees the worker's syncs of the log, one a pass.
      assert.ok(watched.filter((s) => s.thread !== mainThread && s.file.endsWith('/svc.db-wal')).length >= 10, `the worker synced the log each pass: ${JSON.stringify(watched)}`);
      assert.deepEqual(watched.filter((s) => s.thread === mainThread), [], 'svcd\'s own thread fsynced');
    } finally {
      await loc.cleanup();
    }
  });

  test('a worker that cannot run says so, once, so the store can checkpoint in commits again', async () => {
    const failures: Error[] = [];
    const checkpointer = new WalCheckpointer('/nonexistent-svc-dir/svc.db', (err) => failures.push(err), { everyMs: 50 });
    await waitFor('the failure', async () => failures.length > 0);
    assert.match(failures[0]?.message ?? '', /unable to open|directory does not exist/i);
    assert.equal(checkpointer.status().failure, failures[0]);
    await checkpointer.stop();
    assert.equal(failures.length, 1);
  });
});
