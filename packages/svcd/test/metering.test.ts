// Metering: the rollup arithmetic (pure, and through the store and the routes with the manual
// clock), the metrics routes' rules, 503 from an unavailable metering store, a CPU-burning
// service on the real engine, and the operator's Prometheus endpoint parsed as the text format.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { UsageRollup } from '@svc/client';
import { dailyRollups, hourlyRollups } from '../src/metering/rollups.js';
import { Sampler, sampleRow } from '../src/metering/sampler.js';
import { rfc3339 } from '../src/metering/metering.js';
import { workloadStats, type Runtime, type WorkloadInfo } from '../src/runtime/index.js';
import type { UsageRollupRow, UsageSampleRow } from '../src/store/index.js';
import { freshPgDatabase, newTenant, PG_ADMIN_URL, startServer, eachStore, waitFor, type TestServer } from './harness.js';
import { BURNER_IMAGE, engineTenants, ensureTestImages } from './images.js';
import { inertRuntime } from './inert-runtime.js';

const MB = 1024 * 1024;
const T0 = Date.UTC(2026, 0, 1) / 1000; // the manual clock's start: 2026-01-01T00:00:00Z

function sample(over: Partial<UsageSampleRow> & Pick<UsageSampleRow, 'container_id' | 'sampled_at' | 'tenant_id'>): UsageSampleRow {
  return {
    kind: 'service',
    resource_id: 'svc1',
    seconds: 30,
    cpu_micros: 0,
    net_rx_bytes: 0,
    net_tx_bytes: 0,
    disk_read_bytes: 0,
    disk_write_bytes: 0,
    cpu_micros_delta: 0,
    net_rx_delta: 0,
    net_tx_delta: 0,
    disk_read_delta: 0,
    disk_write_delta: 0,
    memory_bytes: 0,
    ...over,
  };
}

