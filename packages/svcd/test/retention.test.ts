// Retention (src/retention/): every rule on both stores. Rows are seeded straight into the store
// at chosen ages and one sweep is run under a manual clock; what is past its window or its cap
// goes, what is younger, protected or unfinished stays. The HTTP part (a pruned build log, the
// snapshot quota, the job wired into a running svcd) runs over the inert engine.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import pino from 'pino';
import { buildConfig, type RawOptions } from '../src/config.js';
import { PeriodicJobs, type JobLease } from '../src/jobs/periodic.js';
import { Retention, RETENTION_EVERY_MS, RETENTION_JOB, ROWS_PER_BATCH } from '../src/retention/retention.js';
import {
  ACTIVITY_PER_TENANT_MAX,
  BUILD_LOGS_KEPT_PER_SERVICE,
  BUILDS_PER_SERVICE_MAX,
  DEFAULT_RETENTION,
  DEPLOYMENTS_KEPT_PER_SERVICE,
  DEPLOYMENTS_PER_SERVICE_MAX,
  REVOKED_KEYS_PER_TENANT_MAX,
  SNAPSHOTS_PER_TENANT_MAX,
} from '../src/retention/rules.js';
import { openStore, type DeploymentStatus, type NewBuildRow, type NewDeploymentRow, type Store } from '../src/store/index.js';
import { eachStore, newTenant, startServer, storeLocation, tenantRow, waitFor, type TestServer } from './harness.js';
import { inertRuntime } from './inert-runtime.js';
import { ManualClock } from './manual-clock.js';

const DAY = 86_400;
const silent = pino({ level: 'silent' });

function serviceRow(id: string, tenantId: string, at: number) {
  return {
    id, tenant_id: tenantId, name: id, name_key: id, image: 'x', port: 8000, status: 'running' as const, desired_state: 'running' as const,
    dns_label: id, last_error: null, container_id: null, upstream: null, crash_count: 0, crash_window_start: null,
    last_crash_at: null, circuit_open_at: null, created_at: at, updated_at: at,
  };
}

function deploymentRow(id: string, serviceId: string, tenantId: string, created: number, status: DeploymentStatus, finished: number | null): NewDeploymentRow {
  return { id, service_id: serviceId, tenant_id: tenantId, status, reason: 'restart', image: 'x', pull: 0, build_id: null, last_error: null, created_at: created, started_at: created, finished_at: finished };
}

function buildRow(id: string, serviceId: string, tenantId: string, created: number, finished: number | null): NewBuildRow {
  return {
    id, tenant_id: tenantId, service_id: serviceId, status: finished === null ? 'running' : 'succeeded', source_type: 'git', source_url: 'https://x/y.git',
    source_ref: null, image: `svc/${tenantId}/${serviceId}:${id}`, commit_sha: null, last_error: null, deployment_id: null, holder: null,
    lease_until_ms: null, log_bytes: 0, log_truncated: 0, created_at: created, started_at: created, finished_at: finished, duration_ms: null,
  };
}

function keyRow(id: string, tenantId: string, o: { created: number; expires?: number; revoked?: number }) {
  return { id, tenant_id: tenantId, name: id, prefix: 'svc_x', secret_hash: 'h', created_at: o.created, last_used_at: null, expires_at: o.expires ?? null, revoked_at: o.revoked ?? null };
}

async function activityIds(store: Store, tenantId: string): Promise<string[]> {
  return (await store.activity.list({ tenantId, limit: 1_000_000, offset: 0 })).map((r) => r.id);
}

async function deploymentIds(store: Store, serviceId: string): Promise<string[]> {
  return (await store.deployments.listForService(serviceId, 1000, 0)).map((d) => d.id).sort();
}

