// Spec rules that are about records, not containers, each checked over HTTP on the inert engine
// (inert-runtime.ts) and on both stores: the page size of every paginated list (spec 4,
// Pagination; spec 8: default 100, at most 200, larger values clamped), the default log tail
// (spec 4, Services: 100 lines), the default environment lease (spec 2 and 8: 3600 s), and the
// boundary values of a service's name (max 128) and port (0 means 8000, 1-65535).
// The activity feed's page size (default 50) is tested in http-requests.test.ts and
// http-hardening.test.ts; GET /v1/auth/keys and the previews list are not paginated (at most 20
// keys, at most 10 previews an environment), so they have no page size to check.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { Readable } from 'node:stream';
import { after, before, describe, test } from 'node:test';
import type { Environment, Service } from '@svc/contract';
import type { Runtime } from '../src/runtime/index.js';
import { eachStore, newTenant, startServer, type TestServer } from './harness.js';
import { inertRuntime } from './inert-runtime.js';

/** Any image: the inert engine "has" every image, and the deploy fails fast with nothing to clean up. */
const IMAGE = 'svc-test/none:1';
/** Spec 4 and 8, Pagination. */
const PAGE_DEFAULT = 100;
const PAGE_MAX = 200;
/** Spec 4, Services: GET /v1/services/{id}/logs without tail. */
const LOG_TAIL_DEFAULT = 100;
/** Spec 2 and 8: lease_duration_seconds when the request has none. */
const LEASE_DEFAULT_S = 3600;
/**
 * Rows seeded for each paginated list: past the maximum, so a clamp to 200 shows as 200 rows and
 * not as "all there were", and the 10 past it show that the rows were there to be returned.
 */
const ROWS = PAGE_MAX + 10;

/** The container the log test's service runs on: the only one the fake engine reports as running. */
const LOG_CONTAINER = 'spec-rules-logs';
/** What the fake engine holds in that container's log: more lines than the default tail. */
const LOG_LINES = Array.from({ length: 150 }, (_, i) => `line ${i + 1}`);

/**
 * Seeds `ROWS` rows of every paginated resource for one tenant, straight into the store in one
 * transaction: creating 210 of each over HTTP would take minutes, and most are capped by quotas
 * (5 services, 3 databases, 2 environments, 50 snapshots) far below a page. Every row is at rest
 * (stopped, finished), so no reconcile, reaper or build worker acts on it. Returns the service
 * that holds the deployments and builds.
 */
async function seedEveryList(t: TestServer, tenantId: string): Promise<string> {
  const p = randomBytes(4).toString('hex');
  const now = Math.floor(t.clock.now() / 1000);
  const anchor = `${p}-svc-0`;
  await t.deps.store.transaction(async (tx) => {
    for (let i = 0; i < ROWS; i++) {
      const at = now - ROWS + i;
      const serviceId = `${p}-svc-${i}`;
      await tx.services.insert({
        id: serviceId, tenant_id: tenantId, name: `paged ${i}`, name_key: `paged ${i}`, image: IMAGE, port: 8000, status: 'stopped', desired_state: 'stopped',
        dns_label: `paged-${i}`, last_error: null, container_id: null, upstream: null, crash_count: 0, crash_window_start: null, last_crash_at: null,
        circuit_open_at: null, created_at: at, updated_at: at,
      });
    }
    for (let i = 0; i < ROWS; i++) {
      const at = now - ROWS + i;
      await tx.deployments.insert({
        id: `${p}-dep-${i}`, service_id: anchor, tenant_id: tenantId, status: 'succeeded', reason: 'restart', image: IMAGE, pull: 0, build_id: null,
        last_error: null, created_at: at, started_at: at, finished_at: at,
      });
      await tx.builds.insert({
        id: `${p}-bld-${i}`, tenant_id: tenantId, service_id: anchor, status: 'succeeded', source_type: 'git', source_url: 'https://git.example.test/app.git',
        source_ref: null, image: `svc/${tenantId}/${anchor}:${i}`, commit_sha: null, last_error: null, deployment_id: null, holder: null, lease_until_ms: null,
        log_bytes: 0, log_truncated: 0, created_at: at, started_at: at, finished_at: at, duration_ms: 1000,
      });
      await tx.snapshots.insert({
        id: `${p}-snap-${i}`, tenant_id: tenantId, service_id: anchor, name: `snap-${i}`, description: '', image: IMAGE, port: 8000,
        sealed_env: 'unused', env_keys: '[]', created_at: at,
      });
      await tx.databases.insert({
        id: `${p}-db-${i}`, tenant_id: tenantId, name: `db-${i}`, type: 'redis', status: 'stopped', desired_state: 'stopped', image: 'svc-test/redis:7',
        username: 'default', database_name: '', sealed_password: 'unused', host_port: 30_000 + i, container_id: null, last_error: null, created_at: at, updated_at: at,
      });
      await tx.environments.insert({
        id: `${p}-env-${i}`, tenant_id: tenantId, name: `env-${i}`, template_id: 'default', image: 'svc-test/env-default:1', status: 'stopped',
        lease_expires_at: now + 30 * 86_400, expired_at: null, container_id: null, address: null, workload: null, last_error: null, created_at: at, updated_at: at, agent_token: null, published_port: null, node: null,
      });
    }
  });
  return anchor;
}

