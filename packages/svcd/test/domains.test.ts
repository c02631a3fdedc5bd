// Custom domains' rules, on both stores, against a real DNS server (pebble-challtestsrv, whose
// TXT records the test sets): a claim is pending until its TXT record holds its token; the first
// tenant to prove a name takes it and others are refused; the checker (a periodic job) proves
// claims by itself, and unroutes a name whose record is gone at three checks in a row; quota,
// validation and tenant isolation. The engine is the inert one (no proxy): certificates and
// routing over HTTPS are tls.test.ts's.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { domainChallengeName, type Domain } from '@svc/contract';
import { DOMAIN_CHECK_EVERY_MS } from '../src/app.js';
import { CHECK_RUN_BUDGET_MS, DOMAIN_CHECKS, VERIFY_COOLDOWN_S } from '../src/domains/domains.js';
import { DnsTxtLookup, type TxtLookup } from '../src/domains/txt-records.js';
import type { JobLease } from '../src/jobs/periodic.js';
import { ADMIN_TOKEN, eachStore, newTenant, startServer, waitFor, type TestServer } from './harness.js';
import { inertRuntime } from './inert-runtime.js';
import { startDns, type TestDns } from './pebble.js';

const IMAGE = 'svc-test/none:1';
const BASE = 'apps.example.test';

type Tenant = Awaited<ReturnType<typeof newTenant>>;

/** A service; its name gets the tenant's id (DNS labels are one namespace under the base domain). */
async function service(a: Tenant, name: string): Promise<string> {
  const r = await a.client.raw<{ id: string }>('POST', '/v1/services', { body: { name: `${name}-${a.id.slice(0, 8)}`, image: IMAGE } });
  assert.equal(r.status, 201, JSON.stringify(r.body));
  return r.body.id;
}

function addDomain(a: Tenant, serviceId: string, hostname: string) {
  return a.client.raw<Domain & { error: string }>('POST', `/v1/services/${serviceId}/domains`, { body: { hostname } });
}

let seq = 0;
/** A name no other test uses (the DNS server and the host namespace outlive each test). */
const fresh = (stem: string) => `${stem}-${process.pid}-${++seq}.customer.example`;