eachStore((kind) => {
  describe(`retention rules (${kind})`, () => {
    let store: Store;
    let cleanup: () => Promise<void>;
    const clock = new ManualClock();
    const now = Math.floor(clock.now() / 1000);
    let retention: Retention;

    before(async () => {
      const loc = await storeLocation(kind);
      cleanup = loc.cleanup;
      store = await openStore(loc);
      retention = new Retention(store, clock, silent, DEFAULT_RETENTION);
    });
    after(async () => {
      await store.close();
      await cleanup();
    });

    test('activity: entries past the window go, in batches; younger ones and other tenants stay', async () => {
      await store.tenants.insert(tenantRow('ta', 'act-a'));
      const old = now - (DEFAULT_RETENTION.activityDays + 1) * DAY;
      const young = now - (DEFAULT_RETENTION.activityDays - 1) * DAY;
      // More than two batches of old entries: one sweep drains them all.
      const oldCount = ROWS_PER_BATCH * 2 + 3;
      await store.transaction(async (tx) => {
        for (let i = 0; i < oldCount; i++) {
          await tx.activity.insert({ id: `old-${i}`, tenant_id: 'ta', action: 'x.y', resource_type: 'x', resource_id: 'r', service_id: null, details: '{}', created_at: old });
        }
        await tx.activity.insert({ id: 'young', tenant_id: 'ta', action: 'x.y', resource_type: 'x', resource_id: 'r', service_id: null, details: '{}', created_at: young });
      });
      const report = await retention.sweep();
      assert.ok(report.activity >= oldCount, `deleted ${report.activity}`);
      assert.deepEqual(await activityIds(store, 'ta'), ['young']);
    });

    test(`activity: a tenant keeps its newest ${ACTIVITY_PER_TENANT_MAX} entries`, async () => {
      await store.tenants.insert(tenantRow('tb', 'act-b'));
      await store.tenants.insert(tenantRow('tc', 'act-c'));
      const over = 5;
      await store.transaction(async (tx) => {
        for (let i = 0; i < ACTIVITY_PER_TENANT_MAX + over; i++) {
          await tx.activity.insert({ id: `b-${i}`, tenant_id: 'tb', action: 'x.y', resource_type: 'x', resource_id: 'r', service_id: null, details: '{}', created_at: now - DAY });
        }
        for (let i = 0; i < 3; i++) {
          await tx.activity.insert({ id: `c-${i}`, tenant_id: 'tc', action: 'x.y', resource_type: 'x', resource_id: 'r', service_id: null, details: '{}', created_at: now - DAY });
        }
      });
      await retention.sweep();
      const kept = await activityIds(store, 'tb');
      assert.equal(kept.length, ACTIVITY_PER_TENANT_MAX);
      assert.equal(kept[0], `b-${ACTIVITY_PER_TENANT_MAX + over - 1}`, 'the newest stays');
      assert.equal(kept.at(-1), `b-${over}`, 'the oldest five are gone');
      assert.equal((await activityIds(store, 'tc')).length, 3, 'a tenant under the cap keeps everything');
    });

    test('deployments: finished ones past the window go, but a service keeps its newest and the one it runs', async () => {
      await store.tenants.insert(tenantRow('td', 'deployer'));
      await store.services.insert(serviceRow('sd1', 'td', now));
      await store.services.insert(serviceRow('sd2', 'td', now));
      const old = now - (DEFAULT_RETENTION.deploymentDays + 10) * DAY;
      // sd1: 15 old deployments; d3 is the last that succeeded (what the service runs), every
      // later one failed. The newest 10 (d5..d14) and d3 stay; d0, d1, d2 and d4 go.
      for (let i = 0; i < 15; i++) {
        await store.deployments.insert(deploymentRow(`d${String(i).padStart(2, '0')}`, 'sd1', 'td', old + i, i <= 3 ? 'succeeded' : 'failed', old + i + 1));
      }
      // sd2: past the newest 10, an old finished one (goes), a young finished one (stays) and an
      // old one still running (never touched).
      await store.deployments.insert(deploymentRow('e-old', 'sd2', 'td', old, 'failed', old + 1));
      await store.deployments.insert(deploymentRow('e-running', 'sd2', 'td', old + 2, 'running', null));
      await store.deployments.insert(deploymentRow('e-young', 'sd2', 'td', now - 10 * DAY, 'cancelled', now - 10 * DAY));
      for (let i = 0; i < DEPLOYMENTS_KEPT_PER_SERVICE; i++) {
        await store.deployments.insert(deploymentRow(`e-new-${String(i).padStart(2, '0')}`, 'sd2', 'td', now - DAY + i, 'succeeded', now - DAY + i));
      }
      await retention.sweep();
      const sd1 = await deploymentIds(store, 'sd1');
      assert.deepEqual(sd1, ['d03', 'd05', 'd06', 'd07', 'd08', 'd09', 'd10', 'd11', 'd12', 'd13', 'd14']);
      const sd2 = await deploymentIds(store, 'sd2');
      assert.ok(!sd2.includes('e-old'), 'old and finished: gone');
      assert.ok(sd2.includes('e-young'), 'inside the window: kept');
      assert.ok(sd2.includes('e-running'), 'unfinished: kept');
      assert.equal(sd2.length, DEPLOYMENTS_KEPT_PER_SERVICE + 2);
    });

    test(`deployments: a service keeps at most ${DEPLOYMENTS_PER_SERVICE_MAX} of them, whatever their age`, async () => {
      await store.tenants.insert(tenantRow('te', 'restarter'));
      await store.services.insert(serviceRow('se1', 'te', now));
      const over = 3;
      await store.transaction(async (tx) => {
        for (let i = 0; i < DEPLOYMENTS_PER_SERVICE_MAX + over; i++) {
          await tx.deployments.insert(deploymentRow(`r${String(i).padStart(4, '0')}`, 'se1', 'te', now - 3600 + i, 'failed', now - 3600 + i));
        }
      });
      await retention.sweep();
      const kept = await deploymentIds(store, 'se1');
      assert.equal(kept.length, DEPLOYMENTS_PER_SERVICE_MAX);
      assert.equal(kept[0], `r${String(over).padStart(4, '0')}`, 'the oldest three went');
    });

    test('build logs: builds finished before the window lose their log (the record stays, marked); younger and running ones keep theirs', async () => {
      await store.tenants.insert(tenantRow('tf', 'builder'));
      await store.services.insert(serviceRow('sf1', 'tf', now));
      const old = now - (DEFAULT_RETENTION.buildLogDays + 1) * DAY;
      const young = now - (DEFAULT_RETENTION.buildLogDays - 1) * DAY;
      await store.builds.insert(buildRow('b-old', 'sf1', 'tf', old - 60, old));
      await store.builds.insert(buildRow('b-young', 'sf1', 'tf', young - 60, young));
      await store.builds.insert(buildRow('b-running', 'sf1', 'tf', old - 60, null));
      // More chunks than one delete takes: the log goes over several statements.
      for (const id of ['b-old', 'b-young', 'b-running']) {
        for (let i = 0; i < 120; i++) await store.builds.appendLog(id, `line ${i}\n`, 5 * 1024 * 1024);
      }
      const report = await retention.sweep();
      assert.equal(report.buildLogs, 1);
      assert.deepEqual(await store.builds.logChunks('b-old', 0, 1000), []);
      const pruned = await store.builds.findAny('b-old');
      assert.equal(pruned?.log_pruned_at, now, 'the record stays, marked');
      assert.equal(pruned.status, 'succeeded');
      assert.equal((await store.builds.logChunks('b-young', 0, 1000)).length, 120);
      assert.equal((await store.builds.findAny('b-young'))?.log_pruned_at, null);
      assert.equal((await store.builds.logChunks('b-running', 0, 1000)).length, 120);
    });

    test(`builds: past a service's newest ${BUILD_LOGS_KEPT_PER_SERVICE} the log goes, past ${BUILDS_PER_SERVICE_MAX} the record too`, async () => {
      await store.tenants.insert(tenantRow('tg', 'build-loop'));
      await store.services.insert(serviceRow('sg1', 'tg', now));
      const over = 2;
      const total = BUILDS_PER_SERVICE_MAX + over;
      const id = (i: number) => `g${String(i).padStart(4, '0')}`;
      await store.transaction(async (tx) => {
        for (let i = 0; i < total; i++) await tx.builds.insert(buildRow(id(i), 'sg1', 'tg', now - 3600 + i, now - 3600 + i + 1));
      });
      // Young builds, all inside the window: only the caps apply.
      const newestPruned = total - BUILD_LOGS_KEPT_PER_SERVICE - 1;
      for (const i of [0, newestPruned, newestPruned + 1]) await store.builds.appendLog(id(i), 'output\n', 1024);
      await retention.sweep();
      const rows = await store.builds.listForService('tg', 'sg1', 1000, 0);
      assert.equal(rows.length, BUILDS_PER_SERVICE_MAX);
      assert.equal(await store.builds.findAny(id(0)), undefined, 'the oldest records went');
      assert.equal(await store.builds.findAny(id(1)), undefined);
      assert.deepEqual(await store.builds.logChunks(id(0), 0, 1000), [], 'their logs with them');
      assert.equal((await store.builds.findAny(id(newestPruned)))?.log_pruned_at, now, `the ${BUILD_LOGS_KEPT_PER_SERVICE + 1}th newest lost its log`);
      assert.deepEqual(await store.builds.logChunks(id(newestPruned), 0, 1000), []);
      assert.equal((await store.builds.findAny(id(newestPruned + 1)))?.log_pruned_at, null, `the ${BUILD_LOGS_KEPT_PER_SERVICE}th newest keeps it`);
      assert.equal((await store.builds.logChunks(id(newestPruned + 1), 0, 1000)).length, 1);
    });

    test('keys: revoked and expired ones go after the window; active ones and recent ones stay', async () => {
      await store.tenants.insert(tenantRow('th', 'keyholder'));
      const past = now - (DEFAULT_RETENTION.keyDays + 1) * DAY;
      const recent = now - (DEFAULT_RETENTION.keyDays - 1) * DAY;
      const ancient = now - 1000 * DAY;
      await store.apiKeys.insert(keyRow('k-revoked-old', 'th', { created: ancient, revoked: past }));
      await store.apiKeys.insert(keyRow('k-revoked-recent', 'th', { created: ancient, revoked: recent }));
      await store.apiKeys.insert(keyRow('k-expired-old', 'th', { created: ancient, expires: past }));
      await store.apiKeys.insert(keyRow('k-expired-recent', 'th', { created: ancient, expires: recent }));
      await store.apiKeys.insert(keyRow('k-active', 'th', { created: ancient }));
      await store.apiKeys.insert(keyRow('k-expires-later', 'th', { created: ancient, expires: now + DAY }));
      await retention.sweep();
      for (const gone of ['k-revoked-old', 'k-expired-old']) assert.equal(await store.apiKeys.findForAuth(gone), undefined, gone);
      for (const kept of ['k-revoked-recent', 'k-expired-recent', 'k-active', 'k-expires-later']) assert.ok(await store.apiKeys.findForAuth(kept), kept);
    });

    test(`keys: a tenant keeps its ${REVOKED_KEYS_PER_TENANT_MAX} most recently revoked keys`, async () => {
      await store.tenants.insert(tenantRow('ti', 'key-churner'));
      const over = 3;
      await store.transaction(async (tx) => {
        for (let i = 0; i < REVOKED_KEYS_PER_TENANT_MAX + over; i++) {
          await tx.apiKeys.insert(keyRow(`kr${String(i).padStart(4, '0')}`, 'ti', { created: now - DAY, revoked: now - DAY + i }));
        }
        await tx.apiKeys.insert(keyRow('kr-active', 'ti', { created: now - DAY }));
      });
      await retention.sweep();
      for (let i = 0; i < over; i++) assert.equal(await store.apiKeys.findForAuth(`kr${String(i).padStart(4, '0')}`), undefined);
      assert.ok(await store.apiKeys.findForAuth(`kr${String(over).padStart(4, '0')}`));
      assert.ok(await store.apiKeys.findForAuth('kr-active'), 'a key not revoked is never counted or pruned');
      assert.equal(await store.apiKeys.countActive('ti'), 1);
    });

    test("published ports: a claim its owner no longer holds (an older svcd's release, mid-upgrade) is given up and rests; held ones stay", async () => {
      await store.tenants.insert(tenantRow('tp', 'port-holder'));
      await store.services.insert(serviceRow('sp-moved', 'tp', now));
      await store.services.insert(serviceRow('sp-held', 'tp', now));
      assert.equal(await store.publishedPorts.allocate('services', 'sp-moved', 31100), true);
      assert.equal(await store.publishedPorts.allocate('services', 'sp-held', 31101), true);
      // Released by an svcd of before the claims: its column alone.
      await store.services.update('sp-moved', { published_port: null });
      const report = await retention.sweep();
      assert.equal(report.portClaims, 1);
      assert.deepEqual((await store.publishedPorts.taken(now - 1)).filter((p) => p >= 31100 && p <= 31101).sort(), [31100, 31101], 'resting');
      assert.deepEqual((await store.publishedPorts.taken(now)).filter((p) => p >= 31100 && p <= 31101), [31101]);
      assert.equal(await store.publishedPorts.allocate('services', 'sp-moved', 31100), true, 'its claim is gone: the port can be claimed again');
    });

    test('idempotency: answers past their 10 minutes go, in batches; live ones stay', async () => {
      const claim = { tenantId: 'tj', method: 'POST', path: '/v1/x', bodyHash: 'h', now: now - 700, expiresAt: now - 100 };
      const expired = ROWS_PER_BATCH * 2 + 1;
      for (let i = 0; i < expired; i++) assert.equal(await store.idempotency.claim({ ...claim, key: `e${i}` }), undefined);
      assert.equal(await store.idempotency.claim({ ...claim, key: 'live', now, expiresAt: now + 600 }), undefined);
      assert.equal(await retention.pruneIdempotency(), expired);
      assert.ok(await store.idempotency.claim({ ...claim, key: 'live', now, expiresAt: now + 600 }), 'the live claim still holds its key');
    });

    test('the sweep runs under its lease: while another svcd holds it, this one deletes nothing', async () => {
      await store.tenants.insert(tenantRow('tk', 'leased'));
      const old = now - (DEFAULT_RETENTION.activityDays + 1) * DAY;
      await store.activity.insert({ id: 'leased-old', tenant_id: 'tk', action: 'x.y', resource_type: 'x', resource_id: 'r', service_id: null, details: '{}', created_at: old });
      const jobs = new PeriodicJobs({ store, clock, timers: clock, log: silent, holder: 'svcd-b/1' });
      const job = { name: RETENTION_JOB, everyMs: RETENTION_EVERY_MS, run: async () => { await retention.sweep(); } };
      assert.equal(await store.jobLocks.tryAcquire(RETENTION_JOB, 'svcd-a/1', clock.now(), 60_000), true);
      assert.equal(await jobs.runOnce(job), false);
      assert.deepEqual(await activityIds(store, 'tk'), ['leased-old']);
      await store.jobLocks.release(RETENTION_JOB, 'svcd-a/1');
      assert.equal(await jobs.runOnce(job), true, 'the lease is free: this svcd carries on');
      assert.deepEqual(await activityIds(store, 'tk'), []);
      await jobs.close();
    });
    test('a run longer than its lease renews it; one whose lease went to another svcd stops before its next write', async () => {
      const name = 'test.fenced';
      const jobs = new PeriodicJobs({ store, clock, timers: clock, log: silent, holder: 'svcd-a/1' });
      let go!: () => void;
      const gate = new Promise<void>((resolve) => (go = resolve));
      const writes: string[] = [];
      let lease: JobLease | null = null;
      const run = jobs.runOnce({
        name,
        everyMs: 60_000,
        run: async (l) => {
          lease = l;
          await l.assertHeld();
          writes.push('first');
          await gate;
          await l.assertHeld();
          writes.push('second');
        },
      });
      const settle = () => new Promise((r) => setTimeout(r, 50));
      await waitFor('the first write', () => Promise.resolve(writes.length === 1));
      // Two minutes on (twice the lease), renewed every 20 s: nobody can take it.
      for (let i = 0; i < 6; i++) {
        clock.advance(20_000);
        await settle();
      }
      assert.equal(await store.jobLocks.tryAcquire(name, 'svcd-b/1', clock.now(), 60_000), false, 'renewed: not taken over');
      // Its svcd stalls past the lease, and another svcd's run of the job takes it and is over
      // (its lease freed) before this one's next renewal.
      await store.jobLocks.release(name, 'svcd-a/1');
      assert.equal(await store.jobLocks.tryAcquire(name, 'svcd-b/1', clock.now(), 60_000), true);
      await store.jobLocks.release(name, 'svcd-b/1');
      clock.advance(20_000);
      // The renewal's round trip to the store: waited for, not a fixed pause (PostgreSQL under a full run's load takes longer).
      await waitFor('the renewal to find the lease lost', () => Promise.resolve(lease?.signal.aborted === true), 10_000).catch(() => undefined);
      assert.equal((lease as JobLease | null)?.signal.aborted, true, 'the renewal found it lost, and did not take it back');
      assert.equal(await store.jobLocks.holds(name, 'svcd-a/1', clock.now()), false);
      go();
      assert.equal(await run, true);
      assert.deepEqual(writes, ['first'], 'the run whose lease lapsed wrote nothing more');
      assert.equal(await store.jobLocks.tryAcquire(name, 'svcd-c/1', clock.now(), 60_000), true, 'the job is free for the next run');
      await jobs.close();
    });
    test('ticks while the last run of the job goes on start no run beside it (its lease is not freed under a second run): they are folded into one run after it', async () => {
      const name = 'test.long';
      const jobs = new PeriodicJobs({ store, clock, timers: clock, log: silent, holder: 'svcd-a/1' });
      let go!: () => void;
      const gate = new Promise<void>((resolve) => (go = resolve));
      let runs = 0;
      let ended = 0;
      let atOnce = 0;
      let most = 0;
      jobs.schedule({
        name,
        everyMs: 15_000,
        run: async () => {
          runs++;
          most = Math.max(most, ++atOnce);
          await gate;
          atOnce--;
          ended++;
        },
      });
      const settle = () => new Promise((r) => setTimeout(r, 50));
      clock.advance(15_000);
      await waitFor('the first run', () => Promise.resolve(runs === 1));
      for (let i = 0; i < 3; i++) {
        clock.advance(15_000);
        await settle();
      }
      assert.equal(runs, 1, 'ticks during the run started no other');
      assert.equal(await store.jobLocks.holds(name, 'svcd-a/1', clock.now()), true);
      // A run asked for meanwhile answers with the run that follows.
      let asked: boolean | null = null;
      void jobs.runOnce({ name, everyMs: 15_000, run: () => Promise.resolve() }).then((ran) => (asked = ran));
      await settle();
      assert.equal(asked, null, 'not answered while the run goes on');
      go();
      await waitFor('the three ticks folded into one run after it', () => Promise.resolve(ended === 2));
      await waitFor('the lease freed', async () => !(await store.jobLocks.holds(name, 'svcd-a/1', clock.now())));
      await settle();
      assert.equal(runs, 2, 'one run for the three ticks');
      assert.equal(asked, true, 'the run asked for meanwhile is the one that followed');
      clock.advance(15_000);
      await waitFor('the next tick runs it again', () => Promise.resolve(ended === 3));
      assert.equal(most, 1, 'never two runs at once');
      await jobs.close();
    });
  });

  describe(`retention over HTTP (${kind})`, () => {
    let t: TestServer;

    before(async () => {
      t = await startServer({ store: kind, overrides: { runtime: inertRuntime(), buildRunner: { workers: 0 } } });
    });
    after(async () => {
      await t.close();
    });

    async function service(client: TestServer['client'], name: string): Promise<string> {
      const r = await client.raw<{ id: string }>('POST', '/v1/services', { body: { name, image: 'svc-test/none:1' } });
      assert.equal(r.status, 201, r.text);
      return r.body.id;
    }

    test('a build whose log was pruned: GET logs says so, GET build still answers', async () => {
      const a = await newTenant(t);
      const serviceId = await service(a.client, 'built');
      const now = Math.floor(t.clock.now() / 1000);
      const old = now - (DEFAULT_RETENTION.buildLogDays + 1) * DAY;
      await t.deps.store.builds.insert(buildRow('httpbuildold', serviceId, a.id, old - 60, old));
      await t.deps.store.builds.insert(buildRow('httpbuildnew', serviceId, a.id, now - 60, now));
      for (const id of ['httpbuildold', 'httpbuildnew']) await t.deps.store.builds.appendLog(id, 'Step 1/1 : FROM scratch\n', 1024);
      await t.deps.retention.sweep();
      for (const follow of ['', '?follow=true']) {
        const logs = await a.client.raw('GET', `/v1/services/${serviceId}/builds/httpbuildold/logs${follow}`);
        assert.equal(logs.status, 200);
        assert.match(logs.text, /log was pruned on \d{4}-\d\d-\d\dT/);
        assert.doesNotMatch(logs.text, /Step 1/);
      }
      const build = await a.client.raw<{ id: string; status: string }>('GET', `/v1/services/${serviceId}/builds/httpbuildold`);
      assert.equal(build.status, 200);
      assert.equal(build.body.status, 'succeeded');
      assert.equal((await a.client.raw('GET', `/v1/services/${serviceId}/builds/httpbuildnew/logs`)).text, 'Step 1/1 : FROM scratch\n');
    });

    test(`snapshots: a tenant keeps at most ${SNAPSHOTS_PER_TENANT_MAX}; one more is 409 quota exceeded`, async () => {
      const a = await newTenant(t);
      const serviceId = await service(a.client, 'snapped');
      let first = '';
      for (let i = 0; i < SNAPSHOTS_PER_TENANT_MAX; i++) {
        const r = await a.client.raw<{ id: string }>('POST', `/v1/services/${serviceId}/snapshots`, { body: { name: `s${i}` } });
        assert.equal(r.status, 201, r.text);
        first ||= r.body.id;
      }
      const refused = await a.client.raw<{ error: string }>('POST', `/v1/services/${serviceId}/snapshots`, { body: { name: 'one-more' } });
      assert.equal(refused.status, 409);
      assert.match(refused.body.error, /^quota exceeded: maximum snapshots reached/);
      const b = await newTenant(t);
      const other = await service(b.client, 'snapped');
      assert.equal((await b.client.raw('POST', `/v1/services/${other}/snapshots`, { body: { name: 's' } })).status, 201, 'the quota is per tenant');
      assert.equal((await a.client.raw('DELETE', `/v1/snapshots/${first}`)).status, 204);
      assert.equal((await a.client.raw('POST', `/v1/services/${serviceId}/snapshots`, { body: { name: 'again' } })).status, 201, 'room again after a delete');
    });

    test('svcd runs the sweep on its own every few minutes', async () => {
      const a = await newTenant(t);
      const old = Math.floor(t.clock.now() / 1000) - (DEFAULT_RETENTION.activityDays + 1) * DAY;
      await t.deps.store.activity.insert({ id: 'wired-old', tenant_id: a.id, action: 'x.y', resource_type: 'x', resource_id: 'r', service_id: null, details: '{}', created_at: old });
      const ids = async () => (await a.client.raw<Array<{ id: string }>>('GET', '/v1/activity?limit=200')).body.map((e) => e.id);
      assert.ok((await ids()).includes('wired-old'));
      t.clock.advance(RETENTION_EVERY_MS);
      await waitFor('the sweep', async () => !(await ids()).includes('wired-old'));
    });
  });
});

describe('retention flags', () => {
  const raw: RawOptions = { listen: '127.0.0.1:0', dataDir: '/tmp/x', sandbox: 'auto', dockerHost: 'unix:///x', logLevel: 'info', dev: true };

  test('defaults, and each window from its flag', () => {
    assert.deepEqual(buildConfig(raw, {}).retention, DEFAULT_RETENTION);
    const c = buildConfig({ ...raw, activityRetentionDays: '7', deploymentRetentionDays: '14', buildLogRetentionDays: '3', keyRetentionDays: '1' }, {});
    assert.deepEqual(c.retention, { activityDays: 7, deploymentDays: 14, buildLogDays: 3, keyDays: 1 });
  });

  test('out of range or not whole days: refused at start-up', () => {
    for (const v of ['0', '3651', '1.5', 'ten', '']) {
      assert.throws(() => buildConfig({ ...raw, activityRetentionDays: v }, {}), /--activity-retention-days must be an integer from 1 to 3650/);
    }
    assert.throws(() => buildConfig({ ...raw, keyRetentionDays: '-1' }, {}), /--key-retention-days/);
  });
});