describe('metering arithmetic', () => {
  test('a reading becomes deltas against the previous one; a restarted counter counts whole', () => {
    const w = { containerId: 'c1', tenantId: 't1', kind: 'service', resourceId: 's1' };
    const first = sampleRow(w, { cpuMicros: 5_000_000, memoryBytes: 10 * MB, netRxBytes: 100, netTxBytes: 50, blockReadBytes: 0, blockWriteBytes: 0 }, T0, undefined, 30);
    assert.equal(first.seconds, 0, 'a first reading counts no running time');
    assert.equal(first.cpu_micros_delta, 5_000_000, 'but what the container used since it started');
    const second = sampleRow(w, { cpuMicros: 8_000_000, memoryBytes: 12 * MB, netRxBytes: 300, netTxBytes: 60, blockReadBytes: 10, blockWriteBytes: 20 }, T0 + 30, first, 30);
    assert.deepEqual(
      [second.seconds, second.cpu_micros_delta, second.net_rx_delta, second.net_tx_delta, second.disk_read_delta, second.disk_write_delta, second.memory_bytes],
      [30, 3_000_000, 200, 10, 10, 20, 12 * MB],
    );
    const restarted = sampleRow(w, { cpuMicros: 1_000, memoryBytes: MB, netRxBytes: 5, netTxBytes: 5, blockReadBytes: 0, blockWriteBytes: 0 }, T0 + 60, second, 30);
    assert.equal(restarted.cpu_micros_delta, 1_000);
    assert.equal(restarted.net_rx_delta, 5);
    const afterOutage = sampleRow(w, { cpuMicros: 2_000, memoryBytes: MB, netRxBytes: 5, netTxBytes: 5, blockReadBytes: 0, blockWriteBytes: 0 }, T0 + 3600, restarted, 30);
    assert.equal(afterOutage.seconds, 30, 'a gap far past the interval counts one interval of running time');
  });

  test("the engine's stats answer is read as the working set and summed counters", () => {
    const s = workloadStats({
      cpu_stats: { cpu_usage: { total_usage: 2_500_000_000 } },
      memory_stats: { usage: 50 * MB, stats: { total_inactive_file: 10 * MB } },
      networks: { eth0: { rx_bytes: 100, tx_bytes: 20 }, eth1: { rx_bytes: 1, tx_bytes: 2 } },
      blkio_stats: { io_service_bytes_recursive: [{ op: 'Read', value: 7 }, { op: 'Write', value: 9 }, { op: 'read', value: 1 }, { op: 'Total', value: 17 }] },
    });
    assert.deepEqual(s, { cpuMicros: 2_500_000, memoryBytes: 40 * MB, netRxBytes: 101, netTxBytes: 22, blockReadBytes: 8, blockWriteBytes: 9 });
  });

  test("hourly rollups sum a tenant's containers per moment and per service; daily ones weight by moments", () => {
    const h = T0 + 3600;
    const samples = [
      // service s1: two readings
      sample({ container_id: 'a', sampled_at: h, tenant_id: 't', resource_id: 's1', cpu_micros_delta: 1_500_000, memory_bytes: 100 * MB, net_rx_delta: 10 }),
      sample({ container_id: 'a', sampled_at: h + 30, tenant_id: 't', resource_id: 's1', cpu_micros_delta: 500_000, memory_bytes: 300 * MB, net_tx_delta: 7 }),
      // the tenant's database at the same moments
      sample({ container_id: 'b', sampled_at: h, tenant_id: 't', kind: 'database', resource_id: 'd1', cpu_micros_delta: 1_000_000, memory_bytes: 50 * MB }),
      sample({ container_id: 'b', sampled_at: h + 30, tenant_id: 't', kind: 'database', resource_id: 'd1', memory_bytes: 50 * MB, disk_write_delta: 4096 }),
      // another tenant, and a reading of the next hour: neither belongs here
      sample({ container_id: 'c', sampled_at: h, tenant_id: 'u', cpu_micros_delta: 9_000_000 }),
      sample({ container_id: 'a', sampled_at: h + 3600, tenant_id: 't', cpu_micros_delta: 9_000_000 }),
    ];
    const rows = hourlyRollups(samples, h);
    const total = rows.find((r) => r.tenant_id === 't' && r.service_id === '');
    const svc = rows.find((r) => r.tenant_id === 't' && r.service_id === 's1');
    assert.ok(total && svc);
    assert.equal(total.cpu_seconds, 3);
    assert.equal(total.memory_avg_bytes, 250 * MB, 'moments: 150 MB then 350 MB');
    assert.equal(total.memory_peak_bytes, 350 * MB);
    assert.equal(total.running_seconds, 120, 'container-seconds');
    assert.deepEqual([total.net_rx_bytes, total.net_tx_bytes, total.disk_write_bytes, total.ticks], [10, 7, 4096, 2]);
    assert.equal(svc.cpu_seconds, 2);
    assert.equal(svc.memory_avg_bytes, 200 * MB);
    assert.equal(svc.memory_peak_bytes, 300 * MB);
    assert.equal(rows.find((r) => r.tenant_id === 'u')?.cpu_seconds, 9);
    assert.equal(rows.length, 4, "two tenants' totals and their services; none for the database");

    const next = hourlyRollups([sample({ container_id: 'a', sampled_at: h + 3600, tenant_id: 't', resource_id: 's1', cpu_micros_delta: 1_000_000, memory_bytes: 400 * MB })], h + 3600);
    const day = dailyRollups([...rows, ...next], T0);
    const daySvc = day.find((r) => r.tenant_id === 't' && r.service_id === 's1');
    assert.ok(daySvc);
    assert.equal(daySvc.cpu_seconds, 3);
    assert.equal(daySvc.memory_avg_bytes, Math.round((200 * 2 + 400 * 1) * MB / 3), 'weighted by sampling moments');
    assert.equal(daySvc.memory_peak_bytes, 400 * MB);
    assert.equal(daySvc.ticks, 3);
  });

  test('since and until are RFC 3339 date-times, nothing looser', () => {
    assert.equal(rfc3339('since', '2026-01-01T00:00:00Z'), T0);
    assert.equal(rfc3339('since', '2026-01-01T01:00:00+01:00'), T0);
    assert.equal(rfc3339('since', '2026-01-01T00:00:00.250Z'), T0);
    for (const bad of ['2026-01-01', 'yesterday', '1767225600', '2026-01-01T00:00:00', 'Jan 1 2026 00:00:00 GMT']) {
      assert.throws(() => rfc3339('since', bad), /since must be an RFC 3339 timestamp/);
    }
  });
});

