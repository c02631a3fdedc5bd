import assert from 'node:assert/strict';
import { connect } from 'node:net';
import { gzipSync } from 'node:zlib';
import { after, before, describe, test } from 'node:test';
import type { Runtime } from '../src/runtime/index.js';
import { eachStore, newTenant, startServer, type TestServer } from './harness.js';
import { inertRuntime } from './inert-runtime.js';
import { startPrivateHost } from './private-host.js';
import { tarOf } from './archive-fixtures.js';

describe('request handling', () => {
  let t: TestServer;
  before(async () => {
    t = await startServer();
  });
  after(() => t.close());

  test('bodies over 1 MB are 413 {error}; exactly at the limit they are parsed', async () => {
    const a = await newTenant(t);
    const big = JSON.stringify({ name: 'x'.repeat(1024 * 1024) });
    const r = await a.client.raw<{ error: string }>('POST', '/v1/auth/keys', { rawBody: big });
    assert.equal(r.status, 413);
    assert.match(r.body.error, /too large/);
    const padded = `{"name":"ok"${' '.repeat(1024 * 1024 - 13)}}`;
    assert.equal(Buffer.byteLength(padded), 1024 * 1024);
    assert.equal((await a.client.raw('POST', '/v1/auth/keys', { rawBody: padded })).status, 201);
  });

  test('malformed JSON and wrong types are 400 {error}; any content type is read as JSON', async () => {
    const a = await newTenant(t);
    const bad = await a.client.raw<{ error: string }>('POST', '/v1/auth/keys', { rawBody: '{"name": ' });
    assert.equal(bad.status, 400);
    assert.match(bad.body.error, /malformed JSON/);
    const wrongType = await a.client.raw<{ error: string }>('POST', '/v1/auth/keys', { body: { name: 7 } });
    assert.equal(wrongType.status, 400);
    assert.match(wrongType.body.error, /name/);
    const form = await a.client.raw('POST', '/v1/auth/keys', {
      rawBody: '{"name":"curl-d"}',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
    });
    assert.equal(form.status, 201);
  });

  test('unknown routes are 404 and known paths with another method 405, both {error}', async () => {
    const nf = await t.client.raw<{ error: string }>('GET', '/v1/nothing-here');
    assert.equal(nf.status, 404);
    assert.equal(typeof nf.body.error, 'string');
    const na = await t.client.raw<{ error: string }>('PUT', '/v1/tenant');
    assert.equal(na.status, 405);
    assert.equal(typeof na.body.error, 'string');
    assert.equal(na.headers.get('allow'), 'GET, PATCH, DELETE');
    assert.equal((await t.client.raw('POST', '/v1/tenants/abc/quotas')).status, 405);
  });

  test('activity: newest first, filters, limit default 50 clamped to 200, offset >= 0, since in unix seconds', async () => {
    const a = await newTenant(t);
    const start = Math.floor(t.clock.now() / 1000);
    for (let i = 0; i < 3; i++) await a.client.createKey({ name: `a${i}` });
    const feed = await a.client.activity();
    assert.deepEqual(feed.slice(0, 4).map((e) => e.action), ['key.created', 'key.created', 'key.created', 'key.created']);
    assert.equal(feed.at(-1)?.action, 'tenant.registered');
    assert.equal(feed[0]?.details.name, 'a2');
    assert.equal((await a.client.activity({ resource_type: 'tenant' })).length, 1);
    assert.equal((await a.client.activity({ action: 'key.created', limit: 2 })).length, 2);
    assert.equal((await a.client.activity({ offset: 4 })).length, 1);
    t.clock.advance(10_000);
    await a.client.renameTenant('activity-renamed');
    const since = await a.client.activity({ since: start + 5 });
    assert.deepEqual(since.map((e) => e.action), ['tenant.updated']);

    const other = await newTenant(t);
    assert.ok((await other.client.activity()).every((e) => e.resource_id !== a.id), 'scoped to the tenant');

    const bad: Array<Record<string, string | number>> = [{ offset: -1 }, { limit: 0 }, { since: 'yesterday' }];
    for (const q of bad) {
      const r = await a.client.raw<{ error: string }>('GET', '/v1/activity', { query: q });
      assert.equal(r.status, 400, JSON.stringify(q));
    }
    // Enough entries to see the default and the clamp.
    await t.deps.store.transaction(async (tx) => {
      for (let i = 0; i < 230; i++) {
        await t.deps.activity.record(tx, { tenantId: a.id, action: 'test.bulk', resourceType: 'test', resourceId: String(i) });
      }
    });
    assert.equal((await a.client.activity()).length, 50);
    assert.equal((await a.client.activity({ limit: 500 })).length, 200);
  });
});

