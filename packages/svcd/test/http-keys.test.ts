import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { ADMIN_TOKEN, eachStore, limitedRaw, newTenant, startServer, type TestServer } from './harness.js';

const TEN_YEARS = 315_576_000;

eachStore((kind) => {
  describe(`API keys over HTTP (${kind})`, () => {
    let t: TestServer;
    before(async () => {
      t = await startServer({ store: kind, config: { adminTokens: [ADMIN_TOKEN] } });
    });
    after(() => t.close());

    test('create: 201, default name unnamed, the key works, and the secret is never listed', async () => {
      const a = await newTenant(t);
      const r = await a.client.raw<Record<string, unknown>>('POST', '/v1/auth/keys', { body: {} });
      assert.equal(r.status, 201);
      assert.equal(r.body.name, 'unnamed');
      assert.equal(r.body.expires_at, null);
      const apiKey = String(r.body.api_key);
      assert.ok(apiKey.startsWith(`${String(r.body.id)}.`));
      assert.match(String(r.body.prefix), /^svc_/);
      assert.ok(!apiKey.split('.')[1]?.includes(String(r.body.prefix).slice(4)), 'the prefix reveals none of the secret');
      assert.equal((await t.client.withKey(apiKey).tenant()).id, a.id);

      const list = await a.client.raw<Array<Record<string, unknown>>>('GET', '/v1/auth/keys');
      assert.equal(list.status, 200);
      assert.equal(list.body.length, 2);
      for (const k of list.body) {
        assert.deepEqual(Object.keys(k).sort(), ['created_at', 'expires_at', 'id', 'last_used_at', 'name', 'prefix']);
      }
      assert.ok(!list.text.includes(apiKey.split('.')[1] ?? '??'));
    });

    test('expires_in must be a positive integer of at most about ten years; expired keys stop working', async () => {
      const a = await newTenant(t);
      for (const expires_in of [0, -5, TEN_YEARS + 1, '60', 1.5]) {
        const r = await a.client.raw<{ error: string }>('POST', '/v1/auth/keys', { body: { expires_in } });
        assert.equal(r.status, 400, String(expires_in));
        assert.match(r.body.error, /expires_in/);
      }
      const longest = await a.client.createKey({ expires_in: TEN_YEARS });
      assert.equal(longest.expires_at, Math.floor(t.clock.now() / 1000) + TEN_YEARS);
      const short = await a.client.createKey({ name: 'short', expires_in: 60 });
      const c = t.client.withKey(short.api_key);
      assert.equal((await c.raw('GET', '/v1/tenant')).status, 200);
      t.clock.advance(59_000);
      assert.equal((await c.raw('GET', '/v1/tenant')).status, 200);
      t.clock.advance(1_000);
      assert.equal((await c.raw('GET', '/v1/tenant')).status, 401);
    });

    test('at most 20 non-revoked keys: the 21st is 409 quota exceeded; revoking frees a place', async () => {
      const a = await newTenant(t);
      const made = [];
      for (let i = 0; i < 19; i++) made.push(await a.client.createKey({ name: `k${i}` }));
      const over = await a.client.raw<{ error: string }>('POST', '/v1/auth/keys', { body: { name: 'one-too-many' } });
      assert.equal(over.status, 409);
      assert.match(over.body.error, /^quota exceeded: maximum API keys reached/);
      assert.equal((await a.client.usage()).api_keys.used, 20);
      await a.client.revokeKey(made[0]!.id);
      assert.equal((await a.client.raw('POST', '/v1/auth/keys', { body: {} })).status, 201);
    });

    test('revoke: the key stops working; foreign and unknown keys are the same 404', async () => {
      const a = await newTenant(t);
      const b = await newTenant(t);
      const k = await a.client.createKey({ name: 'to-revoke' });
      const foreign = await b.client.raw<{ error: string }>('DELETE', `/v1/auth/keys/${k.id}`);
      const unknown = await b.client.raw<{ error: string }>('DELETE', '/v1/auth/keys/0000000000000000');
      assert.equal(foreign.status, 404);
      assert.equal(unknown.status, 404);
      assert.equal(foreign.body.error, unknown.body.error);
      assert.equal((await t.client.withKey(k.api_key).raw('GET', '/v1/tenant')).status, 200, 'b could not touch it');
      assert.deepEqual(await a.client.revokeKey(k.id), { id: k.id, status: 'revoked' });
      assert.equal((await t.client.withKey(k.api_key).raw('GET', '/v1/tenant')).status, 401);
      assert.equal((await a.client.raw('DELETE', `/v1/auth/keys/${k.id}`)).status, 404, 'already revoked');
      assert.ok(!(await a.client.listKeys()).some((x) => x.id === k.id));
      const actions = (await a.client.activity()).map((e) => e.action);
      assert.ok(actions.includes('key.revoked'));
    });

    test('a wrong secret, a malformed header or no header is 401 with {error}', async () => {
      const a = await newTenant(t);
      const [id] = a.key.split('.');
      for (const authorization of [`Bearer ${id}.wrong-secret`, `Bearer ${id}`, 'Basic abc', `Bearer nosuchkey.${a.key.split('.')[1]}`]) {
        const r = await t.client.raw<{ error: string }>('GET', '/v1/tenant', { headers: { authorization } });
        assert.equal(r.status, 401, authorization);
        assert.equal(typeof r.body.error, 'string');
      }
      assert.equal((await t.client.raw('GET', '/v1/tenant')).status, 401);
    });

    test('lookups are cached 30 s: a revocation made elsewhere takes effect within the window', async () => {
      const a = await newTenant(t);
      const k = await a.client.createKey({ name: 'cached' });
      const c = t.client.withKey(k.api_key);
      assert.equal((await c.raw('GET', '/v1/tenant')).status, 200);
      // Another svcd process revokes it: this process still holds the cached lookup.
      await t.deps.store.apiKeys.revoke(a.id, k.id, Math.floor(t.clock.now() / 1000));
      t.clock.advance(29_000);
      assert.equal((await c.raw('GET', '/v1/tenant')).status, 200, 'still cached at 29 s');
      t.clock.advance(1_000);
      assert.equal((await c.raw('GET', '/v1/tenant')).status, 401, 'reloaded at 30 s');
    });

    test("creating a key drops the tenant's cached lookups", async () => {
      const a = await newTenant(t);
      const k = await a.client.createKey({ name: 'victim' });
      const c = t.client.withKey(k.api_key);
      assert.equal((await c.raw('GET', '/v1/tenant')).status, 200);
      await t.deps.store.apiKeys.revoke(a.id, k.id, Math.floor(t.clock.now() / 1000));
      assert.equal((await c.raw('GET', '/v1/tenant')).status, 200, 'cached');
      await a.client.createKey({ name: 'trigger' });
      assert.equal((await c.raw('GET', '/v1/tenant')).status, 401, 'cache dropped for the tenant');
    });

    test('last_used_at is written on first use and then at most every 5 minutes', async () => {
      const a = await newTenant(t);
      const k = await a.client.createKey({ name: 'usage' });
      const c = t.client.withKey(k.api_key);
      const stored = async () => (await t.deps.store.apiKeys.findForAuth(k.id))?.last_used_at;
      assert.equal(await stored(), null);
      const t0 = Math.floor(t.clock.now() / 1000);
      await c.tenant();
      assert.equal(await stored(), t0);
      t.clock.advance(299_000);
      await c.tenant();
      assert.equal(await stored(), t0, 'not rewritten within 5 minutes');
      t.clock.advance(1_000);
      await c.tenant();
      assert.equal(await stored(), t0 + 300);
      const listed = (await a.client.listKeys()).find((x) => x.id === k.id);
      assert.equal(listed?.last_used_at, t0 + 300);
    });

    test('recover (operator): a new key for the tenant with that email; unknown email is 404', async () => {
      const a = await newTenant(t, `recover-${kind}`);
      const h = { 'x-admin-token': ADMIN_TOKEN };
      const r = await limitedRaw<{ tenant_id: string; api_key: string }>(t, 'POST', '/v1/auth/recover', {
        body: { email: `RECOVER-${kind}@example.com` },
        headers: h,
      });
      assert.equal(r.status, 200);
      assert.equal(r.body.tenant_id, a.id);
      assert.equal((await t.client.withKey(r.body.api_key).tenant()).id, a.id);
      const missing = await limitedRaw(t, 'POST', '/v1/auth/recover', { body: { email: 'nobody@example.com' }, headers: h });
      assert.equal(missing.status, 404);
      const noAuth = await limitedRaw(t, 'POST', '/v1/auth/recover', { body: { email: `recover-${kind}@example.com` } });
      assert.equal(noAuth.status, 401);
    });
  });
});
