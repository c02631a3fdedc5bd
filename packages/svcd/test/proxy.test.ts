// Public routing through a real Caddy that svcd runs and supervises, to services on the real engine.
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import type { Service } from '@svc/client';
import { PG_ADMIN_URL, freePort, freshPgDatabase, newTenant, startServer, viaProxy, waitFor, type TestServer } from './harness.js';
import { BUSYBOX_IMAGE, RESPONDER_BODY, RESPONDER_IMAGE, WEBSOCKET_IMAGE, docker, ensureTestImages, removeTenantWorkloads } from './images.js';
import { openWebSocketThroughProxy, webSocketThroughProxy } from './websocket-probe.js';
import { workloadName } from '../src/services/deployer.js';

/** What marks the test's iptables rule, so that one left by a killed run is removed at the next. */
const SILENT_DIAL_TAG = ['-m', 'comment', '--comment', 'svc-test-silent-dial'];

/** Removes OUTPUT rules tagged SILENT_DIAL_TAG (a run killed inside the test leaves its rule). */
function removeSilentDialRules(): void {
  for (const line of execFileSync('iptables', ['-w', '-S', 'OUTPUT'], { encoding: 'utf8' }).split('\n')) {
    if (!line.includes('svc-test-silent-dial') || !line.startsWith('-A ')) continue;
    // -S prints a rule as the words that made it: -A becomes -D. The comment is quoted there only when it has a space (it has none).
    execFileSync('iptables', ['-w', '-D', ...line.slice(3).split(' ')]);
  }
}