eachStore((kind) => {
  describe(`metering through the store and the routes (${kind})`, () => {
    let t: TestServer;
    before(async () => {
      t = await startServer({ store: kind });
    });
    after(() => t.close());

    async function seedService(tenantId: string, id: string): Promise<void> {
      await t.deps.store.services.insert({
        id,
        tenant_id: tenantId,
        name: id,
        name_key: id,
        image: 'svc-test/none:1',
        port: 8000,
        status: 'stopped',
        desired_state: 'stopped',
        dns_label: id,
        last_error: null,
        container_id: null,
        upstream: null,
        crash_count: 0,
        crash_window_start: null,
        last_crash_at: null,
        circuit_open_at: null,
        created_at: T0,
        updated_at: T0,
      });
    }

    test("a swarm's replicas are read each on its own; a single copy's first reading goes on from its workload's reading (svcd before copies), then from its own", async () => {
      const a = await newTenant(t);
      const now = Math.floor(t.clock.now() / 1000);
      const copyOf = (n: number) => `node2/${String(n).repeat(64).slice(0, 64)}`;
      const labels = (resource: string) => ({ 'svc.tenant': a.id, 'svc.kind': 'service', 'svc.resource': resource });
      const workloads: WorkloadInfo[] = [
        // Read under its service id 5 s ago (one pass before), now as its one task.
        { id: 'swarm-just-read', name: 'a', state: 'running', exitCode: null, labels: labels('svcA'), address: null, copies: [copyOf(1)] },
        // Read under its service id an hour ago (svcd was down that long): the same task, its counters on.
        { id: 'swarm-long-ago', name: 'b', state: 'running', exitCode: null, labels: labels('svcB'), address: null, copies: [copyOf(2)] },
        // Read under its service id, and another task since (its counters start at zero): counted whole.
        { id: 'swarm-replaced', name: 'd', state: 'running', exitCode: null, labels: labels('svcD'), address: null, copies: [copyOf(5)] },
        // Two replicas: each its own row, nothing carried over (the service id's reading was of one of them).
        { id: 'swarm-two', name: 'c', state: 'running', exitCode: null, labels: labels('svcC'), address: null, copies: [copyOf(3), copyOf(4)] },
      ];
      await t.deps.store.metering.insertSamples([
        sample({ container_id: 'swarm-just-read', sampled_at: now - 5, tenant_id: a.id, resource_id: 'svcA', cpu_micros: 1_000 }),
        sample({ container_id: 'swarm-long-ago', sampled_at: now - 3_600, tenant_id: a.id, resource_id: 'svcB', cpu_micros: 1_000 }),
        sample({ container_id: 'swarm-replaced', sampled_at: now - 5, tenant_id: a.id, resource_id: 'svcD', cpu_micros: 9_000 }),
        sample({ container_id: 'swarm-two', sampled_at: now - 5, tenant_id: a.id, resource_id: 'svcC', cpu_micros: 1_000 }),
      ]);
      // A driver's answers as the swarm's give them (the sampler's reading is what is tested).
      let cpu = (ref: string): number => (ref === copyOf(4) ? 700 : 1_500);
      const runtime: Runtime = { ...inertRuntime(), list: () => Promise.resolve(workloads), stats: (ref) => Promise.resolve({ cpuMicros: cpu(ref), memoryBytes: MB, netRxBytes: 0, netTxBytes: 0, blockReadBytes: 0, blockWriteBytes: 0 }) };
      const sampler = new Sampler({ runtime, store: t.deps.store, metering: t.deps.store.metering, clock: t.clock, log: t.deps.log, intervalMs: 5_000, concurrency: 2 });
      assert.equal(await sampler.pass(), 5);
      const read = async (ref: string) => (await t.deps.store.metering.lastSample(ref)) ?? assert.fail(`no reading of ${ref}`);
      assert.deepEqual([(await read(copyOf(1))).cpu_micros_delta, (await read(copyOf(1))).seconds], [500, 5], 'what the service-id readings counted is not counted again');
      assert.deepEqual([(await read(copyOf(2))).cpu_micros_delta, (await read(copyOf(2))).seconds], [500, 5], 'however long ago: one interval of running time after the gap');
      assert.equal((await read(copyOf(5))).cpu_micros_delta, 1_500, 'a new task: its counters below the old reading count whole');
      assert.deepEqual([(await read(copyOf(3))).cpu_micros_delta, (await read(copyOf(4))).cpu_micros_delta], [1_500, 700], 'several replicas: nothing carried over');
      assert.equal((await read(copyOf(4))).resource_id, 'svcC');
      // The next pass goes on from each copy's own reading.
      t.clock.advance(5_000);
      cpu = (ref: string) => (ref === copyOf(4) ? 900 : 2_000);
      assert.equal(await sampler.pass(), 5);
      assert.deepEqual(await Promise.all([1, 2, 3, 4, 5].map(async (n) => (await read(copyOf(n))).cpu_micros_delta)), [500, 500, 500, 200, 500]);
    });

    test("two svcd taking turns at the passes (the job's lease moving between them) count each stretch once: each pass goes on from the store's last reading, not its own", async () => {
      const a = await newTenant(t);
      const labels = { 'svc.tenant': a.id, 'svc.kind': 'service', 'svc.resource': 'turns' };
      let cpu = 1_000;
      const runtime: Runtime = {
        ...inertRuntime(),
        list: () => Promise.resolve([{ id: 'turns-container', name: 'turns', state: 'running', exitCode: null, labels, address: null }]),
        stats: () => Promise.resolve({ cpuMicros: cpu, memoryBytes: MB, netRxBytes: 0, netTxBytes: 0, blockReadBytes: 0, blockWriteBytes: 0 }),
      };
      const samplerOf = () => new Sampler({ runtime, store: t.deps.store, metering: t.deps.store.metering, clock: t.clock, log: t.deps.log, intervalMs: 5_000, concurrency: 2 });
      const [one, two] = [samplerOf(), samplerOf()];
      const deltas: number[] = [];
      for (const sampler of [one, two, one, two, one]) {
        await sampler.pass();
        deltas.push((await t.deps.store.metering.lastSample('turns-container'))?.cpu_micros_delta ?? -1);
        t.clock.advance(5_000);
        cpu += 1_000;
      }
      // The counter went from 0 to 5,000: counted once, a thousand a pass.
      assert.deepEqual(deltas, [1_000, 1_000, 1_000, 1_000, 1_000]);
      // An svcd whose clock is behind (or a clock stepped back) writes nothing before the last
      // reading; the next pass on time counts the stretch once.
      const behind = new Sampler({ runtime, store: t.deps.store, metering: t.deps.store.metering, clock: { now: () => t.clock.now() - 20_000 }, log: t.deps.log, intervalMs: 5_000, concurrency: 2 });
      assert.equal(await behind.pass(), 0);
      cpu += 1_000;
      await one.pass();
      assert.equal((await t.deps.store.metering.lastSample('turns-container'))?.cpu_micros_delta, 2_000);
    });

    test('two passes replacing the same bucket at once both succeed, and the bucket holds one row per owner', async () => {
      const a = await newTenant(t);
      const bucket = 3600 * 1000;
      const row = (cpu: number): UsageRollupRow => ({
        tenant_id: a.id, service_id: '', period: 'hourly', bucket_start: bucket,
        cpu_seconds: cpu, memory_avg_bytes: 0, memory_peak_bytes: 0, net_rx_bytes: 0, net_tx_bytes: 0,
        disk_read_bytes: 0, disk_write_bytes: 0, running_seconds: 0, ticks: 1,
      });
      const b = await newTenant(t);
      const other = (cpu: number): UsageRollupRow => ({ ...row(cpu), tenant_id: b.id });
      for (let round = 0; round < 20; round++) {
        // Several owners, handed over in different orders.
        await Promise.all([1, 2, 3].map((cpu) => t.deps.meteringStore.replaceRollups('hourly', bucket, cpu % 2 ? [row(cpu), other(cpu)] : [other(cpu), row(cpu)])));
      }
      for (const id of [a.id, b.id]) {
        const rows = await t.deps.meteringStore.rollupsBetween('hourly', bucket, bucket + 1, { tenantId: id, serviceId: '' });
        assert.equal(rows.length, 1);
        assert.ok([1, 2, 3].includes(rows[0]?.cpu_seconds ?? 0));
      }
    });

    test('rollups follow the clock: hours and days recomputed, queried by range, pruned after retention', async () => {
      const a = await newTenant(t);
      const b = await newTenant(t);
      const sid = `svc${a.id.slice(0, 8)}`;
      await seedService(a.id, sid);
      const now = t.clock.now() / 1000;
      const hour = Math.floor(now / 3600) * 3600;
      const day = Math.floor(now / 86_400) * 86_400;
      await t.deps.meteringStore.insertSamples([
        sample({ container_id: `c-${a.id}`, sampled_at: hour + 10, tenant_id: a.id, resource_id: sid, seconds: 30, cpu_micros_delta: 2_000_000, memory_bytes: 64 * MB, net_rx_delta: 1000 }),
        sample({ container_id: `c-${a.id}`, sampled_at: hour + 40, tenant_id: a.id, resource_id: sid, seconds: 30, cpu_micros_delta: 4_000_000, memory_bytes: 128 * MB }),
        sample({ container_id: `d-${a.id}`, sampled_at: hour + 40, tenant_id: a.id, kind: 'database', resource_id: 'db1', seconds: 30, cpu_micros_delta: 1_000_000, memory_bytes: 32 * MB }),
        sample({ container_id: `c-${b.id}`, sampled_at: hour + 40, tenant_id: b.id, resource_id: 'other', seconds: 30, cpu_micros_delta: 7_000_000, memory_bytes: 8 * MB }),
      ]);
      t.clock.advance(60_000);
      await t.deps.metering.rollUp();

      const iso = (s: number) => new Date(s * 1000).toISOString();
      const hourly = await a.client.usageMetrics({ period: 'hourly', since: iso(hour), until: iso(hour + 3599) });
      assert.equal(hourly.length, 1);
      const h = hourly[0] as UsageRollup;
      assert.deepEqual(
        { ...h },
        {
          period: 'hourly',
          start: hour,
          end: hour + 3600,
          service_id: null,
          cpu_seconds: 7,
          memory_avg_mb: 112, // moments: 64, then 128 + 32
          memory_peak_mb: 160,
          network_rx_bytes: 1000,
          network_tx_bytes: 0,
          disk_read_bytes: 0,
          disk_write_bytes: 0,
          running_seconds: 90,
        },
      );
      const svcHourly = await a.client.serviceMetrics(sid, { period: 'hourly', since: iso(hour) });
      assert.deepEqual(svcHourly.map((r) => [r.service_id, r.cpu_seconds, r.memory_avg_mb, r.memory_peak_mb]), [[sid, 6, 96, 128]]);
      assert.deepEqual(await a.client.usageMetrics({ period: 'hourly', service_id: sid, since: iso(hour) }), svcHourly, 'service_id filters the tenant route alike');
      // Default period: daily, the last 30 days.
      const daily = await a.client.usageMetrics();
      assert.deepEqual(daily.map((r) => [r.period, r.start, r.end, r.cpu_seconds]), [['daily', day, day + 86_400, 7]]);
      assert.deepEqual((await b.client.usageMetrics()).map((r) => r.cpu_seconds), [7], "another tenant sees its own, never a's");

      // A second hour's samples; re-running the rollup recomputes, never double counts.
      await t.deps.meteringStore.insertSamples([
        sample({ container_id: `c-${a.id}`, sampled_at: hour + 3600 + 10, tenant_id: a.id, resource_id: sid, seconds: 30, cpu_micros_delta: 3_000_000, memory_bytes: 256 * MB }),
      ]);
      t.clock.advance(3600_000);
      await t.deps.metering.rollUp();
      await t.deps.metering.rollUp();
      const two = await a.client.usageMetrics({ period: 'hourly', since: iso(hour) });
      assert.deepEqual(two.map((r) => [r.start, r.cpu_seconds]), [[hour, 7], [hour + 3600, 3]]);
      const dayAgain = await a.client.usageMetrics({ period: 'daily' });
      assert.equal(dayAgain[0]?.cpu_seconds, 10);
      assert.equal(dayAgain[0].memory_peak_mb, 256);
      assert.equal(dayAgain[0].memory_avg_mb, Math.round(((64 + 160 + 256) / 3) * 10) / 10, 'weighted by sampling moments');
      assert.deepEqual(await a.client.usageMetrics({ period: 'hourly', since: iso(hour + 7200), until: iso(hour + 10_800) }), [], 'a range without data is an empty list');

      // Past the retention (90 days in tests), rollups and samples are gone.
      t.clock.advance(91 * 86_400_000);
      await t.deps.metering.rollUp();
      assert.deepEqual(await a.client.usageMetrics({ period: 'hourly', since: iso(hour), until: iso(hour + 7200) }), []);
      assert.deepEqual(await a.client.usageMetrics({ period: 'daily', since: iso(day), until: iso(day + 86_400) }), []);
      assert.deepEqual(await t.deps.meteringStore.samplesBetween(0, hour + 86_400), []);
    });

    test('the query rules: period, RFC 3339, order, range width, unknown and foreign services', async () => {
      const a = await newTenant(t);
      const b = await newTenant(t);
      await seedService(b.id, `svc${b.id.slice(0, 8)}`);
      const bad = async (path: string, query: Record<string, string>, status: number, message: RegExp) => {
        const r = await a.client.raw<{ error: string }>('GET', path, { query });
        assert.equal(r.status, status, `${path} ${JSON.stringify(query)}: ${r.text}`);
        assert.match(r.body.error, message);
      };
      await bad('/v1/tenant/usage/metrics', { period: 'weekly' }, 400, /period/);
      await bad('/v1/tenant/usage/metrics', { since: '2026-01-01' }, 400, /since must be an RFC 3339 timestamp/);
      await bad('/v1/tenant/usage/metrics', { until: 'now' }, 400, /until must be an RFC 3339 timestamp/);
      await bad('/v1/tenant/usage/metrics', { since: '2026-01-02T00:00:00Z', until: '2026-01-01T00:00:00Z' }, 400, /since must not be after until/);
      await bad('/v1/tenant/usage/metrics', { period: 'hourly', since: '2025-01-01T00:00:00Z', until: '2026-01-01T00:00:00Z' }, 400, /more than 1000 hours/);
      await bad('/v1/tenant/usage/metrics', { service_id: 'nope' }, 404, /service not found/);
      await bad('/v1/tenant/usage/metrics', { service_id: `svc${b.id.slice(0, 8)}` }, 404, /service not found/);
      await bad(`/v1/services/svc${b.id.slice(0, 8)}/metrics`, {}, 404, /service not found/);
      const anon = await t.client.raw('GET', '/v1/tenant/usage/metrics');
      assert.equal(anon.status, 401);
    });
  });
});

