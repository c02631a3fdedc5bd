// Quotas hold under concurrent creates: each quota'd create counts and inserts under the tenant's
// quota lock (store/tenants.ts lockForQuota), so 30 requests at once through the real HTTP server
// never leave a tenant above its limit. On PostgreSQL without the lock, READ COMMITTED lets
// several transactions count the same number and all insert. The engine is the inert one: what
// is counted is the records, not containers.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { SvcClient } from '@svc/client';
import { MAX_API_KEYS } from '@svc/contract';
import { BUILD_QUEUE_MAX } from '../src/builds/builds.js';
import { PREVIEWS_PER_ENVIRONMENT } from '../src/environments/environments.js';
import { DEFAULT_QUOTAS } from '../src/tenants/tenants.js';
import { ADMIN_TOKEN, PG_ADMIN_URL, eachStore, freshPgDatabase, newTenant, startServer, type TestServer } from './harness.js';
import { inertRuntime } from './inert-runtime.js';

const AT_ONCE = 30;
/** Refused on pull by no engine: the inert engine "has" every image. */
const IMAGE = 'svc-test/none:1';

/** Fires `AT_ONCE` requests together; returns how many got each status. */
async function burst(client: SvcClient, path: string, body: (i: number) => unknown): Promise<Map<number, number>> {
  const answers = await Promise.all(Array.from({ length: AT_ONCE }, (_, i) => client.raw('POST', path, { body: body(i) })));
  const statuses = new Map<number, number>();
  for (const a of answers) statuses.set(a.status, (statuses.get(a.status) ?? 0) + 1);
  return statuses;
}

function describeStatuses(s: Map<number, number>): string {
  return [...s].map(([status, n]) => `${n} x ${status}`).join(', ');
}

eachStore((kind) => {
  describe(`quotas under ${AT_ONCE} concurrent creates (${kind})`, () => {
    let t: TestServer;

    before(async () => {
      t = await startServer({
        store: kind,
        config: { adminTokens: [ADMIN_TOKEN] },
        overrides: {
          runtime: inertRuntime(),
          // Builds stay queued: no worker takes them, so the queue is what is counted.
          buildRunner: { workers: 0 },
          resolveHost: async () => ['93.184.216.34'],
        },
      });
    });
    after(async () => {
      await t.close();
    });

    test('API keys: never more than 20 active', async () => {
      const a = await newTenant(t);
      const statuses = await burst(a.client, '/v1/auth/keys', (i) => ({ name: `k${i}` }));
      const active = (await a.client.raw<unknown[]>('GET', '/v1/auth/keys')).body.length;
      assert.equal(active, MAX_API_KEYS, `${active} active keys after ${describeStatuses(statuses)}`);
      assert.equal(statuses.get(201), MAX_API_KEYS - 1, describeStatuses(statuses));
      assert.equal(statuses.get(409), AT_ONCE - (MAX_API_KEYS - 1), describeStatuses(statuses));
    });

    test('services: never more than max_services', async () => {
      const a = await newTenant(t);
      const statuses = await burst(a.client, '/v1/services', (i) => ({ name: `s${i}`, image: IMAGE }));
      const usage = (await a.client.raw<{ services: { used: number; max: number } }>('GET', '/v1/tenant/usage')).body.services;
      assert.equal(usage.max, DEFAULT_QUOTAS.max_services);
      assert.equal(usage.used, DEFAULT_QUOTAS.max_services, `${usage.used} services after ${describeStatuses(statuses)}`);
      assert.equal(statuses.get(201), DEFAULT_QUOTAS.max_services, describeStatuses(statuses));
    });

    test('databases: never more than max_databases', async () => {
      const a = await newTenant(t);
      const statuses = await burst(a.client, '/v1/databases', (i) => ({ name: `db${i}`, type: i % 2 ? 'redis' : 'postgres' }));
      const used = (await a.client.raw<unknown[]>('GET', '/v1/databases')).body.length;
      assert.equal(used, DEFAULT_QUOTAS.max_databases, `${used} databases after ${describeStatuses(statuses)}`);
      assert.equal(statuses.get(201), DEFAULT_QUOTAS.max_databases, describeStatuses(statuses));
    });

    test('environments: never more than max_environments', async () => {
      const a = await newTenant(t);
      const statuses = await burst(a.client, '/v1/environments', (i) => ({ name: `env${i}`, template_id: 'default' }));
      const used = (await a.client.raw<unknown[]>('GET', '/v1/environments')).body.length;
      assert.equal(used, DEFAULT_QUOTAS.max_environments, `${used} environments after ${describeStatuses(statuses)}`);
      assert.equal(statuses.get(201), DEFAULT_QUOTAS.max_environments, describeStatuses(statuses));
    });

    test('previews: never more than 10 per environment', async () => {
      const a = await newTenant(t);
      const env = await a.client.raw<{ id: string }>('POST', '/v1/environments', { body: { name: 'dev', template_id: 'default' } });
      assert.equal(env.status, 201, JSON.stringify(env.body));
      const statuses = await burst(a.client, `/v1/environments/${env.body.id}/previews`, (i) => ({ name: `p${i}`, port: 3000 + i }));
      const used = (await a.client.raw<unknown[]>('GET', `/v1/environments/${env.body.id}/previews`)).body.length;
      assert.equal(used, PREVIEWS_PER_ENVIRONMENT, `${used} previews after ${describeStatuses(statuses)}`);
      assert.equal(statuses.get(201), PREVIEWS_PER_ENVIRONMENT, describeStatuses(statuses));
    });

    test('builds: never more than 10 queued', async () => {
      const a = await newTenant(t);
      const s = await a.client.raw<{ id: string }>('POST', '/v1/services', { body: { name: 'built', image: IMAGE } });
      assert.equal(s.status, 201, JSON.stringify(s.body));
      const statuses = await burst(a.client, `/v1/services/${s.body.id}/builds`, () => ({ source_type: 'git', source_url: 'https://git.example.test/app.git' }));
      const builds = (await a.client.raw<Array<{ status: string }>>('GET', `/v1/services/${s.body.id}/builds`)).body;
      const queued = builds.filter((b) => b.status === 'queued').length;
      assert.equal(queued, BUILD_QUEUE_MAX, `${queued} queued builds after ${describeStatuses(statuses)}`);
      assert.equal(statuses.get(202), BUILD_QUEUE_MAX, describeStatuses(statuses));
    });

    test('env vars: never more than max_env_vars_per_service', async () => {
      const a = await newTenant(t);
      const limit = 5;
      const patched = await t.client.raw('PATCH', `/v1/tenants/${a.id}/quotas`, { body: { max_env_vars_per_service: limit }, headers: { 'x-admin-token': ADMIN_TOKEN, 'x-real-ip': '10.8.0.1' } });
      assert.equal(patched.status, 200);
      const s = await a.client.raw<{ id: string }>('POST', '/v1/services', { body: { name: 'configured', image: IMAGE } });
      assert.equal(s.status, 201, JSON.stringify(s.body));
      const statuses = await burst(a.client, `/v1/services/${s.body.id}/env`, (i) => ({ [`VAR_${i}`]: 'x' }));
      const vars = Object.keys((await a.client.raw<Record<string, string>>('GET', `/v1/services/${s.body.id}/env`)).body).length;
      assert.equal(vars, limit, `${vars} variables after ${describeStatuses(statuses)}`);
      assert.equal(statuses.get(200), limit, describeStatuses(statuses));
    });
  });
});

