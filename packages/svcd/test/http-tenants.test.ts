import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { ADMIN_TOKEN, eachStore, limitedRaw, newTenant, registerRaw, startServer, tenantRow, type TestServer } from './harness.js';

eachStore((kind) => {
  describe(`tenants over HTTP (${kind})`, () => {
    let t: TestServer;
    const suspended: string[] = [];
    before(async () => {
      t = await startServer({
        store: kind,
        config: { adminTokens: [ADMIN_TOKEN] },
        overrides: {
          tenantResources: [{ count: async () => ({}), suspend: async (id) => void suspended.push(id) }],
        },
      });
      t.client.adminToken = ADMIN_TOKEN;
    });
    after(() => t.close());

    test('register returns 201 with a hex tenant id and a <keyID>.<secret> key that works', async () => {
      const r = await registerRaw<{ tenant_id: string; api_key: string }>(t, { name: 'Acme Corp', email: 'ops@acme.io' });
      assert.equal(r.status, 201);
      assert.match(r.body.tenant_id, /^[0-9a-f]{32}$/);
      assert.match(r.body.api_key, /^[0-9a-f]{16}\.[A-Za-z0-9_-]{43}$/);
      const me = await t.client.withKey(r.body.api_key).tenant();
      assert.deepEqual(
        { id: me.id, name: me.name, email: me.email, status: me.status },
        { id: r.body.tenant_id, name: 'Acme Corp', email: 'ops@acme.io', status: 'active' },
      );
      assert.equal(typeof me.created_at, 'number');
      assert.equal(me.created_at, Math.floor(t.clock.now() / 1000));
    });

    test('register validates name length (2-128) and the email pattern and length (256)', async () => {
      const cases: Array<[unknown, RegExp]> = [
        [{ name: 'a', email: 'a@b.io' }, /name/],
        [{ name: 'x'.repeat(129), email: 'a@b.io' }, /name/],
        [{ name: 'okname', email: 'not-an-email' }, /email/],
        [{ name: 'okname', email: 'a@b.c' }, /email/],
        [{ name: 'okname', email: `${'a'.repeat(250)}@b.io.io` }, /email/],
        [{ name: 'okname' }, /email is required/],
        [{ name: 42, email: 'a@b.io' }, /name/],
      ];
      for (const [body, msg] of cases) {
        const r = await registerRaw<{ error: string }>(t, body);
        assert.equal(r.status, 400, JSON.stringify(body));
        assert.match(r.body.error, msg);
      }
      assert.equal((await registerRaw(t, { name: 'ab', email: 'ab@x.io' })).status, 201);
      const long = 'n'.repeat(128);
      assert.equal((await registerRaw(t, { name: long, email: 'long@x.io' })).status, 201);
    });

    test('an email of exactly 256 characters registers and is kept whole; 257 is 400', async () => {
      // Both match the spec's pattern, so only the length (spec 2 and 8: max 256) tells them apart.
      const domain = '@example.com';
      const at256 = `${'e'.repeat(256 - domain.length)}${domain}`;
      assert.equal(at256.length, 256);
      const ok = await registerRaw<{ tenant_id: string; api_key: string }>(t, { name: 'email-256', email: at256 });
      assert.equal(ok.status, 201, ok.text);
      assert.equal((await t.client.withKey(ok.body.api_key).tenant()).email, at256);
      const over = await registerRaw<{ error: string }>(t, { name: 'email-257', email: `f${at256}` });
      assert.equal(over.status, 400, over.text);
      assert.match(over.body.error, /email/);
    });

    test('duplicate name or email (any case) gives 422 with one vague message', async () => {
      assert.equal((await registerRaw(t, { name: 'dupname', email: 'dup1@x.io' })).status, 201);
      const byName = await registerRaw<{ error: string }>(t, { name: 'DupName', email: 'dup2@x.io' });
      const byEmail = await registerRaw<{ error: string }>(t, { name: 'other-dup', email: 'DUP1@x.io' });
      assert.equal(byName.status, 422);
      assert.equal(byEmail.status, 422);
      assert.equal(byName.body.error, byEmail.body.error, 'the message does not tell which field collided');
      assert.doesNotMatch(byName.body.error, /dupname|dup1/i);
    });

    test('GET/PATCH /v1/tenant: only the name changes; email is refused; conflicts are 409', async () => {
      const a = await newTenant(t);
      const b = await newTenant(t);
      t.clock.advance(5_000);
      const renamed = await a.client.renameTenant('renamed-tenant');
      assert.equal(renamed.name, 'renamed-tenant');
      assert.ok(renamed.updated_at > renamed.created_at);
      const withEmail = await a.client.raw<{ error: string }>('PATCH', '/v1/tenant', { body: { name: 'x-name', email: 'new@x.io' } });
      assert.equal(withEmail.status, 400);
      assert.match(withEmail.body.error, /email/);
      assert.equal((await a.client.tenant()).name, 'renamed-tenant', 'a refused patch changes nothing');
      assert.equal((await a.client.raw('PATCH', '/v1/tenant', { body: { name: 'z' } })).status, 400);
      const taken = await b.client.raw<{ error: string }>('PATCH', '/v1/tenant', { body: { name: 'RENAMED-tenant' } });
      assert.equal(taken.status, 409);
    });

    test('GET /v1/tenant: changes through svcd show at once; a change by another process within 1 s', async () => {
      const a = await newTenant(t);
      const me = await a.client.tenant(); // now held in memory
      await a.client.renameTenant('cached-renamed');
      assert.equal((await a.client.tenant()).name, 'cached-renamed');
      t.clock.advance(2_000);
      await t.client.patchQuotas(me.id, { max_services: 7 });
      assert.equal((await a.client.tenant()).updated_at, Math.floor(t.clock.now() / 1000), 'a quota change moves updated_at');

      // Another svcd process on the same store renames the tenant: this one sees it within 1 s.
      await t.deps.store.tenants.rename(me.id, 'elsewhere', 'elsewhere', Math.floor(t.clock.now() / 1000));
      assert.equal((await a.client.tenant()).name, 'cached-renamed');
      t.clock.advance(1_000);
      assert.equal((await a.client.tenant()).name, 'elsewhere');
    });

    test('DELETE /v1/tenant suspends: keys stop at once, workloads are stopped, reactivation gives a new key', async () => {
      const a = await newTenant(t);
      const spare = await a.client.createKey({ name: 'spare' });
      const r = await a.client.suspendTenant();
      assert.equal(r.status, 'suspended');
      assert.deepEqual(suspended.slice(-1), [a.id]);
      assert.equal((await a.client.raw('GET', '/v1/tenant')).status, 401);
      assert.equal((await a.client.withKey(spare.api_key).raw('GET', '/v1/tenant')).status, 401);

      const re = await t.client.reactivateTenant(a.id);
      assert.equal(re.status, 'active');
      assert.equal(re.tenant_id, a.id);
      assert.equal((await t.client.withKey(re.api_key).tenant()).status, 'active');
      const again = await limitedRaw<{ error: string }>(t, 'POST', `/v1/tenants/${a.id}/reactivate`, { headers: { 'x-admin-token': ADMIN_TOKEN } });
      assert.equal(again.status, 409);
      const missing = await limitedRaw(t, 'POST', '/v1/tenants/ffff/reactivate', { headers: { 'x-admin-token': ADMIN_TOKEN } });
      assert.equal(missing.status, 404);
      const actions = (await t.client.withKey(re.api_key).activity()).map((e) => e.action);
      assert.ok(actions.includes('tenant.suspended') && actions.includes('tenant.reactivated'));
    });

    test('usage reports counts and the default quota', async () => {
      const a = await newTenant(t);
      await a.client.createKey();
      assert.deepEqual(await a.client.usage(), {
        services: { used: 0, max: 5 },
        databases: { used: 0, max: 3 },
        api_keys: { used: 2, max: 20 },
        environments: { used: 0, max: 2 },
        memory_mb: 2048,
        cpu_cores: 2,
        disk_gb: 20,
        disk_used_bytes: 0,
        disk_measured_at: null,
        rate_limit: 100,
      });
    });

    test('quota patch: integers within caps and at least 1; returns the quota record', async () => {
      const a = await newTenant(t);
      const rec = await t.client.patchQuotas(a.id, { max_services: 100, max_databases: 50, max_builds_concurrent: 10, max_env_vars_per_service: 500 });
      assert.deepEqual(rec, {
        tenant_id: a.id,
        max_services: 100,
        max_databases: 50,
        max_builds_concurrent: 10,
        max_env_vars_per_service: 500,
        max_environments: 2,
        max_memory_mb: 2048,
        max_cpu_cores: 2,
        max_disk_gb: 20,
        max_domains_per_service: 5,
        api_rate_limit: 100,
      });
      assert.equal((await a.client.usage()).services.max, 100);
      const bad: unknown[] = [
        { max_services: 101 },
        { max_databases: 51 },
        { max_builds_concurrent: 11 },
        { max_env_vars_per_service: 501 },
        { max_services: 0 },
        { max_services: '5' },
        { max_services: 2.5 },
        { max_memory_mb: 4096 },
        {},
      ];
      const h = { 'x-admin-token': ADMIN_TOKEN };
      for (const body of bad) {
        const r = await limitedRaw<{ error: string }>(t, 'PATCH', `/v1/tenants/${a.id}/quotas`, { body, headers: h });
        assert.equal(r.status, 400, JSON.stringify(body));
        assert.equal(typeof r.body.error, 'string');
      }
      assert.equal((await a.client.usage()).services.max, 100, 'refused patches changed nothing');
      assert.equal((await limitedRaw(t, 'PATCH', '/v1/tenants/nope/quotas', { body: { max_services: 2 }, headers: h })).status, 404);
    });

    test('at most 1000 active tenants; suspended ones do not count', async () => {
      const fresh = await startServer({ store: kind });
      try {
        await fresh.deps.store.transaction(async (tx) => {
          for (let i = 0; i < 999; i++) {
            await tx.tenants.insert(tenantRow(`seed${i}`, `seed${i}`));
          }
        });
        const last = await registerRaw(fresh, { name: 'number-1000', email: 'n1000@x.io' });
        assert.equal(last.status, 201);
        const over = await registerRaw<{ error: string }>(fresh, { name: 'number-1001', email: 'n1001@x.io' });
        assert.equal(over.status, 503);
        assert.match(over.body.error, /1000 active tenants/);
        await fresh.deps.store.tenants.transitionStatus('seed0', 'active', 'suspended', 2);
        const now = await registerRaw(fresh, { name: 'number-1001', email: 'n1001@x.io' });
        assert.equal(now.status, 201);
      } finally {
        await fresh.close();
      }
    });
  });
});
