// Credentials, the HTTPS rule and the rate limits of spec 5 and 8. These are in-memory rules, so
// they run on SQLite; the store-backed idempotency rules run on both stores in http-requests.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { ADMIN_TOKEN, BOOTSTRAP_TOKEN, newTenant, registerRaw, startServer } from './harness.js';

const SECOND_BOOTSTRAP = 'second-bootstrap-token-0123456789abcdefgh';

describe('bootstrap token on registration', () => {
  test('required unless --dev --open-registration; any token of the list works', async () => {
    const t = await startServer({ config: { openRegistration: false, bootstrapTokens: [BOOTSTRAP_TOKEN, SECOND_BOOTSTRAP] } });
    try {
      const body = (n: string) => ({ name: n, email: `${n}@x.io` });
      assert.equal((await registerRaw(t, body('no-token'))).status, 401);
      assert.equal((await registerRaw(t, body('bad-token'), { 'x-bootstrap-token': 'x'.repeat(40) })).status, 401);
      assert.equal((await registerRaw(t, body('first-token'), { 'x-bootstrap-token': BOOTSTRAP_TOKEN })).status, 201);
      assert.equal((await registerRaw(t, body('second-token'), { 'x-bootstrap-token': SECOND_BOOTSTRAP })).status, 201);
    } finally {
      await t.close();
    }
  });

  test('with no bootstrap token configured and registration not open, registration is unavailable (503)', async () => {
    const t = await startServer({ config: { openRegistration: false } });
    try {
      const r = await registerRaw<{ error: string }>(t, { name: 'nobody', email: 'n@x.io' });
      assert.equal(r.status, 503);
      assert.match(r.body.error, /registration unavailable/);
    } finally {
      await t.close();
    }
  });

  test('validate takes the token in the body and answers 200 {valid} either way', async () => {
    const t = await startServer({ config: { bootstrapTokens: [BOOTSTRAP_TOKEN] } });
    try {
      const ok = await t.client.raw('POST', '/v1/system/bootstrap-token/validate', { body: { token: BOOTSTRAP_TOKEN } });
      assert.deepEqual([ok.status, ok.body], [200, { valid: true }]);
      const bad = await t.client.raw('POST', '/v1/system/bootstrap-token/validate', { body: { token: 'nope' } });
      assert.deepEqual([bad.status, bad.body], [200, { valid: false }]);
      const inHeader = await t.client.raw('POST', '/v1/system/bootstrap-token/validate', {
        body: { token: 'nope' },
        headers: { 'x-bootstrap-token': BOOTSTRAP_TOKEN },
      });
      assert.deepEqual(inHeader.body, { valid: false }, 'the header is not read');
    } finally {
      await t.close();
    }
  });
});

describe('operator routes', () => {
  test('with an admin token: it works in either header, a bootstrap token is 403, anything else 401', async () => {
    const lines: string[] = [];
    const t = await startServer({ config: { bootstrapTokens: [BOOTSTRAP_TOKEN], adminTokens: [ADMIN_TOKEN] }, logLines: lines });
    try {
      const a = await newTenant(t);
      const patch = (headers: Record<string, string>, ip: string) =>
        t.client.raw<{ error: string }>('PATCH', `/v1/tenants/${a.id}/quotas`, {
          body: { max_services: 7 },
          headers: { ...headers, 'x-real-ip': ip },
        });
      assert.equal((await patch({ 'x-admin-token': ADMIN_TOKEN }, '10.1.0.1')).status, 200);
      assert.equal((await patch({ 'x-bootstrap-token': ADMIN_TOKEN }, '10.1.0.2')).status, 200);
      const boot = await patch({ 'x-bootstrap-token': BOOTSTRAP_TOKEN }, '10.1.0.3');
      assert.equal(boot.status, 403);
      assert.match(boot.body.error, /bootstrap token/);
      assert.equal((await patch({ 'x-admin-token': BOOTSTRAP_TOKEN }, '10.1.0.4')).status, 403);
      assert.equal((await patch({ 'x-admin-token': 'w'.repeat(40) }, '10.1.0.5')).status, 401);
      assert.equal((await patch({}, '10.1.0.6')).status, 401);
      const audit = lines.map((l) => JSON.parse(l) as Record<string, unknown>).filter((l) => l.audit === true);
      assert.ok(audit.some((l) => l.event === 'operator.quota_patch' && l.tenant_id === a.id), 'operator actions are audit-logged');
    } finally {
      await t.close();
    }
  });

  test('without an admin token the bootstrap token is accepted (deprecated, logged)', async () => {
    const lines: string[] = [];
    const t = await startServer({ config: { bootstrapTokens: [BOOTSTRAP_TOKEN] }, logLines: lines });
    try {
      const a = await newTenant(t);
      const r = await t.client.raw('PATCH', `/v1/tenants/${a.id}/quotas`, {
        body: { max_services: 6 },
        headers: { 'x-bootstrap-token': BOOTSTRAP_TOKEN },
      });
      assert.equal(r.status, 200);
      assert.ok(lines.some((l) => l.includes('deprecated')));
    } finally {
      await t.close();
    }
  });
});

