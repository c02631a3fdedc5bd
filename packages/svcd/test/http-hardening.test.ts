// Resource safety: numbers in queries are bounded before they reach SQL, errors answer with a
// request id and without a backend's own words, and unauthenticated load is limited per client
// IP before it reaches the bucket every tenant shares. Every suite runs on both stores.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { QUERY_COUNT_MAX, QUERY_UNIX_SECONDS_MAX } from '@svc/contract';
import { CLIENT_IP_BURST, CLIENT_IP_PER_SECOND } from '../src/ratelimit/index.js';
import { RuntimeUnavailableError, type Runtime } from '../src/runtime/index.js';
import { HostFirewall } from '../src/runtime/host-firewall.js';
import { ADMIN_TOKEN, BOOTSTRAP_TOKEN, eachStore, newTenant, startServer, testConfig, waitFor, type TestServer } from './harness.js';
import { inertRuntime } from './inert-runtime.js';

/** What a backend might say: none of it may reach a client. */
const BACKEND_DETAIL = 'connect ECONNREFUSED /var/run/docker.sock user=postgres host=10.1.2.3';
const BACKEND_FRAGMENTS = ['ECONNREFUSED', '/var/run', 'docker.sock', 'user=postgres', '10.1.2.3'];

interface LogLine {
  level: number;
  reqId?: string;
  client_request_id?: string;
  msg?: string;
  err?: { message?: string; stack?: string };
}

function parseLines(lines: string[]): LogLine[] {
  return lines.map((l) => JSON.parse(l) as LogLine);
}

/** A plain request, outside the client's OpenAPI check (some answers here are 500s no route documents). */
async function get(t: TestServer, path: string, headers: Record<string, string> = {}) {
  const res = await fetch(`${t.url}${path}`, { headers });
  const text = await res.text();
  return { status: res.status, headers: res.headers, text, body: (text === '' ? null : JSON.parse(text)) as Record<string, unknown> | null };
}

const bearer = (key: string) => ({ authorization: `Bearer ${key}` });

eachStore((store) => {
  describe(`numbers in queries (${store})`, () => {
    let t: TestServer;
    let key: string;
    let feedLength = 0;
    before(async () => {
      t = await startServer({ store, overrides: { runtime: inertRuntime() } });
      const a = await newTenant(t);
      key = a.key;
      // Over 200 entries in the feed, to see large limits clamped to 200.
      feedLength = (await a.client.activity()).length + 209;
      for (let i = 0; i < 209; i++) {
        await t.deps.activity.record(t.deps.store, { tenantId: a.id, action: 'tenant.updated', resourceType: 'tenant', resourceId: a.id, details: { i } });
      }
    });
    after(() => t.close());

    const lists = ['/v1/services', '/v1/activity', '/v1/databases', '/v1/environments', '/v1/snapshots'];

    test('limit and offset at the documented maximum reach the store and answer 200', async () => {
      for (const path of lists) {
        for (const q of [`offset=${QUERY_COUNT_MAX}`, `limit=${QUERY_COUNT_MAX}&offset=${QUERY_COUNT_MAX}`]) {
          const r = await get(t, `${path}?${q}`, bearer(key));
          assert.deepEqual([r.status, r.body], [200, []], `${path}?${q}`);
        }
      }
      assert.equal((await get(t, `/v1/builds?limit=${QUERY_COUNT_MAX}`, bearer(key))).status, 200);
    });

    test('past the maximum, a limit or offset is 400 {error} naming it, never a 500', async () => {
      const tooBig = [String(QUERY_COUNT_MAX + 1), '9999999999999', '9223372036854775807', '99999999999999999999'];
      for (const path of lists) {
        for (const n of tooBig) {
          for (const param of ['limit', 'offset']) {
            const r = await get(t, `${path}?${param}=${n}`, bearer(key));
            assert.equal(r.status, 400, `${path}?${param}=${n}: ${r.text}`);
            assert.match(String(r.body?.error), new RegExp(`querystring: ${param} must be <= ${QUERY_COUNT_MAX}`));
          }
        }
        const both = await get(t, `${path}?limit=99999999999999999999&offset=9999999999999`, bearer(key));
        assert.equal(both.status, 400, path);
      }
      // Routes under a service are checked before the service is looked up.
      for (const path of ['/v1/services/nope/deployments', '/v1/services/nope/builds', '/v1/builds']) {
        assert.equal((await get(t, `${path}?limit=99999999999999999999`, bearer(key))).status, 400, path);
      }
      assert.equal((await get(t, `/v1/services/nope/deployments?limit=${QUERY_COUNT_MAX}`, bearer(key))).status, 404, 'within range: on to the handler');
      assert.equal((await get(t, '/v1/services/nope/logs?tail=10001', bearer(key))).status, 400);
      assert.equal((await get(t, '/v1/services/nope/logs?tail=99999999999999999999', bearer(key))).status, 400);
    });

    test('a limit between 200 and the maximum is clamped to 200, not refused', async () => {
      for (const limit of [201, 5000, QUERY_COUNT_MAX]) {
        const r = await get(t, `/v1/activity?limit=${limit}`, bearer(key));
        assert.equal(r.status, 200);
        assert.equal((r.body as unknown as unknown[]).length, 200, `limit=${limit}`);
      }
      const page = await get(t, '/v1/activity?limit=5000&offset=200', bearer(key));
      assert.equal((page.body as unknown as unknown[]).length, feedLength - 200);
    });

    test('activity since is bounded at the last second of year 9999', async () => {
      const ok = await get(t, `/v1/activity?since=${QUERY_UNIX_SECONDS_MAX}`, bearer(key));
      assert.deepEqual([ok.status, ok.body], [200, []]);
      for (const n of [String(QUERY_UNIX_SECONDS_MAX + 1), '9223372036854775807', '99999999999999999999']) {
        const r = await get(t, `/v1/activity?since=${n}`, bearer(key));
        assert.equal(r.status, 400, `since=${n}: ${r.text}`);
        assert.match(String(r.body?.error), /since must be <=/);
      }
    });
  });
});

