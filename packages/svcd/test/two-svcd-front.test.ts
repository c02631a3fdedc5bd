// Two svcd behind one name (issue 21, item 5): the operator's load balancer, HAProxy run from
// examples/two-svcd/haproxy.cfg as it is, in front of two bin/svcd processes on one PostgreSQL,
// each with its own Caddy. Under constant API and service requests one svcd is killed (SIGKILL):
// its Caddy goes with it, and no request that starts after that fails; a redeploy asked for
// meanwhile is carried out by the other; the killed one, started again on its ports, is the
// only one serving them.
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { delimiter, join, resolve } from 'node:path';
import { describe, test } from 'node:test';
import { ApiError, SvcClient } from '@svc/client';
import { tcpAccepts } from '../src/runtime/ready-wait.js';
import { PG_ADMIN_URL, freePort, freshPgDatabase, viaProxy, waitFor } from './harness.js';
import { RESPONDER_BODY, RESPONDER_IMAGE, ensureTestImages, removeTenantWorkloads } from './images.js';
import { exited, startSvcdProcess } from './svcd-process.js';

const MASTER_KEY = 'c'.repeat(64);
const FRONT_CONFIG = resolve(import.meta.dirname, '../../../examples/two-svcd/haproxy.cfg');
/** Requests one worker makes at a time: each may have one in flight when a svcd dies. */
const WORKERS = { api: 3, proxy: 3 };

interface Ports {
  api: number;
  proxy: number;
}

/** bin/svcd on `dir` and fixed ports (the front names them), sharing the store and the master key; `env` adds to or replaces its environment's. */
async function startSvcd(dir: string, ports: Ports, databaseUrl: string, env: Record<string, string> = {}): Promise<ChildProcess> {
  // The scratch directory beside the data dir, removed with it: a killed svcd leaves its folder there.
  const args = ['--dev', '--open-registration', '--data-dir', dir, '--scratch-dir', `${dir}-scratch`, '--database-url', databaseUrl, '--proxy-listen', `127.0.0.1:${String(ports.proxy)}`];
  // The tenant's limit would refuse the test's constant requests, not the kill.
  args.push('--dev-rate-limit', '1000:1000,5000:5000');
  return (await startSvcdProcess(args, { SVC_MASTER_KEY: MASTER_KEY, ...env }, ports.api)).proc;
}

/** The live processes of Caddy that the svcd on `dataDir` started (read from /proc). */
function caddiesOf(dataDir: string): number[] {
  const bootstrap = join(dataDir, 'caddy-bootstrap.json');
  return readdirSync('/proc')
    .filter((entry) => /^\d+$/.test(entry))
    .filter((pid) => {
      try {
        // A zombie's command line is empty: it is gone as far as its ports go.
        return readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').includes(bootstrap);
      } catch {
        return false; // ended while listed
      }
    })
    .map(Number);
}

interface Outcome {
  startedAt: number;
  failure: string | null;
}