describe('operator counters of finished deployments and builds', () => {
  eachStore((kind) => {
    test(`count committed activity only, by its exact action (${kind})`, async () => {
      const t = await startServer({ store: kind });
      try {
        const a = await newTenant(t);
        const count = async (name: string, outcome: string) => {
          const { body } = await t.deps.metrics.text();
          return Number(new RegExp(`^${name}\\{outcome="${outcome}"\\} (\\d+)$`, 'm').exec(body)?.[1] ?? 0);
        };
        const event = { tenantId: a.id, action: 'build.failed', resourceType: 'build', resourceId: 'b1' };
        const { store, activity } = t.deps;
        await assert.rejects(
          store.transaction(async (tx) => {
            await activity.record(tx, event);
            throw new Error('rolled back');
          }),
          /rolled back/,
        );
        assert.equal(await count('svc_builds_total', 'failed'), 0, 'an entry that was rolled back is not counted');
        await store.transaction(async (tx) => {
          await activity.record(tx, event);
          assert.equal(await count('svc_builds_total', 'failed'), 0, 'nor before its commit');
        });
        assert.equal(await count('svc_builds_total', 'failed'), 1, 'once committed');
        // Outside a transaction it is committed as it is written.
        await activity.record(store, { ...event, action: 'deployment.cancelled' });
        assert.equal(await count('svc_deploys_total', 'cancelled'), 1);
        // Other actions of the same resources, or outcome words elsewhere, count nothing.
        for (const action of ['build.started', 'deployment.failed.extra', 'key.failed', 'builds.failed']) await activity.record(store, { ...event, action });
        assert.deepEqual([await count('svc_builds_total', 'failed'), await count('svc_deploys_total', 'failed')], [1, 0]);
      } finally {
        await t.close();
      }
    });
  });
});

