// One order per name among svcd sharing certificate storage (issue 22, item 3): Caddy's question
// "may I order a certificate for this name?" (tls-ask.ts) is answered yes by one svcd at a time,
// through a claim in the store; the others wait until the certificate is in the shared storage.
// Two answering servers stand for two svcd, each with its own store handle on one database, on
// both stores; certificates are made with openssl where Caddy would write them.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { readFileSync } from 'node:fs';
import { after, before, beforeEach, describe, test } from 'node:test';
import { writeFile } from 'node:fs/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import pino from 'pino';
import { systemTimers } from '../src/clock.js';
import { CertificateOrders } from '../src/domains/certificate-orders.js';
import { ASK_WAITING_MAX, ASK_WAIT_MS, needsNoRenewal, storageId, TlsAskServer } from '../src/proxy/tls-ask.js';
import { openStore, type Store } from '../src/store/index.js';
import { eachStore, storeLocation } from './harness.js';

/**
 * An answer "at once", as against one that waited (up to ASK_WAIT_MS, 7 s) for a certificate
 * stored STORED_AFTER_MS after the claim: loose enough for a store write on a loaded CI machine,
 * and the certificate stored early enough to leave most of the wait.
 */
const AT_ONCE_MS = 2_500;
const STORED_AFTER_MS = 1_000;

const NAME = 'web-1.apps.example.com';
const ISSUER = 'acme.example-dir';