describe('two svcd behind one name', { skip: !PG_ADMIN_URL && 'needs PostgreSQL (make test starts it)' }, () => {
  test('one killed under constant requests: its Caddy goes with it, nothing started after fails, the other deploys, and it comes back alone on its ports', async (t) => {
    await ensureTestImages();
    const db = await freshPgDatabase();
    const dirs = { a: mkdtempSync(join(tmpdir(), 'svcd-front-a-')), b: mkdtempSync(join(tmpdir(), 'svcd-front-b-')) };
    const ports = { a: { api: await freePort(), proxy: await freePort() }, b: { api: await freePort(), proxy: await freePort() }, front: { api: await freePort(), proxy: await freePort() } };
    const at = (port: number) => `127.0.0.1:${String(port)}`;
    let a: ChildProcess | null = null;
    let b: ChildProcess | null = null;
    let front: ChildProcess | null = null;
    // HAProxy's own words (a refused configuration), printed when the test fails.
    let frontSaid = '';
    let tenantId = '';
    try {
      a = await startSvcd(dirs.a, ports.a, db.url);
      b = await startSvcd(dirs.b, ports.b, db.url);
      front = spawn('haproxy', ['-db', '-f', FRONT_CONFIG], {
        env: {
          PATH: process.env.PATH,
          SVC_FRONT_BIND: '127.0.0.1',
          SVC_FRONT_API_PORT: String(ports.front.api),
          SVC_FRONT_PROXY_PORT: String(ports.front.proxy),
          SVC_A_API: at(ports.a.api),
          SVC_B_API: at(ports.b.api),
          SVC_A_PROXY: at(ports.a.proxy),
          SVC_B_PROXY: at(ports.b.proxy),
        },
        stdio: ['ignore', 'ignore', 'pipe'],
      });
      front.on('error', (err) => (frontSaid += `${err.message}\n`));
      front.stderr?.on('data', (chunk: Buffer) => (frontSaid = (frontSaid + chunk.toString()).slice(-4_000)));
      await waitFor('the front to listen', async () => (await tcpAccepts('127.0.0.1', ports.front.api)) && (await tcpAccepts('127.0.0.1', ports.front.proxy)));
      const anon = new SvcClient({ baseUrl: `http://${at(ports.front.api)}` });
      const reg = await anon.register({ name: 'front', email: 'front@x.io' });
      tenantId = reg.tenant_id;
      const client = anon.withKey(reg.api_key);
      // A server that answers every connection (busybox httpd drops a few under load: images.ts).
      const s = await client.createService({ name: 'behind', image: RESPONDER_IMAGE });
      const host = `${s.id}.localhost`;
      const served = async (port: number) => {
        const r = await viaProxy(port, host, '/index.html');
        return r.status === 200 && r.body.trim() === RESPONDER_BODY;
      };
      // Each svcd's API and each Caddy serve the tenant on their own (the front has both to choose from).
      await waitFor('the service to run', async () => (await client.service(s.id)).status === 'running');
      for (const p of [ports.a, ports.b]) {
        await waitFor(`the route on ${String(p.proxy)}`, () => served(p.proxy));
        assert.equal((await new SvcClient({ baseUrl: `http://${at(p.api)}`, apiKey: reg.api_key }).service(s.id)).id, s.id);
      }

      const outcomes: Outcome[] = [];
      // The SIGKILL, then A and its Caddy gone: a request begun in between may still have reached A's Caddy.
      let killSentAt = Infinity;
      let killedAt = Infinity;
      const loading = { on: true };
      const attempt = async (what: string, request: () => Promise<boolean>) => {
        const startedAt = Date.now();
        const failure = await request().then(
          (ok) => (ok ? null : `${what}: a wrong answer`),
          (err: unknown) => `${what}: ${err instanceof ApiError ? `${String(err.status)} ` : ''}${err instanceof Error ? err.message : String(err)} (${String(Date.now() - killedAt)} ms after the kill)`,
        );
        outcomes.push({ startedAt, failure });
      };
      const workers = [
        ...Array.from({ length: WORKERS.api }, async () => {
          // A read, and a write undone by another: the key count stays under the tenant's 20.
          while (loading.on) {
            await attempt('GET service', async () => (await client.service(s.id)).id === s.id);
            let keyId = '';
            await attempt('POST key', async () => Boolean((keyId = (await client.createKey({ name: 'load' })).id)));
            if (keyId) await attempt('DELETE key', async () => (await client.revokeKey(keyId)).id === keyId);
          }
        }),
        ...Array.from({ length: WORKERS.proxy }, async () => {
          while (loading.on) await attempt('GET the service', () => served(ports.front.proxy));
        }),
      ];
      try {
        await new Promise((r) => setTimeout(r, 1_000));
        const caddyA = caddiesOf(dirs.a);
        assert.equal(caddyA.length, 1, "A's Caddy is running");
        const dying = a;
        killSentAt = Date.now();
        dying.kill('SIGKILL');
        await exited(dying);
        // Read every 10 ms: the window until then is the one left unasserted but for its bound.
        while (caddiesOf(dirs.a).length > 0) {
          assert.ok(Date.now() - killSentAt < 2_000, "A's Caddy dies with it");
          await new Promise((r) => setTimeout(r, 10));
        }
        killedAt = Date.now();

        // A redeploy asked through the front while A is dead: B's controller carries it out.
        const before = new Set((await client.deployments(s.id)).map((d) => d.id));
        await client.serviceAction(s.id, 'redeploy');
        await waitFor(
          'the redeploy to succeed on B',
          async () => (await client.deployments(s.id)).some((d) => !before.has(d.id) && d.status === 'succeeded'),
          60_000,
        );

        // A again, on its ports and data dir: one Caddy serves them, and both routes answer.
        a = await startSvcd(dirs.a, ports.a, db.url);
        await waitFor("the route on A's Caddy again", () => served(ports.a.proxy));
        assert.equal(caddiesOf(dirs.a).length, 1, 'one Caddy for A');
        for (let i = 0; i < 20; i++) assert.ok(await served(ports.a.proxy), "every connection to A's port reaches a Caddy that routes");
      } finally {
        loading.on = false;
        await Promise.all(workers);
      }

      const after = outcomes.filter((o) => o.startedAt >= killedAt);
      const inFlight = outcomes.filter((o) => o.startedAt < killSentAt && o.failure !== null);
      const during = outcomes.filter((o) => o.startedAt >= killSentAt && o.startedAt < killedAt && o.failure !== null);
      t.diagnostic(`${String(outcomes.length)} requests; ${String(after.length)} started after A and its Caddy were gone (${String(killedAt - killSentAt)} ms after the SIGKILL); failed: ${String(inFlight.length)} in flight, ${String(during.length)} begun while A's Caddy was dying`);
      assert.deepEqual(after.filter((o) => o.failure !== null).map((o) => o.failure), [], 'no request started after the kill failed');
      assert.ok(inFlight.length <= WORKERS.api + WORKERS.proxy, `at most one in flight per worker failed: ${inFlight.map((o) => o.failure).join('; ')}`);
      // A failed request is followed at once by the next one: a worker may fail twice in that window, not more.
      assert.ok(during.length <= 2 * (WORKERS.api + WORKERS.proxy), `at most two per worker failed while A's Caddy was dying: ${during.map((o) => o.failure).join('; ')}`);
      assert.ok(after.length >= 100, `only ${String(after.length)} requests after the kill`);
    } catch (err) {
      t.diagnostic(`HAProxy said: ${frontSaid || 'nothing'}`);
      throw err;
    } finally {
      // Killed, not stopped: nothing of theirs is kept (their Caddies die with them, checked below).
      for (const proc of [front, a, b]) {
        if (!proc || proc.pid === undefined) continue;
        proc.kill('SIGKILL');
        await exited(proc);
      }
      for (const pid of [...caddiesOf(dirs.a), ...caddiesOf(dirs.b)]) process.kill(pid, 'SIGKILL');
      if (tenantId) await removeTenantWorkloads([tenantId]);
      await db.drop();
      for (const dir of Object.values(dirs)) for (const d of [dir, `${dir}-scratch`]) rmSync(d, { recursive: true, force: true });
    }
  });
  test("idle, a killed svcd's Caddy dies within a second; without setpriv it lives on, and the next svcd on the data dir stops it", async () => {
    const db = await freshPgDatabase();
    const dir = mkdtempSync(join(tmpdir(), 'svcd-leftover-'));
    // A PATH with caddy and what bin/svcd runs, without setpriv.
    const bare = mkdtempSync(join(tmpdir(), 'svcd-path-'));
    const which = (name: string) => (process.env.PATH ?? '').split(delimiter).map((d) => join(d, name)).find((path) => existsSync(path));
    for (const name of ['caddy', 'dirname']) symlinkSync(which(name) ?? name, join(bare, name));
    const ports = { api: await freePort(), proxy: await freePort() };
    let svcd: ChildProcess | null = null;
    try {
      // With setpriv, and no request that would make an orphaned Caddy log (and die of its closed pipe).
      svcd = await startSvcd(dir, ports, db.url);
      assert.equal(caddiesOf(dir).length, 1, 'its Caddy runs');
      svcd.kill('SIGKILL');
      await exited(svcd);
      await waitFor('its Caddy to die with it', async () => caddiesOf(dir).length === 0, 1_000);

      svcd = await startSvcd(dir, ports, db.url, { PATH: bare });
      const [leftover] = caddiesOf(dir);
      assert.ok(leftover, 'its Caddy runs');
      svcd.kill('SIGKILL');
      await exited(svcd);
      await new Promise((r) => setTimeout(r, 500));
      assert.deepEqual(caddiesOf(dir), [leftover], 'without setpriv, Caddy outlives its svcd');

      svcd = await startSvcd(dir, ports, db.url);
      const now = caddiesOf(dir);
      assert.equal(now.length, 1, 'one Caddy on the data dir');
      assert.notEqual(now[0], leftover, 'the leftover was stopped');
      assert.equal((await viaProxy(ports.proxy, 'nothing.localhost')).status, 404, "the new svcd's Caddy answers on the port");
    } finally {
      if (svcd) {
        svcd.kill('SIGKILL');
        await exited(svcd);
      }
      for (const pid of caddiesOf(dir)) process.kill(pid, 'SIGKILL');
      await db.drop();
      rmSync(dir, { recursive: true, force: true });
      rmSync(`${dir}-scratch`, { recursive: true, force: true });
      rmSync(bare, { recursive: true, force: true });
    }
  });
});
