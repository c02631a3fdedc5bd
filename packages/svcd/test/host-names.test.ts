// Host names are one namespace: a service's DNS label (<label>.<base>) and a preview's host
// (<name>-<environmentID>.<base>) are reserved in one table under a unique key, in the
// transaction that creates them, whichever tenant asks; deleting the service, the preview or the
// environment frees them. The engine is the inert one: this is about records, not containers.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { eachStore, newTenant, startServer, type TestServer } from './harness.js';
import { inertRuntime } from './inert-runtime.js';

const IMAGE = 'svc-test/none:1';
const BASE = 'apps.example.test';

type Tenant = Awaited<ReturnType<typeof newTenant>>;

async function environment(a: Tenant, name: string, leaseSeconds?: number): Promise<string> {
  const r = await a.client.raw<{ id: string }>('POST', '/v1/environments', { body: { name, template_id: 'default', lease_duration_seconds: leaseSeconds } });
  assert.equal(r.status, 201, JSON.stringify(r.body));
  return r.body.id;
}

function createService(a: Tenant, name: string) {
  return a.client.raw<{ id: string; dns_label: string; error: string }>('POST', '/v1/services', { body: { name, image: IMAGE } });
}

function createPreview(a: Tenant, envId: string, name: string) {
  return a.client.raw<{ id: string; url: string | null; error: string }>('POST', `/v1/environments/${envId}/previews`, { body: { name, port: 3000 } });
}

eachStore((kind) => {
  describe(`host names, one namespace (${kind}, --base-domain ${BASE})`, () => {
    let t: TestServer;

    before(async () => {
      t = await startServer({ store: kind, config: { baseDomain: BASE, proxyListen: '127.0.0.1:1' }, overrides: { runtime: inertRuntime() } });
    });
    after(async () => {
      await t.close();
    });

    test("a service whose label is another tenant's preview host is refused with 409", async () => {
      const a = await newTenant(t);
      const b = await newTenant(t);
      const envId = await environment(a, 'dev');
      const preview = await createPreview(a, envId, 'web');
      assert.equal(preview.status, 201, JSON.stringify(preview.body));
      assert.equal(preview.body.url, `http://web-${envId}.${BASE}:1`);
      const taken = await createService(b, `web-${envId}`);
      assert.equal(taken.status, 409, `the service took the preview's host: ${JSON.stringify(taken.body)}`);
      assert.match(taken.body.error, new RegExp(`DNS label "web-${envId}" is taken`));
      // The same name with other punctuation or case makes the same label.
      assert.equal((await createService(b, `WEB.${envId}`)).status, 409);
    });

    test("a preview whose host is another tenant's service label is refused with 409", async () => {
      const a = await newTenant(t);
      const b = await newTenant(t);
      const envId = await environment(a, 'dev');
      const service = await createService(b, `site-${envId}`);
      assert.equal(service.status, 201, JSON.stringify(service.body));
      const taken = await createPreview(a, envId, 'site');
      assert.equal(taken.status, 409, `the preview took the service's host: ${JSON.stringify(taken.body)}`);
      assert.match(taken.body.error, new RegExp(`host name "site-${envId}" is taken`));
      assert.equal((await createPreview(a, envId, 'SITE')).status, 409, 'host names ignore case');
      assert.equal((await a.client.raw<unknown[]>('GET', `/v1/environments/${envId}/previews`)).body.length, 0, 'a refused preview leaves nothing behind');
    });

    test('ten tenants creating one label at once: exactly one gets it', async () => {
      const tenants = await Promise.all(Array.from({ length: 10 }, () => newTenant(t)));
      const spellings = ['race-label', 'Race Label', 'race.label', 'RACE_LABEL', 'race--label'];
      const answers = await Promise.all(tenants.map((a, i) => createService(a, spellings[i % spellings.length]!)));
      const statuses = answers.map((r) => r.status).sort();
      assert.deepEqual(statuses, [201, ...Array<number>(9).fill(409)], `statuses: ${statuses.join(', ')}`);
      const winner = answers.find((r) => r.status === 201)!;
      assert.equal(winner.body.dns_label, 'race-label');
    });

    test('deleting a service, a preview or an environment frees its host', async () => {
      const a = await newTenant(t);
      const b = await newTenant(t);
      const envId = await environment(a, 'dev');

      // Service deleted: its label can become a preview host.
      const s = await createService(b, `app1-${envId}`);
      assert.equal(s.status, 201);
      assert.equal((await createPreview(a, envId, 'app1')).status, 409);
      assert.equal((await b.client.raw('DELETE', `/v1/services/${s.body.id}`)).status, 204);
      const p = await createPreview(a, envId, 'app1');
      assert.equal(p.status, 201, JSON.stringify(p.body));

      // Preview deleted: its host can become a service label.
      assert.equal((await createService(b, `app1-${envId}`)).status, 409);
      assert.equal((await a.client.raw('DELETE', `/v1/environments/${envId}/previews/${p.body.id}`)).status, 204);
      assert.equal((await createService(b, `app1-${envId}`)).status, 201);

      // Environment deleted: its previews' hosts go with it.
      assert.equal((await createPreview(a, envId, 'app2')).status, 201);
      assert.equal((await createService(b, `app2-${envId}`)).status, 409);
      assert.equal((await a.client.raw('DELETE', `/v1/environments/${envId}`)).status, 204);
      assert.equal((await createService(b, `app2-${envId}`)).status, 201);
    });

    test("an expired environment's removal frees its previews' hosts", async () => {
      const a = await newTenant(t);
      const b = await newTenant(t);
      const envId = await environment(a, 'short', 1);
      assert.equal((await createPreview(a, envId, 'shop')).status, 201);
      t.clock.advance(2_000);
      await t.deps.environments.reap();
      assert.equal((await createService(b, `shop-${envId}`)).status, 409, 'an expired environment keeps its previews');
      t.clock.advance(25 * 3600 * 1000);
      await t.deps.environments.reap();
      assert.equal((await a.client.raw('GET', `/v1/environments/${envId}`)).status, 404);
      assert.equal((await createService(b, `shop-${envId}`)).status, 201);
    });

    test('reserved labels are refused for services', async () => {
      const a = await newTenant(t);
      const r = await createService(a, 'Admin');
      assert.equal(r.status, 409);
      assert.match(r.body.error, /DNS label "admin" is reserved/);
    });
  });

  describe(`host names without a base domain (${kind})`, () => {
    let t: TestServer;

    before(async () => {
      t = await startServer({ store: kind, overrides: { runtime: inertRuntime() } });
    });
    after(async () => {
      await t.close();
    });

    test("labels route nothing without a base domain: another tenant's service name is neither refused nor revealed", async () => {
      const a = await newTenant(t);
      const b = await newTenant(t);
      assert.equal((await createService(a, 'Storefront')).status, 201);
      assert.equal((await createService(b, 'storefront')).status, 201, 'a 409 would tell B that some tenant has a service of that name');
      assert.equal((await createService(b, 'api')).status, 201, 'reserved labels name hosts under the base domain only');
    });
  });
});