describe('numbers in queries: the OpenAPI document', () => {
  test('every numeric query parameter of every route has a minimum and a maximum', async () => {
    const t = await startServer();
    try {
      interface Parameter {
        in: string;
        name: string;
        schema?: { type?: string; minimum?: number; maximum?: number };
      }
      const doc = (await t.client.raw<{ paths: Record<string, Record<string, { parameters?: Parameter[] }>> }>('GET', '/v1/openapi.json')).body;
      const numeric: string[] = [];
      for (const [path, ops] of Object.entries(doc.paths)) {
        for (const [method, op] of Object.entries(ops)) {
          for (const p of op.parameters ?? []) {
            if (p.in !== 'query' || (p.schema?.type !== 'integer' && p.schema?.type !== 'number')) continue;
            numeric.push(`${method} ${path} ${p.name}`);
            assert.equal(typeof p.schema.minimum, 'number', `${method} ${path} ${p.name}: no minimum`);
            assert.equal(typeof p.schema.maximum, 'number', `${method} ${path} ${p.name}: no maximum`);
            assert.ok(p.schema.maximum! <= Number.MAX_SAFE_INTEGER);
          }
        }
      }
      assert.ok(numeric.includes('get /v1/services limit') && numeric.includes('get /v1/activity since'), numeric.join(', '));
      assert.ok(numeric.length >= 15, `found ${numeric.length}`);
    } finally {
      await t.close();
    }
  });
});