eachStore((kind) => {
  describe(`spec rules on records (${kind}, inert engine)`, () => {
    let t: TestServer;
    /** The tail of every logs() call the engine got, in order. */
    const tails: number[] = [];

    before(async () => {
      const inert = inertRuntime();
      // The inert engine, except for one running container whose log holds LOG_LINES.
      const runtime: Runtime = {
        ...inert,
        inspect: async (id) =>
          id === LOG_CONTAINER ? { id, name: id, state: 'running', exitCode: null, labels: {}, address: null } : inert.inspect(id),
        logs: async (_id, opts) => {
          tails.push(opts.tail);
          return Readable.from([Buffer.from(LOG_LINES.slice(-opts.tail).map((l) => `${l}\n`).join(''))]);
        },
      };
      // No build worker: the seeded builds are finished, but nothing should look at them.
      t = await startServer({ store: kind, overrides: { runtime, buildRunner: { workers: 0 } } });
    });
    after(async () => {
      await t.close();
    });

    test(`every paginated list: limit defaults to ${PAGE_DEFAULT}, values up to ${PAGE_MAX} are honoured, larger ones are clamped to ${PAGE_MAX}`, async () => {
      const a = await newTenant(t);
      const anchor = await seedEveryList(t, a.id);
      // GET /v1/builds takes limit only (spec 4, Builds): its rows past the clamp are counted in the store.
      const routes: Array<{ path: string; offset: boolean }> = [
        { path: '/v1/services', offset: true },
        { path: `/v1/services/${anchor}/deployments`, offset: true },
        { path: `/v1/services/${anchor}/builds`, offset: true },
        { path: '/v1/builds', offset: false },
        { path: '/v1/databases', offset: true },
        { path: '/v1/environments', offset: true },
        { path: '/v1/snapshots', offset: true },
      ];
      const rowsOf = async (path: string, query: Record<string, number>): Promise<number> => {
        const r = await a.client.raw<unknown[]>('GET', path, { query });
        assert.equal(r.status, 200, `${path} ${JSON.stringify(query)}: ${r.text}`);
        return r.body.length;
      };
      for (const { path, offset } of routes) {
        assert.equal(await rowsOf(path, {}), PAGE_DEFAULT, `${path}: no limit gives the default page`);
        assert.equal(await rowsOf(path, { limit: 150 }), 150, `${path}: a limit between the default and the maximum is honoured`);
        assert.equal(await rowsOf(path, { limit: PAGE_MAX }), PAGE_MAX, `${path}: the maximum itself`);
        for (const limit of [PAGE_MAX + 1, 5000]) {
          assert.equal(await rowsOf(path, { limit }), PAGE_MAX, `${path}: limit=${limit} is clamped to ${PAGE_MAX}, not refused`);
        }
        if (offset) assert.equal(await rowsOf(path, { limit: 5000, offset: PAGE_MAX }), ROWS - PAGE_MAX, `${path}: the rows past the clamp exist`);
      }
      assert.equal((await t.deps.store.builds.listForTenant(a.id, 1000)).length, ROWS, 'GET /v1/builds had more rows than it may return');
    });

    test(`logs without tail ask the engine for the last ${LOG_TAIL_DEFAULT} lines`, async () => {
      const a = await newTenant(t);
      const now = Math.floor(t.clock.now() / 1000);
      // A running service on the fake engine's running container (no deploy: the row is seeded).
      const id = `logs-${randomBytes(4).toString('hex')}`;
      await t.deps.store.services.insert({
        id, tenant_id: a.id, name: 'chatty', name_key: 'chatty', image: IMAGE, port: 8000, status: 'running', desired_state: 'running',
        dns_label: 'chatty', last_error: null, container_id: LOG_CONTAINER, upstream: null, crash_count: 0, crash_window_start: null, last_crash_at: null,
        circuit_open_at: null, created_at: now, updated_at: now,
      });
      tails.length = 0;
      const r = await a.client.raw<string>('GET', `/v1/services/${id}/logs`);
      assert.equal(r.status, 200, r.text);
      assert.deepEqual(tails, [LOG_TAIL_DEFAULT], 'the engine was asked for the default tail');
      const lines = r.text.split('\n').filter((l) => l !== '');
      assert.equal(lines.length, LOG_TAIL_DEFAULT);
      assert.deepEqual([lines[0], lines.at(-1)], [`line ${LOG_LINES.length - LOG_TAIL_DEFAULT + 1}`, `line ${LOG_LINES.length}`], 'the last lines, not the first');

      // The default applies only when tail is absent: an explicit one reaches the engine as given.
      tails.length = 0;
      const five = await a.client.raw<string>('GET', `/v1/services/${id}/logs`, { query: { tail: 5 } });
      assert.equal(five.status, 200, five.text);
      assert.deepEqual(tails, [5]);
      assert.equal(five.text.split('\n').filter((l) => l !== '').length, 5);
    });

    test(`an environment created without a lease gets ${LEASE_DEFAULT_S} s: lease_expires_at is created_at + ${LEASE_DEFAULT_S}`, async () => {
      const a = await newTenant(t);
      const r = await a.client.raw<Environment>('POST', '/v1/environments', { body: { name: 'leased', template_id: 'default' } });
      assert.equal(r.status, 201, r.text);
      assert.equal(r.body.created_at, Math.floor(t.clock.now() / 1000));
      assert.equal(r.body.lease_expires_at, r.body.created_at + LEASE_DEFAULT_S);
      const got = await a.client.raw<Environment>('GET', `/v1/environments/${r.body.id}`);
      assert.equal(got.body.lease_expires_at, r.body.created_at + LEASE_DEFAULT_S, 'the stored lease, not only the answer');

      // An explicit lease is taken as given: 3600 is the default, not a fixed length.
      const short = await a.client.raw<Environment>('POST', '/v1/environments', { body: { name: 'short', template_id: 'default', lease_duration_seconds: 60 } });
      assert.equal(short.status, 201, short.text);
      assert.equal(short.body.lease_expires_at, short.body.created_at + 60);
    });

    test('service create: a 128-character name is accepted and 129 is 400; port 0 means 8000; 65535 is kept', async () => {
      const a = await newTenant(t);
      const create = (body: Record<string, unknown>) => a.client.raw<Service & { error: string }>('POST', '/v1/services', { body });

      const name128 = 'n'.repeat(128);
      const longest = await create({ name: name128, image: IMAGE });
      assert.equal(longest.status, 201, longest.text);
      assert.equal(longest.body.name, name128, 'the whole name is kept');
      const tooLong = await create({ name: 'n'.repeat(129), image: IMAGE });
      assert.equal(tooLong.status, 400, tooLong.text);
      assert.match(tooLong.body.error, /name/);

      const zero = await create({ name: 'port zero', image: IMAGE, port: 0 });
      assert.equal(zero.status, 201, zero.text);
      assert.equal(zero.body.port, 8000, 'an explicit port 0 is the default 8000');
      assert.equal((await a.client.raw<Service>('GET', `/v1/services/${zero.body.id}`)).body.port, 8000, 'stored as 8000');

      const top = await create({ name: 'port top', image: IMAGE, port: 65535 });
      assert.equal(top.status, 201, top.text);
      assert.equal(top.body.port, 65535);
    });
  });
});