describe('request timeout', () => {
  test('a route that has not answered after 30 s gets 503 {error}', async () => {
    let reached!: () => void;
    const inHandler = new Promise<void>((r) => (reached = r));
    // Only the request's call hangs: reconcile asks the engine too (does it answer?), and
    // a reconcile that never ends would keep the server from closing.
    const inert = inertRuntime();
    let armed = false;
    const hanging: Runtime = {
      ...inert,
      info: () => {
        if (!armed) return inert.info();
        armed = false;
        reached();
        return new Promise(() => {});
      },
    };
    const t = await startServer({ overrides: { runtime: hanging } });
    try {
      const a = await newTenant(t);
      armed = true;
      const pending = a.client.raw<{ error: string }>('GET', '/v1/system/health/detailed');
      await inHandler;
      t.clock.advance(29_750);
      const early = await Promise.race([pending, new Promise((r) => setTimeout(() => r('still waiting'), 100))]);
      assert.equal(early, 'still waiting', 'no answer before 30 s');
      t.clock.advance(250);
      const r = await pending;
      assert.equal(r.status, 503);
      assert.deepEqual(r.body, { error: 'request timed out', request_id: r.headers.get('x-request-id') });
    } finally {
      await t.close();
    }
  });
});

eachStore((kind) => {
  describe(`idempotent replay (${kind})`, () => {
    let t: TestServer;
    before(async () => {
      t = await startServer({ store: kind });
    });
    after(() => t.close());

    test('same key, method, path and body within 10 minutes replays the stored response', async () => {
      const a = await newTenant(t);
      const send = (name: string, key = 'idem-1') =>
        a.client.raw<{ id: string; api_key: string; error?: string }>('POST', '/v1/auth/keys', { body: { name }, headers: { 'idempotency-key': key } });
      const first = await send('replayed');
      assert.equal(first.status, 201);
      const second = await send('replayed');
      assert.equal(second.status, 201);
      assert.equal(second.text, first.text, 'byte-identical replay');
      assert.equal(second.headers.get('idempotent-replayed'), 'true');
      assert.equal((await a.client.listKeys()).filter((k) => k.name === 'replayed').length, 1, 'ran once');

      const different = await send('other-body');
      assert.equal(different.status, 409);
      assert.match(different.body.error ?? '', /Idempotency-Key/);
      const otherPath = await a.client.raw('DELETE', '/v1/auth/keys/0000000000000000', { headers: { 'idempotency-key': 'idem-1' } });
      assert.equal(otherPath.status, 409);

      t.clock.advance(600_000);
      const later = await send('replayed');
      assert.equal(later.status, 201);
      assert.notEqual(later.body.id, first.body.id, 'after 10 minutes the key is fresh');
    });

    test('keys are per tenant, errors below 500 are replayed, and requests without a key run each time', async () => {
      const a = await newTenant(t);
      const b = await newTenant(t);
      const h = { 'idempotency-key': 'shared-key' };
      assert.equal((await a.client.raw('POST', '/v1/auth/keys', { body: { name: 'x' }, headers: h })).status, 201);
      assert.equal((await b.client.raw('POST', '/v1/auth/keys', { body: { name: 'x' }, headers: h })).status, 201, 'another tenant, same key: independent');
      const nf1 = await a.client.raw('DELETE', '/v1/auth/keys/1111111111111111', { headers: { 'idempotency-key': 'nf' } });
      const nf2 = await a.client.raw('DELETE', '/v1/auth/keys/1111111111111111', { headers: { 'idempotency-key': 'nf' } });
      assert.equal(nf1.status, 404);
      assert.equal(nf2.status, 404);
      assert.equal(nf2.headers.get('idempotent-replayed'), 'true');
      await a.client.createKey({ name: 'plain' });
      await a.client.createKey({ name: 'plain' });
      assert.equal((await a.client.listKeys()).filter((k) => k.name === 'plain').length, 2);
      const tooLong = await a.client.raw('POST', '/v1/auth/keys', { body: {}, headers: { 'idempotency-key': 'k'.repeat(256) } });
      assert.equal(tooLong.status, 400);
    });
  });
});