eachStore((store) => {
  describe(`request ids (${store})`, () => {
    let t: TestServer;
    const lines: string[] = [];
    before(async () => {
      t = await startServer({ store, logLines: lines });
    });
    after(() => t.close());

    test('every answer carries X-Request-Id, and error bodies repeat it as request_id', async () => {
      const a = await newTenant(t);
      const seen = new Set<string>();
      const answers = [
        await get(t, '/v1/system/health'),
        await get(t, '/v1/tenant', bearer(a.key)),
        await get(t, '/v1/tenant'),
        await get(t, '/v1/nothing-here'),
        await get(t, '/v1/activity?limit=0', bearer(a.key)),
      ];
      const put = await fetch(`${t.url}/v1/tenant`, { method: 'PUT' });
      answers.push({ status: put.status, headers: put.headers, text: '', body: (await put.json()) as Record<string, unknown> });
      assert.deepEqual(answers.map((r) => r.status), [200, 200, 401, 404, 400, 405]);
      for (const r of answers) {
        const id = r.headers.get('x-request-id');
        assert.match(id ?? '', /^[0-9a-f-]{36}$/);
        assert.ok(!seen.has(id!), 'one id per request');
        seen.add(id!);
        if (r.status >= 400) assert.equal(r.body?.request_id, id, `${r.status}: ${JSON.stringify(r.body)}`);
      }
      const logged = parseLines(lines).filter((l) => l.reqId === answers[2]!.headers.get('x-request-id'));
      assert.ok(logged.length > 0, 'the log lines of a request carry its id as reqId');
    });

    test("a client's X-Request-Id is never ours; a sane one is logged beside ours, anything else is not", async () => {
      const mine = 'client-trace.42:abc_DEF';
      const r = await get(t, '/v1/tenant', { 'x-request-id': mine });
      const ours = r.headers.get('x-request-id');
      assert.notEqual(ours, mine);
      assert.equal(r.body?.request_id, ours);
      assert.ok(parseLines(lines).some((l) => l.reqId === ours && l.client_request_id === mine));

      for (const bad of ['x'.repeat(65), 'has space', 'semi;colon']) {
        const b = await get(t, '/v1/tenant', { 'x-request-id': bad });
        const id = b.headers.get('x-request-id');
        assert.notEqual(id, bad);
        const logged = parseLines(lines).filter((l) => l.reqId === id);
        assert.ok(logged.length > 0);
        assert.ok(logged.every((l) => l.client_request_id === undefined), `not logged: ${bad}`);
      }
    });
  });
});

/** Asserts a failed answer says only `expected`, with its request id, and that a log line (error level, or warn for a 4xx) has the detail under the same id. */
function assertQuietFailure(r: Awaited<ReturnType<typeof get>>, status: number, expected: string, lines: string[]): void {
  assert.equal(r.status, status, r.text);
  const id = r.headers.get('x-request-id');
  assert.ok(id);
  assert.deepEqual(r.body, { error: expected, request_id: id });
  for (const fragment of BACKEND_FRAGMENTS) assert.ok(!r.text.includes(fragment), `the answer names ${fragment}: ${r.text}`);
  const logged = parseLines(lines).filter((l) => l.reqId === id && l.level >= (status >= 500 ? 50 : 40));
  assert.ok(
    logged.some((l) => `${l.err?.message ?? ''} ${l.err?.stack ?? ''}`.includes(BACKEND_DETAIL)),
    `the log line of ${id} has the detail: ${JSON.stringify(logged)}`,
  );
}