describe('quotas under concurrent creates through two svcd on one PostgreSQL store', { skip: !PG_ADMIN_URL && 'needs PostgreSQL (make test starts it)' }, () => {
  let db: Awaited<ReturnType<typeof freshPgDatabase>>;
  let one: TestServer;
  let two: TestServer;
  const MASTER_KEY = 'c'.repeat(64);

  before(async () => {
    db = await freshPgDatabase();
    const start = () => startServer({ config: { databaseUrl: db.url, masterKey: MASTER_KEY }, overrides: { runtime: inertRuntime(), buildRunner: { workers: 0 } } });
    one = await start();
    two = await start();
  });
  after(async () => {
    await one.close();
    await two.close();
    await db.drop();
  });

  for (const [what, path, body, quota] of [
    ['services', '/v1/services', (i: number) => ({ name: `s${i}`, image: IMAGE }), DEFAULT_QUOTAS.max_services],
    ['databases', '/v1/databases', (i: number) => ({ name: `db${i}`, type: i % 2 ? 'redis' : 'postgres' }), DEFAULT_QUOTAS.max_databases],
    ['environments', '/v1/environments', (i: number) => ({ name: `env${i}`, template_id: 'default' }), DEFAULT_QUOTAS.max_environments],
  ] as const) {
    test(`${what}: half the requests through each svcd, never more than the quota`, async () => {
      const a = await newTenant(one);
      const clients = [a.client, two.client.withKey(a.key)];
      const answers = await Promise.all(Array.from({ length: AT_ONCE }, (_, i) => clients[i % 2]!.raw('POST', path, { body: body(i) })));
      const created = answers.filter((r) => r.status === 201).length;
      const listed = (await clients[1]!.raw<unknown[]>('GET', path)).body.length;
      assert.equal(listed, quota, `${listed} ${what} after ${created} answers of 201`);
      assert.equal(created, quota);
      assert.ok(answers.every((r) => r.status === 201 || r.status === 409), answers.map((r) => r.status).join(','));
    });
  }
});