describe('server timeouts (real sockets, real time)', () => {
  const probe = async (url: string, payload: string): Promise<{ ms: number; answer: string }> => {
    const { hostname, port } = new URL(url);
    const started = Date.now();
    return new Promise((resolve, reject) => {
      let answer = '';
      const sock = connect({ host: hostname, port: Number(port) }, () => sock.write(payload));
      sock.on('data', (b) => (answer += b.toString()));
      sock.on('close', () => resolve({ ms: Date.now() - started, answer }));
      sock.on('error', reject);
      sock.setTimeout(20_000, () => sock.destroy(new Error('server never closed the connection')));
    });
  };

  test('headers not complete within 5 s: 408 and the connection is closed', async () => {
    const t = await startServer();
    try {
      const r = await probe(t.url, 'GET /v1/system/health HTTP/1.1\r\nHost: x\r\n');
      assert.match(r.answer, /^HTTP\/1\.1 408/);
      assert.ok(r.ms >= 4_500 && r.ms < 7_500, `closed after ${r.ms} ms`);
    } finally {
      await t.close();
    }
  });

  test("an idle keep-alive connection still takes a request 6 s later (Node's own 5 s would have closed it), and svcd's close ends it at once", async () => {
    const t = await startServer();
    const { hostname, port } = new URL(t.url);
    const sock = connect({ host: hostname, port: Number(port) });
    let received = '';
    let closedAt = 0;
    let closing = 0;
    let closedByServer = 0;
    sock.on('data', (b) => (received += b.toString()));
    sock.on('close', () => (closedAt = Date.now()));
    const request = 'GET /v1/system/health HTTP/1.1\r\nHost: x\r\n\r\n';
    /** Resolves once `n` answers' heads have arrived on the socket (or it closed). */
    const answers = async (n: number): Promise<number> => {
      const count = () => received.match(/HTTP\/1\.1 \d{3} /g)?.length ?? 0;
      const deadline = Date.now() + 5_000;
      while (count() < n && closedAt === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
      return count();
    };
    try {
      await new Promise<void>((resolve, reject) => {
        sock.once('connect', resolve);
        sock.once('error', reject);
      });
      sock.write(request);
      assert.equal(await answers(1), 1);
      assert.match(received, /keep-alive: timeout=72/i);
      await new Promise((r) => setTimeout(r, 6_000));
      assert.equal(closedAt, 0, 'the server closed the idle connection');
      sock.write(request);
      assert.equal(await answers(2), 2, received);
      assert.match(received.split('HTTP/1.1 ')[2] ?? '', /^200 /);
    } finally {
      closing = Date.now();
      await t.close();
      for (let i = 0; i < 250 && closedAt === 0; i++) await new Promise((r) => setTimeout(r, 20));
      closedByServer = closedAt;
      sock.destroy();
    }
    // The idle connection does not hold svcd's close for its keep-alive: svcd closed it (not this test, after its 5 s).
    assert.ok(closedByServer > 0 && closedByServer - closing < 5_000, `the idle connection closed ${closedByServer - closing} ms after svcd's close began`);
  });

  test('a body not complete within 10 s: 408 and the connection is closed', async () => {
    const t = await startServer({ realTime: true });
    try {
      const r = await probe(t.url, 'POST /v1/system/bootstrap-token/validate HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"tok');
      assert.match(r.answer, /^HTTP\/1\.1 408/);
      assert.ok(r.ms >= 9_500 && r.ms < 12_500, `closed after ${r.ms} ms`);
    } finally {
      await t.close();
    }
  });

  test("an upload's body may take longer than 10 s, once its request is authenticated", async () => {
    const t = await startServer({ realTime: true, overrides: { runtime: inertRuntime() } });
    try {
      const a = await newTenant(t);
      const s = await a.client.createService({ name: 'slow-upload', await_build: true });
      const archive = gzipSync(await tarOf([{ name: 'Dockerfile', body: 'FROM scratch\n' }]));
      const { hostname, port } = new URL(t.url);
      /**
       * Sends the head, then the archive in three parts 5.5 s apart (12 s in all); resolves with
       * the answer's status, when it came, and when the connection closed.
       */
      const trickle = (key: string, o: { connection: 'close' | 'keep-alive'; declaredExtra: number }) =>
        new Promise<{ status: number; answeredMs: number; closedMs: number; body: string }>((resolve, reject) => {
          const started = Date.now();
          let answer = '';
          let answeredMs = -1;
          const sock = connect({ host: hostname, port: Number(port) }, () => {
            sock.write(`POST /v1/services/${s.id}/sources HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${key}\r\nContent-Type: application/gzip\r\nContent-Length: ${archive.length + o.declaredExtra}\r\nConnection: ${o.connection}\r\n\r\n`);
            const third = Math.ceil(archive.length / 3);
            const parts = [archive.subarray(0, third), archive.subarray(third, 2 * third), archive.subarray(2 * third)];
            const timers = parts.map((part, i) => setTimeout(() => { if (!sock.destroyed) sock.write(part); }, 100 + i * 5_500));
            sock.on('close', () => timers.forEach(clearTimeout));
          });
          sock.on('data', (b) => {
            if (answeredMs < 0) answeredMs = Date.now() - started;
            answer += b.toString();
          });
          sock.on('close', () => resolve({ status: Number(/^HTTP\/1\.1 (\d+)/.exec(answer)?.[1] ?? 0), answeredMs, closedMs: Date.now() - started, body: answer }));
          sock.on('error', reject);
          sock.setTimeout(60_000, () => sock.destroy());
        });
      const [authenticated, anonymous] = await Promise.all([
        trickle(a.key, { connection: 'close', declaredExtra: 0 }),
        // A slow client without a key whose body (its length says 100,000 bytes more) never ends.
        trickle('0000000000000000.bad', { connection: 'keep-alive', declaredExtra: 100_000 }),
      ]);
      assert.equal(authenticated.status, 201, authenticated.body);
      assert.ok(authenticated.answeredMs > 11_000, `answered after ${authenticated.answeredMs} ms, once all of it came`);
      // Without a valid key nothing waits for the body: the refusal comes at once, and the slow
      // body after it is cut at the 10 s read timeout, not at the uploads' 10 minutes.
      assert.equal(anonymous.status, 401);
      assert.ok(anonymous.answeredMs < 5_000, `refused after ${anonymous.answeredMs} ms`);
      assert.ok(anonymous.closedMs < 13_000, `the connection closed after ${anonymous.closedMs} ms`);
    } finally {
      await t.close();
    }
  });
});

describe('connections per client (real sockets)', () => {
  test('a client past --connections-per-client open connections is answered 429 on a new one, which runs nothing and is closed; its others and a freed place are served', async () => {
    // A peer that is no loopback address: svcd listens on the host's side of a test network
    // namespace's veth pair, and this process connects to it there (the kernel delivers it
    // locally, from that address). That loopback peers are not counted: unit.test.ts.
    const net = await startPrivateHost([9]);
    const t = await startServer({ listenHost: net.hostAddress, config: { connectionsPerClient: 2 } });
    const { port } = new URL(t.url);
    const opened: ReturnType<typeof connect>[] = [];
    const health = 'GET /v1/system/health HTTP/1.1\r\nHost: x\r\n\r\n';
    /** A connection to `host`, and the answer to `request` on it (a refused one: once it closed). */
    const ask = async (host: string, request = health): Promise<{ answer: string; closed: boolean }> => {
      const sock = connect({ host, port: Number(port) });
      opened.push(sock);
      const seen = { answer: '', closed: false };
      sock.on('data', (b) => (seen.answer += b.toString()));
      sock.on('close', () => (seen.closed = true));
      sock.on('error', () => {});
      await new Promise<void>((resolve, reject) => {
        sock.once('connect', resolve);
        sock.once('error', reject);
      });
      sock.write(request);
      for (const deadline = Date.now() + 5_000; !/\r\n\r\n/.test(seen.answer) && Date.now() < deadline; ) await new Promise((r) => setTimeout(r, 20));
      for (const deadline = Date.now() + 2_000; /^HTTP\/1\.1 429/.test(seen.answer) && !seen.closed && Date.now() < deadline; ) await new Promise((r) => setTimeout(r, 20));
      return { ...seen };
    };
    try {
      const first = await ask(net.hostAddress);
      const second = await ask(net.hostAddress);
      assert.match(first.answer, /^HTTP\/1\.1 200 /);
      assert.match(second.answer, /^HTTP\/1\.1 200 /);
      // The third sends a registration, which would make a tenant if it ran.
      const body = JSON.stringify({ name: 'past-the-cap', email: 'past-the-cap@example.com' });
      const third = await ask(net.hostAddress, `POST /v1/tenants/register HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`);
      assert.match(third.answer, /^HTTP\/1\.1 429 /, third.answer);
      assert.match(third.answer, /too many open connections from this address \(at most 2\)/);
      assert.match(third.answer, /x-request-id: /i, 'answered as every refusal is');
      assert.match(third.answer, /retry-after: 1/i);
      assert.equal(third.closed, true, 'the refused connection is closed with its answer');
      assert.equal(await t.deps.store.tenants.findByEmailKey('past-the-cap@example.com'), undefined, 'the refused request ran nothing');
      assert.equal(first.closed || second.closed, false, 'its two others stay open');
      // One closed frees its place.
      opened[0]?.destroy();
      await new Promise((r) => setTimeout(r, 200));
      assert.match((await ask(net.hostAddress)).answer, /^HTTP\/1\.1 200 /);
    } finally {
      for (const s of opened) s.destroy();
      await t.close();
      await net.close();
    }
  });
});
