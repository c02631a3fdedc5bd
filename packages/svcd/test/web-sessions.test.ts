// Dashboard sessions over HTTP, on both stores: an API key exchanged for an HttpOnly cookie, the
// CSRF rule on requests that change something, and every way a session ends (sign-out, its
// key revoked or expired, its own expiry, the tenant suspended). Also the operator's tenant list
// and the health detail read with the admin token, which the dashboard's operator pages use.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { CSRF_HEADER, DEV_SESSION_COOKIE, SESSION_COOKIE, SESSION_TTL_SECONDS, type WebSession } from '@svc/contract';
import { ADMIN_TOKEN, BOOTSTRAP_TOKEN, eachStore, newTenant, startServer, type TestServer } from './harness.js';
import type { AnswerHeaders } from '@svc/client';

/** The `name=value` of the session cookie a sign-in set, and the Set-Cookie line itself. */
function sessionCookie(headers: AnswerHeaders, name = DEV_SESSION_COOKIE): { pair: string; line: string } {
  const line = headers.getSetCookie().find((c) => c.startsWith(`${name}=`));
  assert.ok(line, 'a session cookie was set');
  return { pair: line.split(';')[0] ?? '', line };
}

async function signIn(t: TestServer, apiKey: string, headers: Record<string, string> = {}, name = DEV_SESSION_COOKIE) {
  const r = await t.client.raw<WebSession>('POST', '/v1/auth/session', { body: { api_key: apiKey }, auth: false, headers });
  assert.equal(r.status, 201, r.text);
  return { session: r.body, ...sessionCookie(r.headers, name) };
}