describe('public routing through Caddy', () => {
  let t: TestServer;
  let port: number;
  const tenants: string[] = [];
  before(async () => {
    await ensureTestImages();
    removeSilentDialRules();
    port = await freePort();
    t = await startServer({ realTime: true, config: { proxyListen: `127.0.0.1:${port}` }, overrides: { readyTimeoutMs: 5_000 } });
  });
  after(async () => {
    await t.close();
    await removeTenantWorkloads(tenants);
  });

  test('a running service answers at its url, with X-Forwarded-* set; unknown hosts get 404', async () => {
    const a = await newTenant(t);
    tenants.push(a.id);
    const s = await a.client.createService({ name: 'public', image: BUSYBOX_IMAGE });
    assert.equal(s.url, `http://${s.id}.localhost:${port}`);
    const running = await waitFor('running', async () => {
      const now = await a.client.service(s.id);
      return now.status === 'running' ? now : undefined;
    });
    const host = new URL(running.url!).host;
    const page = await waitFor('the route', async () => {
      const r = await viaProxy(port, host, '/index.html');
      return r.status === 200 ? r : undefined;
    });
    assert.equal(page.body, 'hello from svc-test\n');
    const env = (await viaProxy(port, host, '/cgi-bin/env')).body;
    assert.match(env, /^HTTP_X_FORWARDED_FOR=127\.0\.0\.1$/m);
    assert.match(env, /^HTTP_X_FORWARDED_PROTO=http$/m);
    assert.match(env, new RegExp(`^HTTP_X_FORWARDED_HOST=${host.replace('.', '\\.')}$`, 'm'));
    const unknown = await viaProxy(port, 'nothing-here.localhost');
    assert.equal(unknown.status, 404);
  });

  test('streamed responses pass through as they are produced', async () => {
    const a = await newTenant(t);
    tenants.push(a.id);
    const s = await a.client.createService({ name: 'streamer', image: BUSYBOX_IMAGE });
    const host = `${s.id}.localhost:${port}`;
    await waitFor('the route', async () => ((await viaProxy(port, host)).status === 200 ? true : undefined));
    const arrivals: Array<[number, string]> = [];
    const started = Date.now();
    await new Promise<void>((resolve, reject) => {
      const req = request({ host: '127.0.0.1', port, path: '/cgi-bin/stream', headers: { host }, agent: false }, (res) => {
        res.on('data', (d: Buffer) => arrivals.push([Date.now() - started, d.toString()]));
        res.on('end', () => resolve());
      });
      req.on('error', reject);
      req.end();
    });
    const text = arrivals.map(([, t]) => t).join('');
    assert.match(text, /line 1\nline 2\nline 3\nline 4/);
    // Streamed, not held back: line 1 came on its own (without line 4), or long before the end
    // (either holds alone: a stall of this process can join chunks, or delay line 1's).
    const [firstAt = Infinity, firstChunk = ''] = arrivals.find(([, t]) => t.includes('line 1')) ?? [];
    assert.notEqual(firstChunk, '', 'line 1 came whole in one piece');
    const last = arrivals.at(-1)?.[0] ?? 0;
    assert.ok(!firstChunk.includes('line 4') || last - firstAt >= 600, `line 1 came with line 4, ${last - firstAt} ms before the end: it was held back`);
  });

  test('WebSocket upgrades pass through, both ways', async () => {
    const a = await newTenant(t);
    tenants.push(a.id);
    const s = await a.client.createService({ name: 'sockets', image: WEBSOCKET_IMAGE });
    const host = `${s.id}.localhost:${port}`;
    await waitFor('running', async () => ((await a.client.service(s.id)).status === 'running' ? true : undefined));
    // The route is pushed right after the service turns running; a first attempt can beat it.
    const ws = await waitFor('the upgrade', () => webSocketThroughProxy(port, host).catch(() => undefined));
    assert.equal(ws.accept, ws.expected, 'the server\'s handshake answer reaches the client unchanged');
    assert.equal(ws.frames, '\x81\x05hello\x81\x0cgot 11 bytes');
  });

  test("another service redeployed, stopped and started again: a WebSocket open to this one stays open (those are no configuration loads, which would close it)", async () => {
    const a = await newTenant(t);
    tenants.push(a.id);
    const sockets = await a.client.createService({ name: 'long-lived', image: WEBSOCKET_IMAGE });
    const churning = await a.client.createService({ name: 'churning', image: BUSYBOX_IMAGE });
    const churningHost = `${churning.id}.localhost:${port}`;
    await waitFor('the churning route', async () => ((await viaProxy(port, churningHost)).status === 200 ? true : undefined));
    const ws = await waitFor('the upgrade', () => openWebSocketThroughProxy(port, `${sockets.id}.localhost:${port}`).catch(() => undefined));
    const containerOf = async () => (await docker.getContainer(workloadName(churning.id)).inspect()).Id;
    const first = await containerOf();
    await a.client.serviceAction(churning.id, 'redeploy');
    // Generous waits: a rolling redeploy serves from the old container for 3 s more, then stops it.
    await waitFor('the redeployed container', async () => ((await a.client.service(churning.id)).status === 'running' && (await containerOf()) !== first ? true : undefined), 90_000);
    await a.client.serviceAction(churning.id, 'stop');
    await waitFor('the 503 page', async () => ((await viaProxy(port, churningHost)).status === 503 ? true : undefined), 90_000);
    await a.client.serviceAction(churning.id, 'start');
    await waitFor('the route back', async () => ((await viaProxy(port, churningHost)).status === 200 ? true : undefined), 90_000);
    assert.equal(ws.ended(), false, 'the WebSocket was closed');
    assert.match(await ws.reply(), /got 11 bytes/);
  });

  test('a redeploy under constant requests: every request is answered by the old container or the new one, and the old one goes', async () => {
    const a = await newTenant(t);
    tenants.push(a.id);
    // A server that answers every connection (busybox httpd drops a few under load: images.ts).
    const s = await a.client.createService({ name: 'rolling', image: RESPONDER_IMAGE });
    const host = `${s.id}.localhost:${port}`;
    await waitFor('the route', async () => ((await viaProxy(port, host)).status === 200 ? true : undefined));
    const old = (await docker.getContainer(workloadName(s.id)).inspect()).Id;
    const answers: string[] = [];
    const loading = { on: true };
    // One request at a time, back to back, for the whole redeploy (and a moment after).
    const load = (async () => {
      while (loading.on) answers.push(await viaProxy(port, host, '/index.html').then((r) => `${String(r.status)} ${r.body.trim()}`, (err: unknown) => String(err)));
    })();
    try {
      await a.client.serviceAction(s.id, 'redeploy');
      await waitFor(
        'the new container serving, the old one gone',
        async () => {
          const now = await a.client.service(s.id);
          const containers = await docker.listContainers({ all: true, filters: { label: [`svc.resource=${s.id}`] } });
          return now.status === 'running' && containers.length === 1 && containers[0]?.Id !== old ? true : undefined;
        },
        90_000,
      );
      await new Promise((r) => setTimeout(r, 500));
    } finally {
      loading.on = false;
      await load;
    }
    const failed = answers.filter((x) => x !== `200 ${RESPONDER_BODY}`);
    assert.deepEqual(failed, [], `${String(failed.length)} of ${String(answers.length)} requests failed`);
    assert.ok(answers.length >= 20, `only ${String(answers.length)} requests were made`);
  });

  test('a stopped service gets a short 503 page; started again it answers', async () => {
    const a = await newTenant(t);
    tenants.push(a.id);
    const s = await a.client.createService({ name: 'pausable', image: BUSYBOX_IMAGE });
    const host = `${s.id}.localhost:${port}`;
    await waitFor('the route', async () => ((await viaProxy(port, host)).status === 200 ? true : undefined));
    await a.client.serviceAction(s.id, 'stop');
    const down = await waitFor('the 503 page', async () => {
      const r = await viaProxy(port, host);
      return r.status === 503 ? r : undefined;
    });
    assert.match(down.body, /Service pausable is stopped/);
    await a.client.serviceAction(s.id, 'start');
    await waitFor('the route back', async () => ((await viaProxy(port, host)).status === 200 ? true : undefined));
  });

  test("a request still dialing a service that answers no connection attempt, while Caddy loads new routes, leaves Caddy running; the other routes answer", async () => {
    const a = await newTenant(t);
    tenants.push(a.id);
    const silent = await a.client.createService({ name: 'silent', image: BUSYBOX_IMAGE });
    const host = `${silent.id}.localhost:${port}`;
    await waitFor('the route', async () => ((await viaProxy(port, host)).status === 200 ? true : undefined));
    // Its connection attempts go unanswered (their SYNs dropped on the way out of the host), as
    // to a node cut off or a service whose backlog is full: Caddy's dial hangs (3 s, its default).
    const [container] = await docker.listContainers({ filters: { label: [`svc.resource=${silent.id}`] } });
    const networks = (await docker.getContainer(container?.Id ?? assert.fail('no container')).inspect()).NetworkSettings.Networks;
    const ip = networks[`tenant-${a.id}`]?.IPAddress ?? assert.fail(`no address on the tenant network: ${JSON.stringify(networks)}`);
    const rule = ['OUTPUT', '-p', 'tcp', '-d', ip, '--dport', String(silent.port), '--syn', '-j', 'DROP', ...SILENT_DIAL_TAG];
    execFileSync('iptables', ['-w', '-I', ...rule]);
    try {
      const pid = t.deps.proxy?.pid;
      assert.ok(pid);
      // A request to it every 200 ms, so that some are dialing whenever Caddy loads.
      const stuck: Array<Promise<{ start: number; end: number; answer: string }>> = [];
      const dial = () => {
        const start = Date.now();
        stuck.push(viaProxy(port, host).then((r) => `answered ${String(r.status)}`, (err: unknown) => String(err)).then((answer) => ({ start, end: Date.now(), answer })));
      };
      dial();
      const dialing = setInterval(dial, 200);
      let created = 0;
      let loaded = 0;
      try {
        await new Promise((r) => setTimeout(r, 500));
        // Routes change (another service) while those requests dial: Caddy loads a configuration
        // (its host answers, with the deploying page, once loaded). With `flush_interval: -1` on
        // the routes, Caddy 2.6.2 panicked here and exited.
        created = Date.now();
        const other = await a.client.createService({ name: 'other', image: BUSYBOX_IMAGE });
        const otherHost = `${other.id}.localhost:${port}`;
        await waitFor('the new route loaded', async () => ((await viaProxy(port, otherHost)).status !== 404 ? true : undefined));
        loaded = Date.now();
        await waitFor('the new route answering', async () => ((await viaProxy(port, otherHost)).status === 200 ? true : undefined), 60_000);
      } finally {
        clearInterval(dialing);
      }
      assert.equal(t.deps.proxy?.pid, pid, 'Caddy exited and was started again');
      const answers = await Promise.all(stuck);
      // The condition was met: a request dialing from before the change until after the load.
      assert.ok(answers.some((x) => x.start < created && x.end > loaded), `no request dialed across the load (changed at ${String(created)}, loaded by ${String(loaded)}): ${JSON.stringify(answers)}`);
      // The first one, dialing across the load, is answered (Caddy's dial timeout), not cut off.
      assert.match(answers[0]?.answer ?? '', /^answered 5\d\d$/);
    } finally {
      execFileSync('iptables', ['-w', '-D', ...rule]);
    }
    await waitFor('the same probe once the service answers again', async () => ((await viaProxy(port, host)).status === 200 ? true : undefined));
  });

  test('Caddy killed: svcd restarts it and pushes the routes again', async () => {
    const a = await newTenant(t);
    tenants.push(a.id);
    const s: Service = await a.client.createService({ name: 'survivor', image: BUSYBOX_IMAGE });
    const host = `${s.id}.localhost:${port}`;
    await waitFor('the route', async () => ((await viaProxy(port, host)).status === 200 ? true : undefined));
    const pid = t.deps.proxy?.pid;
    assert.ok(pid);
    process.kill(pid, 'SIGKILL');
    await waitFor('caddy to be restarted', async () => (t.deps.proxy?.pid !== pid && t.deps.proxy?.pid ? true : undefined));
    const back = await waitFor('the route after the restart', async () => {
      const r = await viaProxy(port, host, '/index.html');
      return r.status === 200 ? r : undefined;
    });
    assert.equal(back.body, 'hello from svc-test\n');
  });
});