/** Writes a certificate for `name` as Caddy's file storage holds it, valid from now for 90 days. */
function storeCertificate(storageDir: string, name: string): void {
  const dir = join(storageDir, 'certificates', ISSUER, name);
  mkdirSync(dir, { recursive: true });
  const base = join(dir, name);
  execFileSync('openssl', ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-keyout', `${base}.key`, '-out', `${base}.crt`, '-subj', `/CN=${name}`, '-days', '90'], { stdio: 'ignore' });
  writeFileSync(`${base}.json`, JSON.stringify({ sans: [name] }));
}

/** One question: its status, how long it took, and when the answer came (`at`, epoch ms). */
async function ask(url: string, domain: string): Promise<{ status: number; ms: number; at: number }> {
  const started = Date.now();
  const res = await fetch(`${url}?domain=${encodeURIComponent(domain)}`);
  const at = Date.now();
  return { status: res.status, ms: at - started, at };
}

test('a stored certificate needs no renewal until the last share of its lifetime', () => {
  const day = 86_400;
  const now = 1_800_000_000;
  assert.equal(needsNoRenewal({ validFrom: now - 10 * day, validTo: now + 80 * day }, now * 1000), true);
  assert.equal(needsNoRenewal({ validFrom: now - 60 * day, validTo: now + 30 * day }, now * 1000), false, 'in the renewal window');
  assert.equal(needsNoRenewal({ validFrom: now - 90 * day, validTo: now - day }, now * 1000), false, 'expired');
  assert.equal(needsNoRenewal(null, now * 1000), false);
});

test('svcd that start at the same moment on a new storage agree on its id, none reading it half-written', async () => {
  // A write that takes its time between creating the file and filling it (a loaded machine: seen
  // in make test, where a second svcd read the first one's file empty and did not start).
  const slowWrite = async (path: string, data: string, o: { flag: 'wx'; mode: number }) => {
    await writeFile(path, '', o);
    await sleep(20);
    await writeFile(path, data);
  };
  for (let round = 0; round < 5; round++) {
    const dir = mkdtempSync(join(tmpdir(), 'svc-storage-id-'));
    try {
      const ids = await Promise.all(Array.from({ length: 8 }, () => storageId(dir, slowWrite)));
      assert.match(ids[0] ?? '', /^[0-9a-f]{16}$/);
      assert.equal(new Set(ids).size, 1, `one id: ${ids.join(' ')}`);
      assert.deepEqual(readdirSync(dir), ['svc-storage-id'], 'nothing else left in the storage');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }
});

eachStore((kind) => {
  describe(`certificate orders among svcd sharing storage (${kind})`, () => {
    let stores: Store[] = [];
    let servers: TlsAskServer[] = [];
    let urls: string[] = [];
    let storageDir = '';
    let cleanup: () => Promise<void> = async () => {};
    // Both svcd's clock, moved on to see a certificate age.
    let daysLater = 0;
    const clock = { now: () => Date.now() + daysLater * 86_400_000 };

    before(async () => {
      const loc = await storeLocation(kind);
      cleanup = loc.cleanup;
      storageDir = mkdtempSync(join(tmpdir(), 'svc-cert-orders-'));
      stores = [await openStore(loc), await openStore(loc)];
      const log = pino({ level: 'silent' });
      servers = stores.map(
        (store, i) =>
          new TlsAskServer(
            { host: '127.0.0.1', port: 0 },
            {
              routedHosts: () => new Set([NAME, ...[2, 3, 4, 5, 6].map((n) => `web-${String(n)}.apps.example.com`)]),
              storageDir,
              claims: new CertificateOrders({ jobLocks: store.jobLocks, clock, holder: `svcd-${String(i)}/boot` }),
              clock,
              timers: systemTimers,
              log,
            },
          ),
      );
      urls = await Promise.all(servers.map((s) => s.start()));
    });
    beforeEach(() => {
      daysLater = 0;
    });

    after(async () => {
      await Promise.all(servers.map((s) => s.close()));
      await Promise.all(stores.map((s) => s.close().catch(() => {})));
      rmSync(storageDir, { recursive: true, force: true });
      await cleanup();
    });

    test('asked at once for a new name, one svcd may order; the other waits and says yes once the certificate is stored', async () => {
      const [a, b] = [ask(urls[0] ?? '', NAME), ask(urls[1] ?? '', NAME)];
      // Whichever claimed first answers at once; the certificate arrives a second later.
      const first = await Promise.race([a, b]);
      assert.equal(first.status, 200);
      assert.ok(first.ms < AT_ONCE_MS, `the claimant waited ${String(first.ms)} ms`);
      await new Promise((r) => setTimeout(r, STORED_AFTER_MS));
      const storedAt = Date.now();
      storeCertificate(storageDir, NAME);
      const [ra, rb] = await Promise.all([a, b]);
      const second = ra === first ? rb : ra;
      assert.equal(second.status, 200, 'the other svcd said no although the certificate is stored');
      // When its answer came, not its duration from the question's start: the process's first
      // fetch() loads undici before it returns, so the second question can start a while after
      // the first (a CI run saw 157 ms on a loaded machine).
      assert.ok(second.at >= storedAt, `the other svcd said yes ${String(storedAt - second.at)} ms before the certificate was stored`);
      // Once stored, both say yes at once (Caddy loads it from the storage).
      for (const url of urls) {
        const r = await ask(url, NAME);
        assert.equal(r.status, 200);
        assert.ok(r.ms < AT_ONCE_MS, `${String(r.ms)} ms`);
      }
    });

    test('while another svcd holds the claim and nothing is stored, the answer is no after the wait (32 questions at most wait)', async () => {
      const name = 'web-2.apps.example.com';
      assert.equal((await ask(urls[0] ?? '', name)).status, 200, 'the first asker claims');
      // One more question than may wait at once: that one is answered no at once.
      const others = await Promise.all(Array.from({ length: ASK_WAITING_MAX + 1 }, () => ask(urls[1] ?? '', name)));
      for (const other of others) assert.equal(other.status, 404);
      const waited = others.filter((r) => r.ms >= ASK_WAIT_MS - 100).length;
      assert.equal(waited, ASK_WAITING_MAX, `answers after: ${others.map((r) => r.ms).join(', ')} ms`);
      // The claimant's Caddy asks again (another handshake): its own claim still holds.
      assert.equal((await ask(urls[0] ?? '', name)).status, 200);
    });

    test('a stored certificate due for renewal needs the claim again', async () => {
      const name = 'web-3.apps.example.com';
      storeCertificate(storageDir, name);
      assert.equal((await ask(urls[1] ?? '', name)).status, 200, 'fresh: no claim needed');
      assert.equal((await ask(urls[0] ?? '', name)).status, 200, 'fresh: no claim needed');
      daysLater = 70;
      assert.equal((await ask(urls[1] ?? '', name)).status, 200, 'the renewal is claimed');
      const other = await ask(urls[0] ?? '', name);
      assert.equal(other.status, 404, 'two svcd would renew at once');
    });

    test('a name svc does not route gets no, at once, and no claim', async () => {
      const r = await ask(urls[0] ?? '', 'elsewhere.example.org');
      assert.equal(r.status, 404);
      assert.ok(r.ms < AT_ONCE_MS, `${String(r.ms)} ms`);
      const storage = readFileSync(join(storageDir, 'svc-storage-id'), 'utf8');
      assert.equal(await stores[0]?.jobLocks.holds(`certificate-order:${storage}:elsewhere.example.org`, 'svcd-0/boot', Date.now()), false);
      // The same probe sees a claim that was made.
      assert.equal(await stores[0]?.jobLocks.holds(`certificate-order:${storage}:web-2.apps.example.com`, 'svcd-0/boot', Date.now()), true);
    });

    test("a claimant that died or failed blocks the others' orders until its claim lapses", async () => {
      const name = 'web-4.apps.example.com';
      assert.equal((await ask(urls[0] ?? '', name)).status, 200);
      assert.equal((await ask(urls[1] ?? '', name)).status, 404);
      daysLater = 7 / (24 * 60); // 7 minutes on: the claim (6) lapsed
      const r = await ask(urls[1] ?? '', name);
      assert.equal(r.status, 200);
      assert.ok(r.ms < AT_ONCE_MS, `${String(r.ms)} ms`);
    });

    test('svcd with storages of their own claim each for its own', async () => {
      const log = pino({ level: 'silent' });
      const own = mkdtempSync(join(tmpdir(), 'svc-cert-orders-own-'));
      const third = new TlsAskServer(
        { host: '127.0.0.1', port: 0 },
        { routedHosts: () => new Set([NAME, 'web-5.apps.example.com']), storageDir: own, claims: new CertificateOrders({ jobLocks: stores[1]?.jobLocks ?? assert.fail(), clock, holder: 'svcd-2/boot' }), clock, timers: systemTimers, log },
      );
      const url = await third.start();
      try {
        assert.equal((await ask(urls[0] ?? '', 'web-5.apps.example.com')).status, 200);
        // Its storage is not the others': it may order, and at once.
        const r = await ask(url, 'web-5.apps.example.com');
        assert.equal(r.status, 200);
        assert.ok(r.ms < AT_ONCE_MS, `${String(r.ms)} ms`);
      } finally {
        await third.close();
        rmSync(own, { recursive: true, force: true });
      }
    });

    test('a store that fails: 503 (no order rather than a second one), yet a stored certificate is still served', async () => {
      const name = 'web-6.apps.example.com';
      await stores[1]?.close();
      assert.equal((await ask(urls[1] ?? '', name)).status, 503);
      assert.equal((await ask(urls[1] ?? '', NAME)).status, 200, 'stored by the first test');
    });
  });
});