eachStore((store) => {
  describe(`errors do not leak internals (${store})`, () => {
    test('a failing metering store: 503 "metering store unavailable", the driver message only in the log', async () => {
      const lines: string[] = [];
      const t = await startServer({ store, logLines: lines });
      try {
        const a = await newTenant(t);
        t.deps.meteringStore.rollupsBetween = async () => {
          throw new Error(BACKEND_DETAIL);
        };
        assertQuietFailure(await get(t, '/v1/tenant/usage/metrics', bearer(a.key)), 503, 'metering store unavailable', lines);
      } finally {
        await t.close();
      }
    });

    test('a failing store: 500 "internal server error", the driver message only in the log', async () => {
      const lines: string[] = [];
      const t = await startServer({ store, logLines: lines });
      try {
        const a = await newTenant(t);
        t.deps.store.services.list = async () => {
          throw new Error(BACKEND_DETAIL);
        };
        assertQuietFailure(await get(t, '/v1/services', bearer(a.key)), 500, 'internal server error', lines);
      } finally {
        await t.close();
      }
    });

    test('a failing engine: 500 for its raw errors, 503 "container engine unavailable" when it does not answer, its 404 without its words', async () => {
      const lines: string[] = [];
      const runtime: Runtime = inertRuntime();
      const t = await startServer({ store, logLines: lines, overrides: { runtime } });
      try {
        const a = await newTenant(t);
        // An exec asks the engine while the request waits (services and databases are carried out
        // by the workload controller, after the answer: the case below).
        const env = await a.client.createEnvironment({ name: 'dev', template_id: 'default' });
        const exec = async () => {
          const res = await fetch(`${t.url}/v1/environments/${env.id}/exec`, { method: 'POST', headers: { ...bearer(a.key), 'content-type': 'application/json' }, body: JSON.stringify({ command: ['true'] }) });
          const text = await res.text();
          return { status: res.status, headers: res.headers, text, body: (text === '' ? null : JSON.parse(text)) as Record<string, unknown> | null };
        };
        assert.equal((await exec()).status, 200, 'the inert engine answers');

        runtime.exec = async () => {
          throw new Error(BACKEND_DETAIL);
        };
        assertQuietFailure(await exec(), 500, 'internal server error', lines);

        runtime.exec = async () => {
          // As DockerRuntime says it: its message quotes the engine client's.
          throw new RuntimeUnavailableError(`container engine unavailable: ${BACKEND_DETAIL}`);
        };
        assertQuietFailure(await exec(), 503, 'container engine unavailable', lines);

        runtime.exec = async () => {
          // The engine client's errors carry the engine's status; one no domain code caught.
          throw Object.assign(new Error(`(HTTP code 404) no such container - ${BACKEND_DETAIL}`), { statusCode: 404 });
        };
        assertQuietFailure(await exec(), 404, 'not found', lines);
      } finally {
        await t.close();
      }
    });

    test('a service deleted while the engine refuses to remove its container: 204, the record is gone, and the controller removes it once the engine lets it', async () => {
      const lines: string[] = [];
      const runtime: Runtime = inertRuntime();
      const t = await startServer({ store, logLines: lines, overrides: { runtime } });
      try {
        const a = await newTenant(t);
        const created = await a.client.raw<{ id: string }>('POST', '/v1/services', { body: { name: 'doomed', image: 'busybox' } });
        assert.equal(created.status, 201);
        const id = created.body.id;
        await waitFor('the deploy to end', async () => ((await a.client.service(id)).status === 'deploying' ? undefined : true));
        let refusals = 0;
        runtime.remove = async () => {
          refusals++;
          throw new Error(BACKEND_DETAIL);
        };
        const res = await fetch(`${t.url}/v1/services/${id}`, { method: 'DELETE', headers: bearer(a.key) });
        assert.equal(res.status, 204);
        assert.equal(await res.text(), '');
        assert.equal((await a.client.raw('GET', `/v1/services/${id}`)).status, 404, 'the record is gone at once');
        const waiting = await t.deps.store.workloads.find('service', id);
        assert.equal(waiting?.desired_state, 'absent');
        assert.equal(waiting.last_error, BACKEND_DETAIL, 'the engine said why, to the operator');
        assert.ok(refusals >= 1);
        runtime.remove = async () => {};
        t.clock.advance(60_000);
        await waitFor('the controller to finish the removal', async () => ((await t.deps.store.workloads.find('service', id)) === undefined ? true : undefined));
      } finally {
        await t.close();
      }
    });

    test('health detail tells every tenant that the egress rules could not be read, not what iptables said', async () => {
      class UnreadableFirewall extends HostFirewall {
        override async install(): Promise<void> {}
        override async missing(): Promise<string | null> {
          throw new Error(`iptables: ${BACKEND_DETAIL}`);
        }
      }
      const lines: string[] = [];
      const t = await startServer({ store, logLines: lines, overrides: { runtime: inertRuntime(), hostFirewall: new UnreadableFirewall({ allow: [], owner: null }) } });
      try {
        const a = await newTenant(t);
        const r = await get(t, '/v1/system/health/detailed', bearer(a.key));
        assert.equal(r.status, 200);
        assert.deepEqual(r.body?.egress_firewall, { installed: false, detail: 'rules could not be read (see the svcd log)' });
        for (const fragment of BACKEND_FRAGMENTS) assert.ok(!r.text.includes(fragment), fragment);
        assert.ok(parseLines(lines).some((l) => l.err?.message?.includes(BACKEND_DETAIL)), 'the detail is logged');
      } finally {
        await t.close();
      }
    });
  });
});