describe('two svcd on one store', () => {
  test('route alike: a service created through one answers through the other one\'s Caddy', { skip: !PG_ADMIN_URL && 'needs PostgreSQL (make test starts it)' }, async () => {
    await ensureTestImages();
    const db = await freshPgDatabase();
    const portA = await freePort();
    const portB = await freePort();
    // Both on the same database and the same master key; each with its own data dir and Caddy.
    const masterKey = 'a'.repeat(64);
    const a = await startServer({ realTime: true, config: { databaseUrl: db.url, proxyListen: `127.0.0.1:${portA}`, masterKey }, overrides: { readyTimeoutMs: 5_000 } });
    const b = await startServer({ realTime: true, config: { databaseUrl: db.url, proxyListen: `127.0.0.1:${portB}`, masterKey } });
    let tenant = '';
    try {
      const x = await newTenant(a);
      tenant = x.id;
      const s = await x.client.createService({ name: 'shared', image: BUSYBOX_IMAGE, env: { SHARED: 'yes' } });
      for (const port of [portA, portB]) {
        const r = await waitFor(`the route on ${port}`, async () => {
          const got = await viaProxy(port, `${s.id}.localhost:${port}`, '/index.html');
          return got.status === 200 ? got : undefined;
        });
        assert.equal(r.body, 'hello from svc-test\n');
      }
      // The other process reads what the first sealed: same store, same key.
      assert.deepEqual(await b.client.withKey(x.key).serviceEnv(s.id, true), { SHARED: 'yes' });
    } finally {
      await a.close();
      await b.close();
      await removeTenantWorkloads([tenant]);
      await db.drop();
    }
  });
});