describe('an unavailable metering store', { skip: !PG_ADMIN_URL && 'needs PostgreSQL (make test starts one)' }, () => {
  test('gives 503 on the metrics routes while everything else answers', async () => {
    const meteringDb = await freshPgDatabase();
    const t = await startServer({ config: { meteringDatabaseUrl: meteringDb.url } });
    try {
      const a = await newTenant(t);
      assert.deepEqual(await a.client.usageMetrics(), [], 'served from its own database');
      await meteringDb.drop();
      const r = await a.client.raw<{ error: string }>('GET', '/v1/tenant/usage/metrics');
      assert.equal(r.status, 503);
      assert.match(r.body.error, /^metering store unavailable/);
      assert.equal((await a.client.raw('GET', '/v1/tenant')).status, 200, 'the rest of the API is not affected');
      assert.equal((await a.client.raw('GET', '/v1/tenant/usage')).status, 200);
    } finally {
      await t.close();
      await meteringDb.drop();
    }
  });
});

/** The Prometheus text exposition format (0.0.4), parsed strictly: any line that is not HELP, TYPE or a sample fails. */
function parsePrometheus(text: string): { types: Map<string, string>; samples: Array<{ name: string; labels: Record<string, string>; value: number }> } {
  const types = new Map<string, string>();
  const samples: Array<{ name: string; labels: Record<string, string>; value: number }> = [];
  const NAME = '[a-zA-Z_:][a-zA-Z0-9_:]*';
  const sampleLine = new RegExp(`^(${NAME})(?:\\{(.*)\\})? (-?(?:[0-9.eE+-]+|Inf|NaN|\\+Inf))(?: -?\\d+)?$`);
  const label = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)",?/gy;
  for (const line of text.split('\n')) {
    if (line === '') continue;
    let m: RegExpExecArray | null;
    if ((m = new RegExp(`^# HELP (${NAME}) .*$`).exec(line))) continue;
    if ((m = new RegExp(`^# TYPE (${NAME}) (counter|gauge|histogram|summary|untyped)$`).exec(line))) {
      types.set(m[1] as string, m[2] as string);
      continue;
    }
    m = sampleLine.exec(line);
    assert.ok(m, `not a sample line: ${JSON.stringify(line)}`);
    const labels: Record<string, string> = {};
    const body = m[2] ?? '';
    label.lastIndex = 0;
    let consumed = 0;
    for (let l: RegExpExecArray | null; (l = label.exec(body)); consumed = label.lastIndex) labels[l[1] as string] = l[2] as string;
    assert.equal(consumed, body.length, `malformed labels: ${JSON.stringify(line)}`);
    const value = Number(m[3]?.replace(/^\+?Inf$/, 'Infinity'));
    assert.ok(!Number.isNaN(value) || m[3] === 'NaN', `bad value: ${line}`);
    const family = (m[1] as string).replace(/_(bucket|sum|count|total)$/, '');
    assert.ok(types.has(m[1] as string) || types.has(family), `sample before its TYPE: ${line}`);
    samples.push({ name: m[1] as string, labels, value });
  }
  return { types, samples };
}