describe('HTTPS rule in production', () => {
  test('loopback requests need X-Forwarded-Proto: https (403 otherwise); the liveness probe is exempt', async () => {
    const t = await startServer({ config: { dev: false, openRegistration: false, bootstrapTokens: [BOOTSTRAP_TOKEN] } });
    try {
      const plain = await t.client.raw<{ error: string }>('GET', '/v1/tenant');
      assert.equal(plain.status, 403);
      assert.equal(plain.body.error, 'HTTPS required');
      const http = await t.client.raw('GET', '/v1/tenant', { headers: { 'x-forwarded-proto': 'http' } });
      assert.equal(http.status, 403);
      const https = await t.client.raw('GET', '/v1/tenant', { headers: { 'x-forwarded-proto': 'https' } });
      assert.equal(https.status, 401, 'past the HTTPS rule, on to the key check');
      assert.equal((await t.client.raw('GET', '/v1/system/health')).status, 200);
      const reg = await t.client.raw('POST', '/v1/tenants/register', {
        body: { name: 'prod-tenant', email: 'p@x.io' },
        headers: { 'x-forwarded-proto': 'https', 'x-bootstrap-token': BOOTSTRAP_TOKEN },
      });
      assert.equal(reg.status, 201);
    } finally {
      await t.close();
    }
  });
});

describe('per-tenant rate limit', () => {
  test('burst 200 then 429 with Retry-After; 100/s refill; headers on every authenticated answer; tenants are independent', async () => {
    const t = await startServer();
    try {
      const a = await newTenant(t);
      const b = await newTenant(t);
      let last = await a.client.raw('GET', '/v1/tenant');
      assert.equal(last.headers.get('x-ratelimit-limit'), '100');
      assert.equal(last.headers.get('x-ratelimit-remaining'), '199');
      for (let i = 0; i < 199; i++) last = await a.client.raw('GET', '/v1/tenant');
      assert.equal(last.status, 200);
      assert.equal(last.headers.get('x-ratelimit-remaining'), '0');
      const limited = await a.client.raw<{ error: string }>('GET', '/v1/tenant');
      assert.equal(limited.status, 429);
      assert.equal(limited.body.error, 'rate limit exceeded');
      assert.equal(limited.headers.get('retry-after'), '1');
      assert.equal(limited.headers.get('x-ratelimit-limit'), '100');
      assert.equal((await b.client.raw('GET', '/v1/tenant')).status, 200, 'another tenant has its own bucket');

      t.clock.advance(1_000);
      for (let i = 0; i < 100; i++) assert.equal((await a.client.raw('GET', '/v1/tenant')).status, 200);
      assert.equal((await a.client.raw('GET', '/v1/tenant')).status, 429, 'exactly 100 tokens came back in one second');

      t.clock.advance(1_000);
      const notFound = await a.client.raw('DELETE', '/v1/auth/keys/ffffffffffffffff');
      assert.equal(notFound.status, 404);
      assert.equal(notFound.headers.get('x-ratelimit-limit'), '100', 'errors of authenticated routes carry the headers too');
    } finally {
      await t.close();
    }
  });

  test('idle tenant buckets are dropped after an hour by the 5-minute sweep', async () => {
    const t = await startServer();
    try {
      const a = await newTenant(t);
      await a.client.tenant();
      const buckets = t.deps.rateLimits.tenantBuckets;
      assert.ok(buckets.has(a.id));
      t.clock.advance(55 * 60_000);
      assert.ok(buckets.has(a.id), 'not idle for an hour yet');
      t.clock.advance(10 * 60_000);
      assert.ok(!buckets.has(a.id), 'dropped by a sweep after an hour idle');
    } finally {
      await t.close();
    }
  });
});