/** The 429 counts of the operator metrics, by limiter. */
async function rejections(t: TestServer): Promise<Record<string, number>> {
  const text = (await t.deps.metrics.text()).body;
  const out: Record<string, number> = {};
  for (const m of text.matchAll(/^svc_rate_limit_rejections_total\{limiter="([a-z_]+)"\} (\d+)$/gm)) out[m[1]!] = Number(m[2]);
  return out;
}

eachStore((store) => {
  describe(`unauthenticated load (${store})`, () => {
    test('a flood without a valid key is refused per client IP before the global bucket, which tenants keep', async () => {
      // A small global bucket, so that a flood that reached it would empty it.
      const t = await startServer({ store, config: { rateLimits: { tenant: testConfig().rateLimits.tenant, global: { perSecond: 1, burst: 100 } } } });
      try {
        const a = await newTenant(t);
        const flood = async (ip: string, headers: Record<string, string>) => {
          const statuses: number[] = [];
          for (let i = 0; i < 150; i++) statuses.push((await get(t, '/v1/tenant', { 'x-real-ip': ip, ...headers })).status);
          return statuses;
        };
        const anonymous = await flood('203.0.113.10', {});
        assert.deepEqual(anonymous.slice(0, CLIENT_IP_BURST), Array(CLIENT_IP_BURST).fill(401));
        assert.deepEqual(anonymous.slice(CLIENT_IP_BURST), Array(150 - CLIENT_IP_BURST).fill(429));
        const wrongKeys = await flood('203.0.113.11', bearer('0123456789abcdef.not-the-secret-not-the-secret-not-the-secret'));
        assert.deepEqual(wrongKeys.slice(0, CLIENT_IP_BURST), Array(CLIENT_IP_BURST).fill(401), 'each failed key is charged to its address');
        assert.deepEqual(wrongKeys.slice(CLIENT_IP_BURST), Array(150 - CLIENT_IP_BURST).fill(429));
        const limited = await get(t, '/v1/tenant', { 'x-real-ip': '203.0.113.10' });
        assert.deepEqual(limited.body, { error: 'rate limit exceeded', request_id: limited.headers.get('x-request-id') });
        assert.ok(Number(limited.headers.get('retry-after')) >= 1);
        assert.equal((await rejections(t)).client_ip, 2 * (150 - CLIENT_IP_BURST) + 1, 'counted by limiter in the operator metrics');
        assert.equal((await rejections(t)).global, undefined, 'the global bucket refused nobody');

        // 2 x 40 of the 100 global tokens went to the floods: the tenant still has what is left.
        for (let i = 0; i < 15; i++) assert.equal((await get(t, '/v1/tenant', bearer(a.key))).status, 200, `tenant request ${i}`);
        assert.equal((await get(t, '/v1/tenant', { 'x-real-ip': '203.0.113.12' })).status, 401, 'another address is not affected');
      } finally {
        await t.close();
      }
    });

    test('a tenant behind a flooding address is not starved: its valid key goes on to its own limit', async () => {
      const t = await startServer({ store });
      try {
        const a = await newTenant(t);
        // Used once, so this svcd knows the key (a spent address may go on only with a known key).
        assert.equal((await get(t, '/v1/tenant', bearer(a.key))).status, 200);
        const ip = { 'x-real-ip': '203.0.113.20' };
        for (let i = 0; i < 100; i++) await get(t, '/v1/tenant', ip);
        assert.equal((await get(t, '/v1/tenant', ip)).status, 429, 'the address is spent');
        assert.equal((await get(t, '/v1/tenant', { ...ip, ...bearer(`${a.key}x`) })).status, 429, 'a wrong key from it too, before the global bucket');
        let ok = 0;
        let last = await get(t, '/v1/tenant', { ...ip, ...bearer(a.key) });
        while (last.status === 200) {
          ok += 1;
          last = await get(t, '/v1/tenant', { ...ip, ...bearer(a.key) });
        }
        assert.equal(ok, 199, 'the rest of the tenant burst');
        assert.equal(last.status, 429);
        assert.equal(last.headers.get('x-ratelimit-remaining'), '0', 'refused by the tenant limit, not the address');
        const counted = await rejections(t);
        assert.equal(counted.tenant, 1);

        // The address gets its allowance back over time, and public routes draw on it too.
        t.clock.advance(1_000);
        const refilled = [];
        for (let i = 0; i <= CLIENT_IP_PER_SECOND; i++) refilled.push((await get(t, '/v1/openapi.json', ip)).status);
        assert.deepEqual(refilled, [...Array<number>(CLIENT_IP_PER_SECOND).fill(200), 429]);
      } finally {
        await t.close();
      }
    });

    test('made-up keys from a spent address are refused without a store query; a known key still goes on', async () => {
      const t = await startServer({ store });
      try {
        const a = await newTenant(t);
        assert.equal((await get(t, '/v1/tenant', bearer(a.key))).status, 200, 'the key is known here now');
        let lookups = 0;
        const apiKeys = t.deps.store.apiKeys;
        const findForAuth = apiKeys.findForAuth.bind(apiKeys);
        apiKeys.findForAuth = (id) => {
          lookups += 1;
          return findForAuth(id);
        };
        const ip = { 'x-real-ip': '203.0.113.30' };
        const statuses: number[] = [];
        for (let i = 0; i < 300; i++) {
          const id = i.toString(16).padStart(16, '0');
          statuses.push((await get(t, '/v1/tenant', { ...ip, ...bearer(`${id}.made-up-secret-made-up-secret-made-up-secret`) })).status);
        }
        assert.ok(statuses.slice(CLIENT_IP_BURST).every((s) => s === 429), 'refused once the address is spent');
        assert.ok(lookups <= CLIENT_IP_BURST + 1, `${lookups} store lookups for 300 made-up keys`);
        assert.equal((await get(t, '/v1/tenant', { ...ip, ...bearer(a.key) })).status, 200, 'a known key from that address goes on');
      } finally {
        await t.close();
      }
    });

    test('a valid admin token is checked before the registration limiter; a wrong one still consumes it', async () => {
      const t = await startServer({ store, config: { bootstrapTokens: [BOOTSTRAP_TOKEN], adminTokens: [ADMIN_TOKEN] } });
      try {
        const a = await newTenant(t);
        const patch = (ip: string, token: string) =>
          fetch(`${t.url}/v1/tenants/${a.id}/quotas`, {
            method: 'PATCH',
            headers: { 'content-type': 'application/json', 'x-real-ip': ip, 'x-admin-token': token },
            body: JSON.stringify({ max_services: 7 }),
          });
        t.clock.advance(180_000); // the registration above is refilled: the overall allowance is whole
        // Strangers exhaust the registration limiter: 20 an hour overall, from 4 addresses.
        for (let ip = 1; ip <= 4; ip++) {
          for (let i = 0; i < 5; i++) assert.equal((await patch(`198.51.100.${ip}`, 'w'.repeat(40))).status, 401);
        }
        assert.equal((await patch('198.51.100.5', 'w'.repeat(40))).status, 429, 'a wrong token from a fresh address meets the overall limit');
        assert.equal((await patch('198.51.100.1', 'w'.repeat(40))).status, 429, 'and the per-address one');
        // The operator is not locked out, from any address, however often.
        for (const ip of ['198.51.100.1', '198.51.100.6']) {
          for (let i = 0; i < 6; i++) assert.equal((await patch(ip, ADMIN_TOKEN)).status, 200, `${ip} #${i}`);
        }
        const counted = await rejections(t);
        assert.equal(counted.registration_global, 1);
        assert.equal(counted.registration_ip, 1);
      } finally {
        await t.close();
      }
    });
  });
});