describe('metering on the real engine, and the Prometheus endpoint', () => {
  let t: TestServer;
  const tenants = engineTenants(() => t);
  before(async () => {
    await ensureTestImages();
    t = await startServer({
      realTime: true,
      config: {
        meteringIntervalMs: 2_000,
        metricsListen: { host: '127.0.0.1', port: 0 },
      },
      overrides: { rollupEveryMs: 2_000, readyTimeoutMs: 10_000 },
    });
  });
  after(async () => {
    await t.close();
    await tenants.cleanup();
  });

  async function scrape(): Promise<ReturnType<typeof parsePrometheus>> {
    const address = t.deps.metricsListener.address();
    assert.ok(address, 'the metrics listener is up');
    const r = await fetch(`http://127.0.0.1:${address.port}/metrics`);
    assert.equal(r.status, 200);
    assert.match(r.headers.get('content-type') ?? '', /^text\/plain; version=0\.0\.4/);
    return parsePrometheus(await r.text());
  }

  test('a service that burns CPU shows CPU seconds in its rollups and in the tenant totals', async () => {
    const a = await tenants.add();
    const s = await a.client.createService({ name: 'burner', image: BURNER_IMAGE });
    await waitFor('the burner to run', async () => (await a.client.service(s.id)).status === 'running', 60_000);
    const rows = await waitFor(
      'CPU in the hourly rollups',
      async () => {
        const r = await a.client.serviceMetrics(s.id, { period: 'hourly' });
        const cpu = r.reduce((x, y) => x + y.cpu_seconds, 0);
        const running = r.reduce((x, y) => x + y.running_seconds, 0);
        return cpu >= 2 && running >= 2 ? r : undefined;
      },
      60_000,
    );
    const last = rows[rows.length - 1] as UsageRollup;
    assert.equal(last.service_id, s.id);
    assert.ok(last.memory_peak_mb > 0, 'memory is read');
    assert.ok(last.memory_avg_mb <= last.memory_peak_mb);
    const totals = await a.client.usageMetrics({ period: 'hourly' });
    assert.ok(totals.reduce((x, y) => x + y.cpu_seconds, 0) >= 2, 'the tenant totals include it');
    assert.equal(totals[0]?.service_id, null);
    const daily = await a.client.serviceMetrics(s.id);
    assert.ok((daily[0]?.cpu_seconds ?? 0) >= 2, 'and so does the daily rollup');
    // Usage counts what the tenant holds.
    const usage = await a.client.usage();
    assert.deepEqual([usage.services.used, usage.api_keys.used, usage.databases.used], [1, 1, 0]);
    await a.client.deleteService(s.id);
  });

  test('Prometheus /metrics: requests by route and status, rate-limit rejections, deploys, containers, sampler lag', async () => {
    const a = await tenants.add();
    await a.client.tenant();
    await a.client.tenant();
    // 5 per client IP per hour on registration-class routes: the 6th from one IP is refused.
    const statuses = [];
    for (let i = 0; i < 6; i++) {
      const r = await t.client.raw('POST', '/v1/system/bootstrap-token/validate', { body: { token: 'x' }, headers: { 'x-real-ip': '10.200.0.1' }, auth: false });
      statuses.push(r.status);
    }
    assert.deepEqual(statuses, [200, 200, 200, 200, 200, 429]);
    await t.client.raw('GET', '/no/such/route');

    const { types, samples } = await scrape();
    const value = (name: string, labels: Record<string, string>) =>
      samples.find((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v))?.value;
    assert.equal(types.get('svc_http_requests_total'), 'counter');
    assert.equal(types.get('svc_http_request_duration_seconds'), 'histogram');
    assert.ok((value('svc_http_requests_total', { method: 'GET', route: '/v1/tenant', status: '200' }) ?? 0) >= 2);
    assert.equal(value('svc_http_requests_total', { method: 'POST', route: '/v1/system/bootstrap-token/validate', status: '429' }), 1);
    assert.ok((value('svc_http_requests_total', { method: 'GET', route: 'unmatched', status: '404' }) ?? 0) >= 1, 'unknown paths share one label');
    assert.ok((value('svc_http_request_duration_seconds_bucket', { route: '/v1/tenant', status: '200', le: '+Inf' }) ?? 0) >= 2);
    assert.equal(value('svc_rate_limit_rejections_total', { limiter: 'registration_ip' }), 1);
    assert.ok((value('svc_deploys_total', { outcome: 'succeeded' }) ?? 0) >= 1, 'the burner deployment counted');
    assert.equal(types.get('svc_builds_total'), 'counter');
    const lag = value('svc_metering_sampler_lag_seconds', {});
    assert.ok(lag !== undefined && lag >= 0 && lag < 30, `sampler lag ${lag}`);
    assert.ok(samples.some((s) => s.name === 'svc_containers' && s.labels.state !== undefined), 'containers by state');
    assert.ok(samples.some((s) => s.name.startsWith('svc_process_')), 'process metrics');
    assert.ok(!samples.some((s) => s.name === 'svc_swarm_ports'), 'one engine allocates no published ports');
    const other = await fetch(`http://127.0.0.1:${t.deps.metricsListener.address()?.port}/other`);
    assert.equal(other.status, 404);
  });
});