describe("an operator's Caddy (--caddy-admin)", () => {
  test('svcd pushes its routes to that Caddy through the admin URL', async () => {
    await ensureTestImages();
    const dir = mkdtempSync(join(tmpdir(), 'svc-op-caddy-'));
    const adminPort = await freePort();
    const port = await freePort();
    const answersPort = await freePort();
    writeFileSync(join(dir, 'caddy.json'), JSON.stringify({ admin: { listen: `127.0.0.1:${adminPort}`, config: { persist: false } } }));
    const caddy = spawn('caddy', ['run', '--config', join(dir, 'caddy.json')], { stdio: 'ignore' });
    await waitFor('the operator caddy', async () => (await fetch(`http://127.0.0.1:${adminPort}/config/`)).ok || undefined);
    const t = await startServer({
      realTime: true,
      // A fixed port for svcd's answers, as an operator's Caddy would be told (the ports then do not move with a restart).
      config: { proxyListen: `127.0.0.1:${port}`, caddyAdmin: `http://127.0.0.1:${adminPort}`, proxyAnswersListen: { host: '127.0.0.1', port: answersPort } },
      overrides: { readyTimeoutMs: 5_000 },
    });
    let tenant = '';
    try {
      assert.equal(t.deps.proxy?.pid, undefined, 'svcd runs no Caddy of its own');
      const a = await newTenant(t);
      tenant = a.id;
      const s = await a.client.createService({ name: 'operator-routed', image: BUSYBOX_IMAGE });
      const r = await waitFor('the route', async () => {
        const got = await viaProxy(port, `${s.id}.localhost:${port}`, '/index.html');
        return got.status === 200 ? got : undefined;
      });
      assert.equal(r.body, 'hello from svc-test\n');
      // Where the service answers, and its page once stopped, come from svcd on that port.
      const config = JSON.stringify(await (await fetch(`http://127.0.0.1:${adminPort}/config/`)).json());
      assert.ok(config.includes(`udp/127.0.0.1:${answersPort}`) && config.includes(`"127.0.0.1:${answersPort}"`), config);
      await a.client.serviceAction(s.id, 'stop');
      const down = await waitFor('the 503 page', async () => {
        const got = await viaProxy(port, `${s.id}.localhost:${port}`);
        return got.status === 503 ? got : undefined;
      });
      assert.match(down.body, /Service operator-routed is stopped/);
    } finally {
      await t.close();
      caddy.kill('SIGTERM');
      await removeTenantWorkloads([tenant]);
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