describe('global rate limit', () => {
  test('500/s with burst 1000 over the whole process', async () => {
    const t = await startServer();
    try {
      const tenants = [];
      for (let i = 0; i < 6; i++) tenants.push(await newTenant(t));
      // Five tenants spend their whole tenant burst (5 x 200 = 1000): the global burst.
      // The registrations above used a few global tokens too, so stop at the first 429.
      let served = 0;
      let status = 200;
      outer: for (const x of tenants.slice(0, 5)) {
        for (let i = 0; i < 200; i++) {
          status = (await x.client.raw('GET', '/v1/tenant')).status;
          if (status !== 200) break outer;
          served += 1;
        }
      }
      if (status === 200) status = (await tenants[5]!.client.raw('GET', '/v1/tenant')).status;
      assert.equal(status, 429);
      assert.ok(served >= 990 && served <= 1000, `served ${served} before the global limit`);
      t.clock.advance(1_000);
      let ok = 0;
      for (let i = 0; i < 501; i++) if ((await tenants[5]!.client.raw('GET', '/v1/tenant')).status === 200) ok += 1;
      assert.ok(ok === 200, `the sixth tenant is then bound by its own burst (${ok})`);
    } finally {
      await t.close();
    }
  });
});

describe('registration limiter', () => {
  test('register, validate, recover, reactivate and quota patch share the per-IP allowance', async () => {
    const t = await startServer({ config: { adminTokens: [ADMIN_TOKEN] } });
    try {
      const a = await newTenant(t);
      const ip = { 'x-real-ip': '192.0.2.77' };
      // A wrong token: a valid one is not charged to the limiter (http-hardening.test.ts).
      const admin = { ...ip, 'x-admin-token': 'w'.repeat(40) };
      const calls = [
        () => t.client.raw('POST', '/v1/tenants/register', { body: { name: 'shared-ip', email: 'shared@x.io' }, headers: ip }),
        () => t.client.raw('POST', '/v1/system/bootstrap-token/validate', { body: { token: 'x' }, headers: ip }),
        () => t.client.raw('POST', '/v1/auth/recover', { body: { email: 'nobody@x.io' }, headers: admin }),
        () => t.client.raw('POST', `/v1/tenants/${a.id}/reactivate`, { headers: admin }),
        () => t.client.raw('PATCH', `/v1/tenants/${a.id}/quotas`, { body: { max_services: 9 }, headers: admin }),
      ];
      const statuses = [];
      for (const call of calls) statuses.push((await call()).status);
      assert.deepEqual(statuses, [201, 200, 401, 401, 401]);
      for (const call of calls) assert.equal((await call()).status, 429);
    } finally {
      await t.close();
    }
  });

  test('5 per client IP per hour, 20 per hour overall; invalid tokens count; X-Forwarded-For is ignored', async () => {
    const t = await startServer({ config: { bootstrapTokens: [BOOTSTRAP_TOKEN] } });
    try {
      const validate = (ip: string, extra: Record<string, string> = {}) =>
        t.client.raw<{ error: string }>('POST', '/v1/system/bootstrap-token/validate', {
          body: { token: 'wrong' },
          headers: { 'x-real-ip': ip, ...extra },
        });
      for (let i = 0; i < 5; i++) assert.equal((await validate('198.51.100.1')).status, 200);
      const sixth = await validate('198.51.100.1', { 'x-forwarded-for': '203.0.113.9' });
      assert.equal(sixth.status, 429);
      assert.equal(sixth.body.error, 'rate limit exceeded');
      assert.ok(Number(sixth.headers.get('retry-after')) > 0);
      // The same IP is limited on every registration-class route, whatever the route.
      const reg = await t.client.raw('POST', '/v1/tenants/register', {
        body: { name: 'limited', email: 'l@x.io' },
        headers: { 'x-real-ip': '198.51.100.1', 'x-bootstrap-token': BOOTSTRAP_TOKEN },
      });
      assert.equal(reg.status, 429);

      for (let ip = 2; ip <= 4; ip++) for (let i = 0; i < 5; i++) assert.equal((await validate(`198.51.100.${ip}`)).status, 200);
      const overall = await validate('198.51.100.5');
      assert.equal(overall.status, 429, 'the 21st in the hour, from a fresh IP');

      t.clock.advance(3_600_000);
      assert.equal((await validate('198.51.100.1')).status, 200, 'allowance back after an hour');
    } finally {
      await t.close();
    }
  });
});