eachStore((kind) => {
  describe(`custom domains (${kind})`, () => {
    let t: TestServer;
    let dns: TestDns;

    before(async () => {
      dns = await startDns();
      t = await startServer({ store: kind, config: { baseDomain: BASE, dnsServers: [dns.server], adminTokens: [ADMIN_TOKEN] }, overrides: { runtime: inertRuntime() } });
    });
    after(async () => {
      await t.close();
      await dns.stop();
    });

    test('a claim is pending until its TXT record holds the token; then it is active, and the activity says so', async () => {
      const a = await newTenant(t);
      const s = await service(a, 'web');
      const hostname = fresh('shop');
      const added = await addDomain(a, s, `${hostname.toUpperCase()}.`);
      assert.equal(added.status, 201, JSON.stringify(added.body));
      const d = added.body;
      assert.equal(d.hostname, hostname, 'lower case, no trailing dot');
      assert.equal(d.status, 'pending_verification');
      assert.equal(d.verification.type, 'dns_txt');
      assert.equal(d.verification.name, `_svc-challenge.${hostname}`);
      assert.match(d.verification.value, /^[0-9a-f]{32}$/);
      assert.equal(d.url, null);

      // No record: still pending, and the error says what is missing.
      let v = await a.client.verifyDomain(s, d.id);
      assert.equal(v.status, 'pending_verification');
      assert.match(v.last_error ?? '', /no TXT record _svc-challenge\./);
      // A record with another value: not proof. (A verify within 10 s of the last check answers that check.)
      await dns.setTxt(d.verification.name, 'someone-else');
      assert.match((await a.client.verifyDomain(s, d.id)).last_error ?? '', /no TXT record/, 'checked again at once');
      t.clock.advance(VERIFY_COOLDOWN_S * 1000);
      v = await a.client.verifyDomain(s, d.id);
      assert.equal(v.status, 'pending_verification');
      assert.match(v.last_error ?? '', /does not hold this domain's verification value/);
      // The token: proven, active at once (no certificates without --tls).
      await dns.setTxt(d.verification.name, d.verification.value);
      t.clock.advance(VERIFY_COOLDOWN_S * 1000);
      v = await a.client.verifyDomain(s, d.id);
      assert.equal(v.status, 'active', JSON.stringify(v));
      assert.equal(v.last_error, null);
      assert.ok(v.verified_at !== null);
      assert.deepEqual((await a.client.listDomains(s)).map((x) => [x.id, x.status]), [[d.id, 'active']]);
      const actions = (await a.client.activity({ resource_type: 'domain' })).map((e) => e.action);
      assert.deepEqual([...actions].sort(), ['domain.added', 'domain.verified']);

      // Operators see domains by status, and certificates that should have been renewed. A scrape
      // answers the figures of the read the one before started (it never waits for the store).
      const gauge = (re: RegExp, ok: (n: number) => boolean) =>
        waitFor(re.source, async () => {
          const n = Number(re.exec(await t.deps.metrics.registry.metrics())?.[1] ?? NaN);
          return ok(n) ? n : undefined;
        });
      await gauge(/^svc_domains\{status="active"\} (\d+)$/m, (n) => n >= 1);
      const expiring = await gauge(/^svc_domain_certificates_expiring_within_week (\d+)$/m, (n) => n >= 0);
      const row = await t.deps.store.serviceDomains.byId(d.id);
      assert.ok(row);
      await t.deps.store.serviceDomains.update(row, { certificate_expires_at: Math.floor(t.clock.now() / 1000) + 24 * 3600 });
      await gauge(/^svc_domain_certificates_expiring_within_week (\d+)$/m, (n) => n === expiring + 1);
    });

    test('the first tenant to prove a name takes it; the other claim fails, new claims are refused, and removal frees it', async () => {
      const a = await newTenant(t);
      const b = await newTenant(t);
      const c = await newTenant(t);
      const [sa, sb, sc] = [await service(a, 'a'), await service(b, 'b'), await service(c, 'c')];
      const hostname = fresh('contested');
      // Unproven claims do not block each other.
      const da = (await addDomain(a, sa, hostname)).body;
      const db = await addDomain(b, sb, hostname);
      assert.equal(db.status, 201, JSON.stringify(db.body));
      await dns.setTxt(`_svc-challenge.${hostname}`, db.body.verification.value);
      assert.equal((await b.client.verifyDomain(sb, db.body.id)).status, 'active');
      // A's record appears later: too late.
      await dns.setTxt(`_svc-challenge.${hostname}`, da.verification.value);
      const lost = await a.client.verifyDomain(sa, da.id);
      assert.equal(lost.status, 'failed');
      assert.match(lost.last_error ?? '', /in use by another service/);
      const refused = await addDomain(c, sc, hostname);
      assert.equal(refused.status, 409);
      assert.match(refused.body.error, /in use by another service/);
      // The same tenant adding it twice: 409 too (to another of its services as well).
      const twice = await addDomain(b, await service(b, 'b2'), hostname);
      assert.equal(twice.status, 409);
      assert.match(twice.body.error, /added already/);
      // Removed by its owner: free again, and another tenant proves it.
      await b.client.removeDomain(sb, db.body.id);
      const dc = await addDomain(c, sc, hostname);
      assert.equal(dc.status, 201, JSON.stringify(dc.body));
      await dns.setTxt(`_svc-challenge.${hostname}`, dc.body.verification.value);
      assert.equal((await c.client.verifyDomain(sc, dc.body.id)).status, 'active');
      // Deleting the service frees its names too (B's claim was removed above).
      assert.equal((await c.client.raw('DELETE', `/v1/services/${sc}`)).status, 204);
      assert.equal((await addDomain(b, await service(b, 'b3'), hostname)).status, 201);
    });

    test("svc's own names, wildcards and addresses are refused with 400; a missing or another tenant's service or domain is one 404", async () => {
      const a = await newTenant(t);
      const b = await newTenant(t);
      const s = await service(a, 'site');
      for (const bad of [`x.${BASE}`, BASE, '*.example.com', '10.0.0.1', 'x.localhost', 'nodots', 'shop.example.com:443']) {
        const r = await addDomain(a, s, bad);
        assert.equal(r.status, 400, `${bad}: ${JSON.stringify(r.body)}`);
        assert.ok(r.body.error.length > 0);
      }
      const d = (await addDomain(a, s, fresh('mine'))).body;
      const notFound = await b.client.raw<{ error: string }>('GET', `/v1/services/${s}/domains/${d.id}`);
      const missing = await b.client.raw<{ error: string }>('GET', `/v1/services/${s}/domains/nope`);
      assert.equal(notFound.status, 404);
      assert.equal(missing.status, 404);
      assert.deepEqual(notFound.body.error, missing.body.error);
      for (const [method, path, body] of [
        ['GET', `/v1/services/${s}/domains`, undefined],
        ['POST', `/v1/services/${s}/domains`, { hostname: fresh('theirs') }],
        ['POST', `/v1/services/${s}/domains/${d.id}/verify`, undefined],
        ['DELETE', `/v1/services/${s}/domains/${d.id}`, undefined],
      ] as const) {
        assert.equal((await b.client.raw(method, path, body ? { body } : {})).status, 404, `${method} ${path}`);
      }
      // The owner still has it.
      assert.equal((await a.client.domain(s, d.id)).id, d.id);
      // A domain of one service is not found under another of the same tenant.
      assert.equal((await a.client.raw('GET', `/v1/services/${await service(a, 'other')}/domains/${d.id}`)).status, 404);
    });

    test('max_domains_per_service: 5 by default, the operator changes it, and the add past it is 409', async () => {
      const a = await newTenant(t);
      const s = await service(a, 'many');
      for (let i = 0; i < 5; i++) assert.equal((await addDomain(a, s, fresh(`n${i}`))).status, 201);
      const over = await addDomain(a, s, fresh('n5'));
      assert.equal(over.status, 409);
      assert.match(over.body.error, /quota exceeded.*maximum custom domains per service is 5/);
      const patched = await t.client.raw<{ max_domains_per_service: number }>('PATCH', `/v1/tenants/${a.id}/quotas`, { body: { max_domains_per_service: 6 }, headers: { 'x-admin-token': ADMIN_TOKEN } });
      assert.equal(patched.body.max_domains_per_service, 6);
      const sixth = await addDomain(a, s, fresh('n5'));
      assert.equal(sixth.status, 201, JSON.stringify(sixth.body));
      // Adds at the same moment are counted one after another: at 1, one of three gets in.
      const racer = await service(a, 'racer');
      await t.client.raw('PATCH', `/v1/tenants/${a.id}/quotas`, { body: { max_domains_per_service: 1 }, headers: { 'x-admin-token': ADMIN_TOKEN } });
      const raced = await Promise.all([0, 1, 2].map((i) => addDomain(a, racer, fresh(`race${i}`))));
      assert.deepEqual(raced.map((r) => r.status).sort(), [201, 409, 409]);
      await t.client.raw('PATCH', `/v1/tenants/${a.id}/quotas`, { body: { max_domains_per_service: 6 }, headers: { 'x-admin-token': ADMIN_TOKEN } });
      // Another service has its own count.
      assert.equal((await addDomain(a, await service(a, 'few'), fresh('other'))).status, 201);
    });

    test('the checker proves a claim by itself, and unroutes a name whose record is gone at three checks 6 hours or more apart', async () => {
      const a = await newTenant(t);
      const b = await newTenant(t);
      const s = await service(a, 'watched');
      const hostname = fresh('watched');
      const d = (await addDomain(a, s, hostname)).body;
      await dns.setTxt(d.verification.name, d.verification.value);
      t.clock.advance(DOMAIN_CHECK_EVERY_MS);
      await waitFor('the checker proves it', async () => ((await a.client.domain(s, d.id)).status === 'active' ? true : undefined));

      await dns.clearTxt(d.verification.name);
      // A miss counts once per 6 hours, however often the name is checked (a name server may lag
      // behind a record just made; a name without its certificate is checked every minute).
      for (let i = 0; i < 2; i++) {
        t.clock.advance(VERIFY_COOLDOWN_S * 1000);
        assert.match((await a.client.verifyDomain(s, d.id)).last_error ?? '', /check 1 of 3/);
      }
      for (let miss = 2; miss < DOMAIN_CHECKS.recordMissesAllowed; miss++) {
        t.clock.advance(DOMAIN_CHECKS.active * 1000);
        const seen = await waitFor(`check ${miss}`, async () => {
          const x = await a.client.domain(s, d.id);
          return x.last_error?.includes(`check ${miss} of`) ? x : undefined;
        });
        assert.equal(seen.status, 'active', 'still routed after a miss');
      }
      // Another tenant cannot take it while it is proven.
      assert.equal((await addDomain(b, await service(b, 'b'), hostname)).status, 409);
      t.clock.advance(DOMAIN_CHECKS.active * 1000);
      const gone = await waitFor('unrouted', async () => {
        const x = await a.client.domain(s, d.id);
        return x.status === 'failed' ? x : undefined;
      });
      assert.equal(gone.verified_at, null);
      assert.match(gone.last_error ?? '', /no longer proven/);
      assert.ok((await a.client.activity({ action: 'domain.unverified' })).length === 1);
      // Free for whoever proves it now.
      assert.equal((await addDomain(b, await service(b, 'b2'), hostname)).status, 201);
    });

    test('a proof that commits while its service is deleted leaves no name behind (the row is locked first)', { skip: kind !== 'postgres' && 'SQLite runs one write transaction at a time' }, async () => {
      const a = await newTenant(t);
      const s = await service(a, 'racing');
      const hostname = fresh('racing');
      const d = (await addDomain(a, s, hostname)).body;
      const seen = await t.deps.store.serviceDomains.byId(d.id);
      assert.ok(seen);
      const now = Math.floor(t.clock.now() / 1000);
      const racer: { deleting?: Promise<boolean> } = {};
      // A proof as domains.ts makes it: the row, then (while a delete of the service waits on the
      // row) the name.
      await t.deps.store.transaction(async (tx) => {
        assert.ok(await tx.serviceDomains.update(seen, { status: 'active', verified_at: now, next_check_at: now + 60 }));
        racer.deleting = t.deps.store.services.delete(a.id, s, Math.floor(t.clock.now() / 1000));
        await new Promise((r) => setTimeout(r, 300));
        await tx.hostNames.claim({ hostname, tenant_id: a.id, kind: 'domain', resource_id: d.id, created_at: now });
      });
      assert.equal(await racer.deleting, true);
      assert.equal(await t.deps.store.hostNames.find(hostname), undefined, 'the name outlived its claim');
      assert.equal(await t.deps.store.serviceDomains.byId(d.id), undefined);
    });

    // Last: it stops the DNS server.
    test('lookups that fail (the DNS server is down) are no evidence: a proven name stays routed, and a claim says why it waits', async () => {
      const a = await newTenant(t);
      const s = await service(a, 'steady');
      const d = (await addDomain(a, s, fresh('steady'))).body;
      await dns.setTxt(d.verification.name, d.verification.value);
      assert.equal((await a.client.verifyDomain(s, d.id)).status, 'active');
      const pending = (await addDomain(a, s, fresh('waiting'))).body;
      await dns.stop();
      for (let check = 1; check <= DOMAIN_CHECKS.recordMissesAllowed + 1; check++) {
        t.clock.advance(DOMAIN_CHECKS.active * 1000);
        await waitFor(`check ${check}`, async () => {
          const x = await a.client.domain(s, d.id);
          return x.last_error?.includes('DNS lookup') && x.checked_at === Math.floor(t.clock.now() / 1000) ? x : undefined;
        });
      }
      const kept = await a.client.domain(s, d.id);
      assert.equal(kept.status, 'active', JSON.stringify(kept));
      assert.notEqual(kept.verified_at, null);
      // Still routed, and still its name.
      assert.ok((await t.deps.store.serviceDomains.routed()).some((r) => r.hostname === kept.hostname));
      assert.equal((await t.deps.store.hostNames.find(kept.hostname))?.resource_id, d.id);
      t.clock.advance(VERIFY_COOLDOWN_S * 1000);
      const waiting = await a.client.verifyDomain(s, pending.id);
      assert.equal(waiting.status, 'pending_verification');
      assert.match(waiting.last_error ?? '', /the DNS lookup of _svc-challenge\.\S+ failed \(/);
    });
  });

  describe(`the domain checker between tenants (${kind})`, () => {
    let t: TestServer;
    let dns: TestDns;
    /** The names looked up, in the order their lookups began. */
    const begun: string[] = [];
    let slowAtOnce = 0;
    let slowMost = 0;
    /** When set, the slow lookups wait for it instead of 300 ms. */
    let gate: Promise<void> | null = null;
    /** The checker's runs are called here (its schedule is tested above): a lease that holds. */
    const lease: JobLease = { signal: new AbortController().signal, assertHeld: () => Promise.resolve() };

    before(async () => {
      dns = await startDns();
      const real = new DnsTxtLookup([dns.server]);
      // One tenant's name servers are slow (the "slow-" names): each of its lookups takes 300 ms
      // more, the others are answered by the test's DNS server as they come.
      const txtLookup: TxtLookup = {
        async lookup(name) {
          begun.push(name);
          if (!name.includes('.slow-')) return real.lookup(name);
          slowMost = Math.max(slowMost, ++slowAtOnce);
          try {
            await (gate ?? new Promise((r) => setTimeout(r, 300)));
            return await real.lookup(name);
          } finally {
            slowAtOnce--;
          }
        },
      };
      t = await startServer({ store: kind, config: { baseDomain: BASE, dnsServers: [dns.server] }, overrides: { runtime: inertRuntime(), txtLookup, domainCheckEveryMs: 24 * 3_600_000 } });
    });
    after(async () => {
      await t.close();
      await dns.stop();
    });

    test("a tenant with many slow checks has one at a time; another tenant's claim, due later, is taken in the same batch and checked at once", async () => {
      const slow = await newTenant(t);
      const quick = await newTenant(t);
      const slowService = await service(slow, 'slow');
      for (let i = 0; i < 4; i++) assert.equal((await addDomain(slow, slowService, fresh('slow'))).status, 201);
      t.clock.advance(1_000);
      const q = (await addDomain(quick, await service(quick, 'quick'), fresh('quick'))).body;
      await dns.setTxt(q.verification.name, q.verification.value);

      // The batch: each tenant's most overdue claim before anyone's second.
      const batch = await t.deps.store.serviceDomains.due(Math.floor(t.clock.now() / 1000), 2);
      assert.deepEqual(batch.map((r) => r.tenant_id), [slow.id, quick.id]);

      begun.length = 0;
      await t.deps.domains.checkDue(lease);
      assert.equal((await quick.client.domain(q.service_id, q.id)).status, 'active');
      assert.equal(begun.filter((n) => n.includes('.slow-')).length, 4);
      assert.equal(begun.findIndex((n) => n.includes('.quick-')), 1, `the quick claim waited for the slow ones: ${begun.join(' ')}`);
      assert.equal(slowMost, 1, 'one check at a time for a tenant');
    });

    test("past its time budget a run starts only first checks of tenants it has not checked; a tenant's second claim waits for the next run", async () => {
      // Five tenants with slow name servers, the first with two claims: four checks hold the
      // four workers while the budget passes; the fifth tenant's claim still waits its turn.
      const services: Array<{ tenant: Tenant; serviceId: string }> = [];
      for (let i = 0; i < 5; i++) {
        const tenant = await newTenant(t);
        services.push({ tenant, serviceId: await service(tenant, `budget${i}`) });
      }
      // Registering moved the clock on: the last test's claims are due again; checked now, they
      // are not due in this test's run.
      await t.deps.domains.checkDue(lease);
      const names: string[][] = [];
      for (const [i, { tenant, serviceId }] of services.entries()) {
        const own: string[] = [];
        for (let j = 0; j < (i === 0 ? 2 : 1); j++) own.push(domainChallengeName((await addDomain(tenant, serviceId, fresh('slow'))).body.hostname));
        names.push(own);
      }
      // How many of a tenant's claims the lookups began for; tenants with a check begun.
      const beganOf = (own: string[]) => own.filter((n) => begun.includes(n)).length;
      const tenantsBegun = () => names.filter((own) => beganOf(own) > 0).length;
      let open!: () => void;
      gate = new Promise((resolve) => (open = resolve));
      let run: Promise<void>;
      try {
        run = t.deps.domains.checkDue(lease);
        await waitFor('four checks begun', () => Promise.resolve(tenantsBegun() === 4));
        await new Promise((r) => setTimeout(r, 100));
        assert.equal(tenantsBegun(), 4, 'the fifth tenant waits for a worker');
        // The budget passes while they wait on the slow name servers.
        t.clock.advance(CHECK_RUN_BUDGET_MS);
      } finally {
        gate = null;
        open();
      }
      await run;
      assert.equal(tenantsBegun(), 5, "a tenant's first check is started past the budget");
      assert.equal(beganOf(names[0] ?? []), 1, "a tenant's second is not");
      await t.deps.domains.checkDue(lease);
      assert.equal(beganOf(names[0] ?? []), 2, 'the next run takes it');
    });
  });
});