eachStore((kind) => {
  describe(`dashboard sessions (${kind})`, () => {
    let t: TestServer;
    before(async () => {
      t = await startServer({ store: kind, config: { adminTokens: [ADMIN_TOKEN] } });
    });
    after(() => t.close());

    const withCookie = (pair: string, extra: Record<string, string> = {}) => ({ auth: false, headers: { cookie: pair, ...extra } });

    test('a key becomes an HttpOnly, SameSite=Strict cookie that authenticates key routes alone', async () => {
      const a = await newTenant(t);
      const { session, pair, line } = await signIn(t, a.key);
      assert.match(line, /; HttpOnly/i);
      assert.match(line, /; SameSite=Strict/i);
      assert.match(line, /; Path=\//i);
      assert.doesNotMatch(line, /; Secure/i, 'not Secure in --dev: the browser reaches plain loopback');
      assert.ok(!line.includes(a.key.split('.')[1] ?? '??'), 'the cookie is not the key');
      assert.equal(session.tenant_id, a.id);
      assert.equal(session.expires_at, Math.floor(t.clock.now() / 1000) + SESSION_TTL_SECONDS);
      const me = await t.client.raw<{ id: string }>('GET', '/v1/tenant', withCookie(pair));
      assert.equal(me.status, 200);
      assert.equal(me.body.id, a.id);
      const again = await t.client.raw<WebSession>('GET', '/v1/auth/session', withCookie(pair));
      assert.equal(again.status, 200);
      assert.equal(again.body.csrf_token, session.csrf_token);
      assert.equal(again.headers.get('cache-control'), 'no-store');
      // With a key instead of a cookie there is no session to show.
      assert.equal((await a.client.raw('GET', '/v1/auth/session')).status, 404);
    });

    test('a wrong key gets 401 and no cookie; a made-up cookie gets 401, then the address is limited', async () => {
      const a = await newTenant(t);
      const wrong = await t.client.raw<{ error: string }>('POST', '/v1/auth/session', { body: { api_key: `${a.key}x` }, auth: false, headers: { 'x-real-ip': '10.77.1.1' } });
      assert.equal(wrong.status, 401);
      assert.deepEqual(wrong.headers.getSetCookie(), []);
      assert.equal((await t.client.raw('POST', '/v1/auth/session', { body: {}, auth: false, headers: { 'x-real-ip': '10.77.1.1' } })).status, 400);
      const statuses: number[] = [];
      for (let i = 0; i < 60; i++) {
        statuses.push((await t.client.raw('GET', '/v1/tenant', withCookie(`svc_session=${'a'.repeat(32)}.made-up-${i}`, { 'x-real-ip': '10.77.1.2' }))).status);
      }
      assert.equal(statuses[0], 401);
      assert.ok(statuses.includes(429), `failures use up the address's allowance: ${statuses.join(',')}`);
      // The Authorization header, when sent, is what counts: a good cookie does not rescue a bad key.
      const { pair } = await signIn(t, a.key);
      assert.equal((await t.client.raw('GET', '/v1/tenant', withCookie(pair, { authorization: 'Bearer nope.nope' }))).status, 401);
    });

    test('changing something with the cookie needs the CSRF header, from the same origin', async () => {
      const a = await newTenant(t);
      const { session, pair } = await signIn(t, a.key);
      const keysBefore = (await a.client.listKeys()).length;
      const missing = await t.client.raw<{ error: string }>('POST', '/v1/auth/keys', { body: { name: 'x' }, ...withCookie(pair) });
      assert.equal(missing.status, 403);
      assert.match(missing.body.error, /CSRF/);
      const wrong = await t.client.raw('POST', '/v1/auth/keys', { body: { name: 'x' }, ...withCookie(pair, { [CSRF_HEADER]: `${session.csrf_token.slice(1)}A` }) });
      assert.equal(wrong.status, 403);
      // What a cross-site form sends: a form body, the cookie (were SameSite not honoured), another Origin, no header.
      const form = await t.client.raw('POST', '/v1/auth/keys', {
        rawBody: 'name=evil',
        auth: false,
        headers: { cookie: pair, 'content-type': 'application/x-www-form-urlencoded', origin: 'https://evil.example' },
      });
      assert.equal(form.status, 403);
      // Even with the token, another origin is refused (a page elsewhere never has it, but a leak must not be enough).
      const foreign = await t.client.raw('POST', '/v1/auth/keys', { body: { name: 'x' }, ...withCookie(pair, { [CSRF_HEADER]: session.csrf_token, origin: 'https://evil.example' }) });
      assert.equal(foreign.status, 403);
      assert.equal((await a.client.listKeys()).length, keysBefore, 'nothing was created by the refused requests');
      const host = new URL(t.url).host;
      const ok = await t.client.raw('POST', '/v1/auth/keys', { body: { name: 'from-the-page' }, ...withCookie(pair, { [CSRF_HEADER]: session.csrf_token, origin: `http://${host}` }) });
      assert.equal(ok.status, 201, ok.text);
      assert.equal((await a.client.listKeys()).length, keysBefore + 1);
    });

    test('sign-out ends the session on the server: the replayed cookie is refused', async () => {
      const a = await newTenant(t);
      const { session, pair } = await signIn(t, a.key);
      assert.equal((await t.client.raw('DELETE', '/v1/auth/session', withCookie(pair))).status, 403, 'sign-out needs the CSRF header too');
      const out = await t.client.raw('DELETE', '/v1/auth/session', withCookie(pair, { [CSRF_HEADER]: session.csrf_token }));
      assert.equal(out.status, 200);
      assert.match(out.headers.getSetCookie().join('\n'), /svc_session=;.*Max-Age=0/i);
      const replay = await t.client.raw<{ error: string }>('GET', '/v1/tenant', withCookie(pair));
      assert.equal(replay.status, 401);
      assert.match(replay.body.error, /sign in again/);
      // The key itself still works: only the session ended.
      assert.equal((await a.client.raw('GET', '/v1/tenant')).status, 200);
    });

    test('revoking the key it came from ends the session at once', async () => {
      const a = await newTenant(t);
      const other = await a.client.createKey({ name: 'page' });
      const { pair } = await signIn(t, other.api_key);
      assert.equal((await t.client.raw('GET', '/v1/tenant', withCookie(pair))).status, 200);
      await a.client.revokeKey(other.id);
      assert.equal((await t.client.raw('GET', '/v1/tenant', withCookie(pair))).status, 401);
    });

    test("a session ends with its key's expiry, its own 12 hours, and the tenant's suspension", async () => {
      const a = await newTenant(t);
      const short = await a.client.createKey({ name: 'short', expires_in: 600 });
      const fromShort = await signIn(t, short.api_key);
      assert.equal(fromShort.session.expires_at, short.expires_at, 'never past the key');
      const fromLong = await signIn(t, a.key);
      t.clock.advance(600_000);
      assert.equal((await t.client.raw('GET', '/v1/tenant', withCookie(fromShort.pair))).status, 401);
      assert.equal((await t.client.raw('GET', '/v1/tenant', withCookie(fromLong.pair))).status, 200);
      t.clock.advance((SESSION_TTL_SECONDS - 600) * 1000);
      assert.equal((await t.client.raw('GET', '/v1/tenant', withCookie(fromLong.pair))).status, 401);

      const b = await newTenant(t);
      const { session, pair } = await signIn(t, b.key);
      assert.equal((await t.client.raw('DELETE', '/v1/tenant', withCookie(pair, { [CSRF_HEADER]: session.csrf_token }))).status, 200);
      assert.equal((await t.client.raw('GET', '/v1/tenant', withCookie(pair))).status, 401);
      // Revoked, not only refused while suspended: reactivation does not bring the session back,
      // though the key it came from works again.
      const op = t.client.withKey('');
      op.adminToken = ADMIN_TOKEN;
      await op.reactivateTenant(b.id);
      assert.equal((await b.client.raw('GET', '/v1/tenant')).status, 200);
      assert.equal((await t.client.raw('GET', '/v1/tenant', withCookie(pair))).status, 401);
    });

    test('sign-in refuses what another page could send: a foreign Origin or site, a form body', async () => {
      const a = await newTenant(t);
      const attempts: Array<[string, Record<string, string>, number]> = [
        ['a foreign origin', { origin: 'https://evil.example' }, 403],
        // A tenant's service on a sibling host of the base domain is the same site, not the same origin.
        ['a sibling host', { 'sec-fetch-site': 'same-site' }, 403],
        ['another site', { 'sec-fetch-site': 'cross-site' }, 403],
        ['a form body', { 'content-type': 'text/plain' }, 400],
      ];
      for (const [what, headers, status] of attempts) {
        const r = await t.client.raw('POST', '/v1/auth/session', { body: { api_key: a.key }, auth: false, headers });
        assert.equal(r.status, status, what);
        assert.deepEqual(r.headers.getSetCookie(), [], `${what}: no cookie`);
      }
      const host = new URL(t.url).host;
      await signIn(t, a.key, { origin: `http://${host}`, 'sec-fetch-site': 'same-origin' });
    });

    test("refusals of a valid session's requests count against its tenant's limit", async () => {
      const a = await newTenant(t);
      const { pair } = await signIn(t, a.key);
      const statuses = new Set<number>();
      // The tenant bucket holds 200 (spec 8); the clock does not move, so nothing refills.
      for (let i = 0; i < 210; i++) statuses.add((await t.client.raw('POST', '/v1/auth/keys', { body: {}, ...withCookie(pair) })).status);
      assert.deepEqual([...statuses].sort(), [403, 429]);
    });

    test("an address spent on made-up cookies still lets a session that held lately through", async () => {
      const a = await newTenant(t);
      const ip = { 'x-real-ip': '10.77.2.1' };
      const { pair } = await signIn(t, a.key, ip);
      assert.equal((await t.client.raw('GET', '/v1/tenant', withCookie(pair, ip))).status, 200);
      const statuses: number[] = [];
      for (let i = 0; i < 60; i++) statuses.push((await t.client.raw('GET', '/v1/tenant', withCookie(`svc_session=${'b'.repeat(32)}.made-up-${i}`, ip))).status);
      assert.ok(statuses.includes(429), statuses.join(','));
      assert.equal((await t.client.raw('GET', '/v1/tenant', withCookie(pair, ip))).status, 200);
      // A session this svcd has not seen hold is not read for that address.
      const fresh = await signIn(t, (await a.client.createKey()).api_key);
      assert.equal((await t.client.raw('GET', '/v1/tenant', withCookie(fresh.pair, ip))).status, 429);
    });

    test('operator: tenants with status and usage, paginated; quotas; health detail with the admin token', async () => {
      const a = await newTenant(t);
      await newTenant(t);
      const op = t.client.withKey('');
      op.adminToken = ADMIN_TOKEN;
      const all = await op.listTenants({ limit: 200 });
      const mine = all.find((x) => x.id === a.id);
      assert.ok(mine);
      assert.equal(mine.status, 'active');
      assert.deepEqual(mine.usage.services, { used: 0, max: 5 });
      const page = await op.listTenants({ limit: 1, offset: 1 });
      assert.equal(page.length, 1);
      assert.equal(page[0]?.id, all[1]?.id);
      assert.equal((await t.client.raw('GET', '/v1/tenants?limit=99999999999999999999', { headers: { 'x-admin-token': ADMIN_TOKEN }, auth: false })).status, 400);
      assert.equal((await t.client.raw('GET', '/v1/tenants', { auth: false })).status, 401);
      assert.equal((await a.client.raw('GET', '/v1/tenants')).status, 401, 'a tenant key is not an operator');
      assert.equal((await op.tenantQuotas(a.id)).max_services, 5);
      assert.equal((await t.client.raw('GET', '/v1/tenants/nope/quotas', { headers: { 'x-admin-token': ADMIN_TOKEN }, auth: false })).status, 404);
      assert.ok((await op.listTenants({ status: 'suspended', limit: 200 })).every((x) => x.status === 'suspended'));
      assert.equal((await op.healthDetailedAsOperator()).store.available, true);
      assert.equal((await t.client.raw('GET', '/v1/system/health/detailed', { headers: { 'x-admin-token': 'wrong' }, auth: false })).status, 401);
    });
  });
});

describe('dashboard sessions outside --dev', () => {
  let t: TestServer;
  before(async () => {
    t = await startServer({ config: { dev: false, openRegistration: false, adminTokens: [ADMIN_TOKEN], bootstrapTokens: ['bootstrap-for-session-tests-0123456789'] } });
    t.client.bootstrapToken = 'bootstrap-for-session-tests-0123456789';
  });
  after(() => t.close());

  test('the cookie is Secure (svc serves HTTPS there)', async () => {
    const https = { 'x-forwarded-proto': 'https' };
    const r = await t.client.raw<{ tenant_id: string; api_key: string }>('POST', '/v1/tenants/register', {
      body: { name: 'secure-cookie', email: 'secure-cookie@example.com' },
      headers: { ...https, 'x-bootstrap-token': 'bootstrap-for-session-tests-0123456789' },
      auth: false,
    });
    assert.equal(r.status, 201, r.text);
    const { line, pair } = await signIn(t, r.body.api_key, https, SESSION_COOKIE);
    assert.match(line, /^__Host-svc_session=/);
    assert.match(line, /; Secure/i);
    assert.match(line, /; Path=\//i);
    assert.doesNotMatch(line, /; Domain=/i, '__Host- cookies are host-only');
    const withIt = (cookie: string) => ({ auth: false, headers: { ...https, cookie } });
    assert.equal((await t.client.raw('GET', '/v1/tenant', withIt(pair))).status, 200);
    // What a sibling host could plant is not read: the plain name, even with a valid session in it...
    const value = pair.slice(pair.indexOf('=') + 1);
    assert.equal((await t.client.raw('GET', '/v1/tenant', withIt(`${DEV_SESSION_COOKIE}=${value}`))).status, 401);
    // ...and two cookies of the session's name are refused, not resolved, and the browser told to drop it.
    const two = await t.client.raw<{ error: string }>('GET', '/v1/tenant', withIt(`${SESSION_COOKIE}=${'c'.repeat(32)}.planted; ${pair}`));
    assert.equal(two.status, 401);
    assert.match(two.body.error, /more than one session cookie/);
    assert.match(two.headers.getSetCookie().join('\n'), /__Host-svc_session=;.*Max-Age=0/i);
  });
});

describe('operator routes that list tenants need the admin token itself', () => {
  let t: TestServer;
  before(async () => {
    // No admin token: the deprecated fallback lets the bootstrap token open operator routes.
    t = await startServer({ config: { bootstrapTokens: [BOOTSTRAP_TOKEN], openRegistration: false } });
  });
  after(() => t.close());

  test('the bootstrap token may still patch quotas, but not list every tenant or read quotas', async () => {
    const headers = { 'x-bootstrap-token': BOOTSTRAP_TOKEN };
    const list = await t.client.raw<{ error: string }>('GET', '/v1/tenants', { auth: false, headers });
    assert.equal(list.status, 403);
    assert.match(list.body.error, /admin token/);
    assert.equal((await t.client.raw('GET', '/v1/tenants/nope/quotas', { auth: false, headers })).status, 403);
    assert.equal((await t.client.raw('PATCH', '/v1/tenants/nope/quotas', { body: { max_services: 2 }, auth: false, headers: { ...headers, 'x-real-ip': '10.77.3.1' } })).status, 404);
  });
});
