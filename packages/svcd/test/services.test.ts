// Services on the real Docker Engine, with images the tests build (test/images.ts).
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { Service } from '@svc/client';
import { tenantNetworkName } from '../src/runtime/index.js';
import { workloadName } from '../src/services/deployer.js';
import { ADMIN_TOKEN, newTenant, startServer, waitFor, type TestServer } from './harness.js';
import { fetchFromService, fetchOnce, settled } from './service-fixtures.js';
import { BUSYBOX_IMAGE, EXITER_IMAGE, SLEEPER_IMAGE, TEST_REGISTRY, buildImage, docker, ensureTestImages, finished, httpdImageFiles, pushToRegistry, removeTenantWorkloads, startRegistry } from './images.js';

type Tenant = Awaited<ReturnType<typeof newTenant>>;
let track: (id: string) => void = () => {};
async function tenantOn(t: TestServer): Promise<Tenant> {
  const x = await newTenant(t);
  track(x.id);
  return x;
}


/** Asks the container to crash, until it has (its answer may be cut off by the crash itself). */
async function crash(serviceId: string): Promise<void> {
  const id = (await docker.getContainer(workloadName(serviceId)).inspect()).Id;
  for (let attempt = 0; attempt < 10; attempt++) {
    await fetchOnce(serviceId, '/cgi-bin/crash').catch(() => {});
    const state = await docker.getContainer(id).inspect().then((c) => c.State.Running, () => false);
    if (!state) return;
    await new Promise((r) => setTimeout(r, 250));
  }
  throw new Error('the container did not crash on request');
}

describe('services on the real engine', () => {
  let t: TestServer;
  /** With a 3 s readiness deadline, for the tests that wait one out on purpose. */
  let short: TestServer;
  const lines: string[] = [];
  before(async () => {
    await ensureTestImages();
    track = (id) => tenants.push(id);
    // 20 s to be ready: a loaded CI machine took more than 3 s to start a busybox httpd. The tests
    // that wait out a readiness deadline on purpose do it on `short`.
    t = await startServer({ realTime: true, logLines: lines, config: { adminTokens: [ADMIN_TOKEN] }, overrides: { readyTimeoutMs: 20_000 } });
    short = await startServer({ realTime: true, overrides: { readyTimeoutMs: 3_000 } });
  });
  const tenants: string[] = [];
  after(async () => {
    // Server errors, for whoever reads a failed run.
    for (const l of lines) if (l.includes('"level":50')) process.stderr.write(`# svcd: ${l.slice(0, 2000)}\n`);
    await t.close();
    await short.close();
    await removeTenantWorkloads(tenants);
  });

  test('an image whose command is an init that runs only as PID 1 (s6-overlay\'s /init) is PID 1, through svc-init --exec', async () => {
    const image = `${TEST_REGISTRY}/svc-test/pid1-init:1`;
    const files = httpdImageFiles({ index: 'served by an init\n' });
    await buildImage(image, {
      ...files,
      Dockerfile: { body: `${String(files.Dockerfile?.body ?? '').replace(/\nCMD .*$/s, '')}\nCOPY init /init\nENTRYPOINT ["/init"]\n` },
      init: { body: '#!/bin/sh\necho "init pid $$"\nexec httpd -f -p ${PORT:-8000} -h /www\n', mode: 0o755 },
    });
    await finished(await docker.getImage(image).push({ authconfig: {} }));
    const a = await tenantOn(t);
    const s = await settled(a, (await a.client.createService({ name: 'own-init', image })).id);
    assert.equal(s.status, 'running', s.last_error ?? '');
    assert.match(await fetchFromService(s.id, '/index.html'), /served by an init/);
    const c = await docker.getContainer(workloadName(s.id)).inspect();
    assert.deepEqual([c.Config.Entrypoint, c.Config.Cmd], [['/.svc/init', '--exec', '--'], ['/init']]);
    // It became PID 1: svc-init took no place of its own in the container.
    await waitFor('the init logged', async () => ((await a.client.serviceLogs(s.id, 20)).includes('init pid 1') ? true : undefined));
  });

  test("an image whose STOPSIGNAL is a real-time signal: svc-init is told to forward it, and the command gets it", async () => {
    // svc-init asks Go for the standard signals only (cheaper starts under gVisor); a stop's
    // real-time signal is named to it (--forward-signal), or the command would never see it.
    const image = `${TEST_REGISTRY}/svc-test/rt-stopsignal:1`;
    const files = httpdImageFiles({ index: 'stops on RTMIN+3\n', work: `trap 'echo got RTMIN+3; exit 0' 37; echo ready; while true; do sleep 1 & wait $!; done` });
    await buildImage(image, { ...files, Dockerfile: { body: `${String(files.Dockerfile?.body ?? '')}\nSTOPSIGNAL SIGRTMIN+3\n` } });
    await finished(await docker.getImage(image).push({ authconfig: {} }));
    // Under runc: Debian's runsc delivers no real-time signal at all (`runsc kill` answers
    // "unknown signal 37"), so under gVisor such a stop ends with the engine's SIGKILL anyway.
    const runc = await startServer({ realTime: true, config: { sandbox: 'off' }, overrides: { readyTimeoutMs: 20_000 } });
    try {
      const a = await tenantOn(runc);
      const s = await settled(a, (await a.client.createService({ name: 'rt-stop', image })).id);
      assert.equal(s.status, 'running', s.last_error ?? '');
      const c = await docker.getContainer(workloadName(s.id)).inspect();
      assert.equal(c.HostConfig.Runtime, 'runc');
      assert.deepEqual(c.Config.Entrypoint, ['/.svc/init', '--lines-per-second=500', '--bytes-per-second=524288', '--forward-signal=37', '--']);
      await waitFor('the command set its trap', async () => ((await a.client.serviceLogs(s.id, 50)).includes('ready') ? true : undefined));
      // A stop as the engine makes one (the image's STOPSIGNAL, then SIGKILL after 20 s): the
      // command gets the signal and exits 0 at once, and svc-init with its code. Dropped, it
      // would be killed after the 20 s (137). Its exit is asked for before the stop, so that
      // svc, which sees the service's container end, cannot take it away first.
      const exited = docker.getContainer(c.Id).wait() as Promise<{ StatusCode: number }>;
      const began = Date.now();
      await docker.getContainer(c.Id).stop({ t: 20 });
      assert.equal((await exited).StatusCode, 0);
      assert.ok(Date.now() - began < 10_000, `the stop took ${Date.now() - began} ms`);
    } finally {
      await runc.close();
    }
  });

  test("a port other than the one its image exposes: readiness and the route use the service's port", async () => {
    const a = await tenantOn(t);
    // The image exposes 8000 and its httpd listens on $PORT; svc sets PORT to the service's port.
    const s = await settled(a, (await a.client.createService({ name: 'other-port', image: BUSYBOX_IMAGE, port: 8080 })).id);
    assert.equal(s.status, 'running', s.last_error ?? '');
    const upstream = (await t.deps.store.services.findAny(s.id))?.upstream ?? '';
    assert.match(upstream, /:8080$/, 'routed to the port the service listens on');
    // The image's own port has nobody listening: that probe would have failed the deploy.
    const c = await docker.getContainer(workloadName(s.id)).inspect();
    assert.deepEqual(Object.keys(c.Config.ExposedPorts).sort(), ['8000/tcp', '8080/tcp']);
  });

  test('an HTTP health check asks its path on the service port: a page the httpd serves passes, a missing one fails the deploy with its status', async () => {
    const a = await tenantOn(t);
    const served = await settled(a, (await a.client.createService({ name: 'checked', image: BUSYBOX_IMAGE, health_check: { type: 'http', path: '/index.html' } })).id);
    assert.equal(served.status, 'running', served.last_error ?? '');
    assert.deepEqual(served.health_check, { type: 'http', path: '/index.html' });
    // On `short`: the failing check waits out its 3 s.
    const b = await tenantOn(short);
    const missing = await settled(b, (await b.client.createService({ name: 'unchecked', image: BUSYBOX_IMAGE, health_check: { type: 'http', path: '/healthz' } })).id);
    assert.equal(missing.status, 'failed');
    assert.match(missing.last_error ?? '', /not ready within 3 s: health check GET \/healthz: answered 404/);
    assert.equal(await docker.getContainer(workloadName(missing.id)).inspect().then(() => 'there', () => 'gone'), 'gone');
  });

  test('create: 201 deploying, then running; hardened container on the tenant network with env and quota limits', async () => {
    const a = await tenantOn(t);
    const r = await a.client.raw<Service>('POST', '/v1/services', { body: { name: 'web app', image: BUSYBOX_IMAGE, env: { GREETING: 'hello' } } });
    assert.equal(r.status, 201);
    assert.equal(r.body.status, 'deploying');
    assert.equal(r.body.port, 8000, 'port 0/absent means 8000');
    assert.equal(r.body.dns_label, 'web-app');
    const s = await settled(a, r.body.id);
    assert.equal(s.status, 'running', s.last_error ?? '');
    assert.equal(s.last_error, null);

    const env = await fetchFromService(s.id, '/cgi-bin/env');
    assert.match(env, /^GREETING=hello$/m);
    assert.match(env, /^PORT=8000$/m);

    const c = await docker.getContainer(workloadName(s.id)).inspect();
    assert.deepEqual(c.HostConfig.CapDrop, ['ALL']);
    assert.deepEqual(c.HostConfig.SecurityOpt, ['no-new-privileges']);
    // Under gVisor the group also holds the sandbox's own host threads (runtime/docker.ts).
    assert.equal(c.HostConfig.PidsLimit, c.HostConfig.Runtime === 'runsc' ? 256 + 768 : 256);
    // svc-init is PID 1, read-only, running the image's own command (runtime/tenant-init.ts).
    assert.deepEqual(c.Config.Entrypoint, ['/.svc/init', '--lines-per-second=500', '--bytes-per-second=524288', '--']);
    // The engine's answer: Entrypoint and Cmd are lists, or null when the image sets none.
    const imageConfig = (await docker.getImage(c.Image).inspect()).Config as { Entrypoint: string[] | null; Cmd: string[] | null };
    assert.deepEqual(c.Config.Cmd, [...(imageConfig.Entrypoint ?? []), ...(imageConfig.Cmd ?? [])]);
    assert.ok(c.HostConfig.Mounts?.some((m) => m.Target === '/.svc/init' && m.Type === 'bind' && m.ReadOnly === true));
    assert.equal(c.HostConfig.Memory, Math.floor(2048 / 5) * 1024 * 1024, "memory: the tenant's 2048 MB over its 5 services");
    // 0.4 cores, over periods of 500 ms (a start's burst fits in the first: runtime/docker).
    assert.deepEqual([c.HostConfig.CpuQuota, c.HostConfig.CpuPeriod, c.HostConfig.NanoCpus], [200_000, 500_000, 0]);
    assert.equal(c.HostConfig.NetworkMode, tenantNetworkName(a.id));
    assert.equal(c.Config.Labels['svc.tenant'], a.id);
    assert.equal(c.Config.Labels['svc.resource'], s.id);
    const info = (await docker.info()) as { Runtimes?: Record<string, unknown> };
    assert.equal(c.HostConfig.Runtime, 'runsc' in (info.Runtimes ?? {}) ? 'runsc' : 'runc', 'gVisor when the engine has it (--sandbox auto)');

    const deps = await a.client.deployments(s.id);
    assert.equal(deps.length, 1);
    assert.equal(deps[0]?.status, 'succeeded');
    assert.equal(deps[0].reason, 'create');
    const actions = (await a.client.activity({ service_id: s.id })).map((e) => e.action);
    assert.deepEqual(actions.sort(), ['deployment.succeeded', 'service.created']);
    assert.equal((await a.client.usage()).services.used, 1);
  });

  test('validation: name, port, image source; quota and duplicate names are 409', async () => {
    const a = await tenantOn(t);
    const bad: Array<[Record<string, unknown>, RegExp]> = [
      [{ name: 'x'.repeat(129), image: BUSYBOX_IMAGE }, /name/],
      [{ name: 'bad/name', image: BUSYBOX_IMAGE }, /name/],
      [{ name: 'ok', image: BUSYBOX_IMAGE, port: 65536 }, /port/],
      [{ name: 'ok', image: BUSYBOX_IMAGE, port: -1 }, /port/],
      [{ name: 'ok', image: 'ghcr.io/acme/app:1' }, /Docker Hub or a loopback registry/],
      [{ name: 'ok', image: '10.0.0.5:5000/app' }, /Docker Hub or a loopback registry/],
      [{ name: 'ok', image: 'Not A Valid Ref' }, /invalid image reference/],
      [{ name: 'ok' }, /image is required/],
      [{ name: 'ok', image: BUSYBOX_IMAGE, env: { 'BAD-KEY': 'x' } }, /env/],
    ];
    for (const [body, msg] of bad) {
      const r = await a.client.raw<{ error: string }>('POST', '/v1/services', { body });
      assert.equal(r.status, 400, JSON.stringify(body));
      assert.match(r.body.error, msg);
    }
    assert.equal((await a.client.listServices()).length, 0, 'refused requests created nothing');

    await t.client.raw('PATCH', `/v1/tenants/${a.id}/quotas`, { body: { max_services: 1, max_env_vars_per_service: 2 }, headers: { 'x-admin-token': ADMIN_TOKEN, 'x-real-ip': '10.7.0.1' } });
    const envCap = await a.client.raw<{ error: string }>('POST', '/v1/services', { body: { name: 'many', image: BUSYBOX_IMAGE, env: { A: '1', B: '2', C: '3' } } });
    assert.equal(envCap.status, 409);
    assert.match(envCap.body.error, /^quota exceeded: maximum environment variables/);
    const first = await a.client.createService({ name: 'only', image: BUSYBOX_IMAGE, port: 8000 });
    const second = await a.client.raw<{ error: string }>('POST', '/v1/services', { body: { name: 'second', image: BUSYBOX_IMAGE } });
    assert.equal(second.status, 409);
    assert.match(second.body.error, /^quota exceeded: maximum services reached/);
    await t.client.raw('PATCH', `/v1/tenants/${a.id}/quotas`, { body: { max_services: 3 }, headers: { 'x-admin-token': ADMIN_TOKEN, 'x-real-ip': '10.7.0.2' } });
    const dup = await a.client.raw('POST', '/v1/services', { body: { name: 'ONLY', image: BUSYBOX_IMAGE } });
    assert.equal(dup.status, 409);
    await settled(a, first.id);
  });

  test('a foreign service is the same 404 as a missing one', async () => {
    const a = await tenantOn(t);
    const b = await tenantOn(t);
    const s = await a.client.createService({ name: 'mine', image: BUSYBOX_IMAGE });
    for (const [method, path] of [
      ['GET', `/v1/services/${s.id}`],
      ['PATCH', `/v1/services/${s.id}`],
      ['DELETE', `/v1/services/${s.id}`],
      ['POST', `/v1/services/${s.id}/restart`],
      ['GET', `/v1/services/${s.id}/logs`],
      ['GET', `/v1/services/${s.id}/env`],
    ] as const) {
      const foreign = await b.client.raw<{ error: string }>(method, path, { body: method === 'PATCH' ? { name: 'x' } : undefined });
      const missing = await b.client.raw<{ error: string }>(method, path.replace(s.id, 'ffffffffffffffffffffffff'), { body: method === 'PATCH' ? { name: 'x' } : undefined });
      assert.equal(foreign.status, 404, `${method} ${path}`);
      // The same answer (each carries its own request id).
      assert.equal(foreign.body.error, missing.body.error);
    }
    assert.equal((await b.client.listServices()).length, 0);
    await settled(a, s.id);
  });

  test('env: masked list, audited reveal, merge and delete; a restart applies the change', async () => {
    const a = await tenantOn(t);
    const s = await a.client.createService({ name: 'envy', image: BUSYBOX_IMAGE, env: { ONE: '1' } });
    await settled(a, s.id);
    assert.deepEqual(await a.client.setServiceEnv(s.id, { TWO: 'two', ONE: 'uno' }), { ONE: '********', TWO: '********' });
    assert.deepEqual(await a.client.serviceEnv(s.id, true), { ONE: 'uno', TWO: 'two' });
    assert.ok(lines.some((l) => l.includes('"service.env.reveal"') && l.includes(s.id)), 'reveal is audit-logged');
    await a.client.unsetServiceEnv(s.id, 'TWO');
    assert.equal((await a.client.raw('DELETE', `/v1/services/${s.id}/env/TWO`)).status, 404);
    assert.match(await fetchFromService(s.id, '/cgi-bin/env'), /^ONE=1$/m, 'not applied before a restart');

    const r = await a.client.raw<{ service: Service; deployment: { reason: string } }>('POST', `/v1/services/${s.id}/restart`);
    assert.equal(r.status, 202);
    assert.equal(r.body.service.status, 'deploying');
    assert.equal(r.body.deployment.reason, 'restart');
    assert.equal((await settled(a, s.id)).status, 'running');
    const env = await fetchFromService(s.id, '/cgi-bin/env');
    assert.match(env, /^ONE=uno$/m);
    assert.doesNotMatch(env, /^TWO=/m);
    // Values are sealed at rest.
    const sealed = await t.deps.store.serviceEnv.get(s.id);
    assert.ok(!(sealed.get('ONE') ?? '').includes('uno'));
  });

  test('logs: tail default and bounds; follow streams new lines as text/plain', async () => {
    const a = await tenantOn(t);
    const s = await a.client.createService({ name: 'chatty', image: BUSYBOX_IMAGE });
    await settled(a, s.id);
    await fetchFromService(s.id, '/index.html');
    const logs = await a.client.raw('GET', `/v1/services/${s.id}/logs`);
    assert.equal(logs.status, 200);
    assert.match(logs.headers.get('content-type') ?? '', /^text\/plain/);
    assert.match(logs.text, /svc-test starting on port 8000/);
    assert.equal((await a.client.serviceLogs(s.id, 1)).trim().split('\n').length, 1);
    assert.equal((await a.client.raw('GET', `/v1/services/${s.id}/logs`, { query: { tail: 10001 } })).status, 400);
    assert.equal((await a.client.raw('GET', `/v1/services/${s.id}/logs`, { query: { tail: 10000 } })).status, 200);

    const controller = new AbortController();
    const res = await fetch(`${t.url}/v1/services/${s.id}/logs?follow=true&tail=0`, { headers: { authorization: `Bearer ${a.key}` }, signal: controller.signal });
    assert.equal(res.status, 200);
    const reader = (res.body as ReadableStream<Uint8Array>).getReader();
    assert.equal(await fetchFromService(s.id, '/cgi-bin/log?marker-for-follow'), 'logged\n');
    let seen = '';
    const timeout = setTimeout(() => controller.abort(), 10_000);
    try {
      while (!seen.includes('marker-for-follow')) {
        const { value, done } = await reader.read();
        if (done) break;
        seen += Buffer.from(value).toString();
      }
    } catch {
      // aborted at the deadline: the assertion below says what was missing
    }
    clearTimeout(timeout);
    assert.match(seen, /marker-for-follow/);
    controller.abort();
    const missing = await a.client.raw('GET', '/v1/services/ffffffffffffffffffffffff/logs', { query: { follow: true } });
    assert.equal(missing.status, 404, 'existence is checked before the stream starts');
  });

  test('stop removes the container; start deploys it again; rename keeps the DNS label', async () => {
    const a = await tenantOn(t);
    const s = await a.client.createService({ name: 'stoppable', image: BUSYBOX_IMAGE });
    await settled(a, s.id);
    const stopped = await a.client.serviceAction(s.id, 'stop');
    assert.equal(stopped.service.status, 'stopped');
    await assert.rejects(docker.getContainer(workloadName(s.id)).inspect(), /no such container/i);
    const started = await a.client.serviceAction(s.id, 'start');
    assert.equal(started.deployment?.reason, 'start');
    assert.equal((await settled(a, s.id)).status, 'running');
    assert.equal((await a.client.raw('POST', `/v1/services/${s.id}/start`)).status, 409, 'already running');
    const renamed = await a.client.renameService(s.id, 'renamed.service');
    assert.equal(renamed.name, 'renamed.service');
    assert.equal(renamed.dns_label, 'stoppable');
    assert.deepEqual((await a.client.deployments(s.id)).map((d) => d.reason), ['start', 'create']);
  });

  test('failed deploys end failed with last_error: an image that cannot be pulled, a container that exits', async () => {
    const a = await tenantOn(t);
    const missing = await a.client.createService({ name: 'ghost', image: 'svc-test/does-not-exist:1' });
    const m = await settled(a, missing.id);
    assert.equal(m.status, 'failed');
    assert.match(m.last_error ?? '', /could not be pulled/);
    assert.equal((await a.client.deployments(missing.id))[0]?.status, 'failed');

    // A container that exits before it is ready: its exit code and its last output.
    const exiter = await a.client.createService({ name: 'exiter', image: EXITER_IMAGE });
    const ex = await settled(a, exiter.id);
    assert.equal(ex.status, 'failed');
    assert.match(ex.last_error ?? '', /container exited with code 7 before it was ready: giving up/);
    assert.equal((await a.client.deployments(exiter.id))[0]?.status, 'failed');

    // One that runs but never listens (on `short`: it waits out the deadline).
    const b = await tenantOn(short);
    const sleeper = await b.client.createService({ name: 'sleeper', image: SLEEPER_IMAGE });
    const sl = await settled(b, sleeper.id);
    assert.equal(sl.status, 'failed');
    assert.match(sl.last_error ?? '', /not ready within \d+ s: no connection accepted on port 8000/);
  });

  test('cancel a running deployment', async () => {
    const slow = await startServer({ realTime: true, overrides: { readyTimeoutMs: 60_000 } });
    try {
      const a = await tenantOn(slow);
      const s = await a.client.createService({ name: 'never-ready', image: SLEEPER_IMAGE });
      let running: string | undefined;
      await waitFor('the deployment to run', async () => {
        const d = (await a.client.deployments(s.id))[0];
        running = d?.status === 'running' ? d.id : undefined;
        return running !== undefined;
      });
      const cancelled = await a.client.cancelDeployment(s.id, running!);
      assert.equal(cancelled.status, 'cancelled');
      const after = await a.client.service(s.id);
      assert.equal(after.status, 'failed');
      assert.match(after.last_error ?? '', /cancelled/);
      assert.equal((await a.client.raw('POST', `/v1/services/${s.id}/deployments/${running}/cancel`)).status, 409);
      await assert.rejects(docker.getContainer(workloadName(s.id)).inspect(), /no such container/i);
    } finally {
      await slow.close();
    }
  });

  test("two tenants' containers cannot reach each other; one tenant's can", async () => {
    const a = await tenantOn(t);
    const b = await tenantOn(t);
    const a1 = await a.client.createService({ name: 'a1', image: BUSYBOX_IMAGE });
    const a2 = await a.client.createService({ name: 'a2', image: BUSYBOX_IMAGE });
    const b1 = await b.client.createService({ name: 'b1', image: BUSYBOX_IMAGE });
    for (const [c, id] of [[a, a1.id], [a, a2.id], [b, b1.id]] as const) {
      const s = await settled(c, id);
      assert.equal(s.status, 'running', s.last_error ?? '');
    }
    const ipOf = async (id: string) => Object.values((await docker.getContainer(workloadName(id)).inspect()).NetworkSettings.Networks)[0]?.IPAddress;
    // Reachable: retried, since a loaded machine can miss nc's 2 s; unreachable must hold every time.
    let sameTenant = '';
    for (let i = 0; i < 5 && !sameTenant.includes('hello from svc-test'); i++) {
      sameTenant = await fetchFromService(a1.id, `/cgi-bin/fetch?${await ipOf(a2.id)}:8000`);
    }
    assert.match(sameTenant, /hello from svc-test/, 'same tenant: reachable');
    assert.match(await fetchFromService(a1.id, `/cgi-bin/fetch?${await ipOf(b1.id)}:8000`), /unreachable/, 'other tenant: not reachable');
    assert.match(await fetchFromService(b1.id, `/cgi-bin/fetch?${await ipOf(a1.id)}:8000`), /unreachable/);
    // svcd's API port from a container: isolation.test.ts, with svcd on every address and the
    // probe through the tenant network's gateway (here svcd's 127.0.0.1 is the container's own).
  });

  test('crash loop: restarts with backoff, the fifth crash in 10 minutes opens the circuit, reset closes it', async () => {
    // A short settle: each crash is judged 200 ms after its exit instead of 2 s (the engine is not going away here).
    const fast = await startServer({ realTime: true, overrides: { readyTimeoutMs: 5_000, crashBackoffMs: 20, exitSettleMs: 200 } });
    try {
      const a = await tenantOn(fast);
      const s = await a.client.createService({ name: 'crashy', image: BUSYBOX_IMAGE });
      assert.equal((await settled(a, s.id)).status, 'running');
      for (let i = 1; i <= 5; i++) {
        await crash(s.id);
        // The next state after the crash: back to running (restarted), or crashed after the fifth.
        await waitFor(`crash ${i} to be handled`, async () => {
          const now = await a.client.service(s.id);
          return now.crash_count === i && (i < 5 ? now.status === 'running' : now.status === 'crashed');
        });
      }
      const open = await a.client.service(s.id);
      assert.equal(open.circuit_open, true);
      assert.match(open.last_error ?? '', /circuit/);
      assert.equal(typeof open.last_crash_at, 'number');
      const reasons = (await a.client.deployments(s.id)).map((d) => d.reason);
      assert.deepEqual(reasons, ['crash', 'crash', 'crash', 'crash', 'create'], 'four restarts, none after the fifth crash');
      assert.equal((await a.client.raw('POST', `/v1/services/${s.id}/restart`)).status, 409, 'the circuit blocks deploys');
      const actions = (await a.client.activity({ service_id: s.id })).map((e) => e.action);
      assert.ok(actions.includes('service.circuit_opened'));

      await a.client.serviceAction(s.id, 'reset');
      const reset = await settled(a, s.id);
      assert.equal(reset.status, 'running');
      assert.equal(reset.crash_count, 0);
      assert.equal(reset.circuit_open, false);
    } finally {
      await fast.close();
    }
  });

  test('reconcile: a vanished container is redeployed; a container no service owns is removed', async () => {
    // As if svcd had been down when the container went: no exit event is seen. Nothing here waits
    // out the readiness deadline: a loaded machine (the beside lane) gets time to start it.
    const quiet = await startServer({ realTime: true, overrides: { readyTimeoutMs: 30_000 } });
    try {
      await quiet.deps.crashes.close();
      const a = await tenantOn(quiet);
      const s = await a.client.createService({ name: 'healed', image: BUSYBOX_IMAGE });
      await settled(a, s.id);
      const before = (await docker.getContainer(workloadName(s.id)).inspect()).Id;
      await docker.getContainer(before).remove({ force: true });
      await quiet.deps.workloads.reconcile();
      const healed = await settled(a, s.id);
      assert.equal(healed.status, 'running');
      const after = (await docker.getContainer(workloadName(s.id)).inspect()).Id;
      assert.notEqual(after, before);
      assert.equal((await a.client.deployments(s.id))[0]?.reason, 'reconcile');

      // An orphan: a service container of this installation whose service is gone.
      const { ref: orphan } = await quiet.deps.runtime.apply({
        spec: {
          name: `svc-orphan-${Date.now()}`,
          image: BUSYBOX_IMAGE,
          env: {},
          port: 8000,
          tenantId: a.id,
          kind: 'service',
          resourceId: 'no-such-service',
          limits: { memoryMb: 64, cpus: 0.1, pids: 64 },
          sandbox: false,
        },
        pull: 'never',
        ready: { timeoutMs: 30_000, everyMs: 50, probeTimeoutMs: 1_000 },
        signal: new AbortController().signal,
      });
      await quiet.deps.workloads.reconcile();
      assert.equal(await quiet.deps.runtime.inspect(orphan), null);
      assert.ok(await quiet.deps.runtime.inspect(after), 'the owned container stays');
    } finally {
      await quiet.close();
    }
  });

  test('snapshots: image, port and env saved; a service created from one runs with them; they outlive the service', async () => {
    const a = await tenantOn(t);
    const b = await tenantOn(t);
    const s = await a.client.createService({ name: 'original', image: BUSYBOX_IMAGE, port: 8000, env: { SECRET: 'kept' } });
    await settled(a, s.id);
    const r = await a.client.raw<{ id: string; env_keys: string[]; image: string; port: number; service_id: string }>('POST', `/v1/services/${s.id}/snapshots`, {
      body: { name: 'v1', description: 'before the change' },
    });
    assert.equal(r.status, 201);
    assert.deepEqual([r.body.image, r.body.port, r.body.env_keys, r.body.service_id], [BUSYBOX_IMAGE, 8000, ['SECRET'], s.id]);
    assert.ok(!r.text.includes('kept'), 'env values are not shown');
    assert.equal((await a.client.listSnapshots()).length, 1);
    assert.equal((await b.client.raw('GET', `/v1/snapshots/${r.body.id}`)).status, 404, "another tenant's snapshot is a 404");
    assert.equal((await b.client.raw('POST', '/v1/services', { query: { from_snapshot: r.body.id }, body: { name: 'stolen' } })).status, 404);

    const refused = await a.client.raw('POST', '/v1/services', { query: { from_snapshot: r.body.id }, body: { name: 'x', image: BUSYBOX_IMAGE } });
    assert.equal(refused.status, 400, 'with from_snapshot only the name is given');
    const copy = await a.client.serviceFromSnapshot(r.body.id, 'copy');
    assert.equal(copy.image, BUSYBOX_IMAGE);
    assert.equal((await settled(a, copy.id)).status, 'running');
    assert.match(await fetchFromService(copy.id, '/cgi-bin/env'), /^SECRET=kept$/m);

    await a.client.deleteService(s.id);
    assert.equal((await a.client.snapshot(r.body.id)).service_id, null, 'the snapshot outlives its service');
    await a.client.deleteSnapshot(r.body.id);
    assert.equal((await a.client.raw('GET', `/v1/snapshots/${r.body.id}`)).status, 404);
    const actions = (await a.client.activity({ resource_type: 'snapshot' })).map((e) => e.action);
    assert.deepEqual(actions, ['snapshot.deleted', 'snapshot.created']);
  });

  test('with --base-domain: DNS labels are unique across tenants, reserved ones refused, url under the domain', async () => {
    const bd = await startServer({ realTime: true, config: { baseDomain: 'apps.example.test', proxyListen: '127.0.0.1:1' } });
    try {
      const a = await tenantOn(bd);
      const b = await tenantOn(bd);
      const s = await a.client.createService({ name: 'Shop Front', image: BUSYBOX_IMAGE });
      assert.equal(s.dns_label, 'shop-front');
      assert.equal(s.url, 'http://shop-front.apps.example.test:1');
      const taken = await b.client.raw<{ error: string }>('POST', '/v1/services', { body: { name: 'shop.front', image: BUSYBOX_IMAGE } });
      assert.equal(taken.status, 409);
      assert.match(taken.body.error, /DNS label "shop-front" is taken/);
      const reserved = await b.client.raw<{ error: string }>('POST', '/v1/services', { body: { name: 'api', image: BUSYBOX_IMAGE } });
      assert.equal(reserved.status, 409);
      assert.match(reserved.body.error, /reserved/);
      await a.client.deleteService(s.id);
      assert.equal((await b.client.raw('POST', '/v1/services', { body: { name: 'shop front', image: BUSYBOX_IMAGE } })).status, 201, 'free again once deleted');
    } finally {
      await bd.close();
    }
  });

  test('a loopback registry image deploys; redeploy pulls it again', async () => {
    const registry = await startRegistry();
    try {
      const image = `${registry.host}/svc-test/pulled:1`;
      await pushToRegistry(BUSYBOX_IMAGE, image);
      await docker.getImage(image).remove();
      const a = await tenantOn(t);
      const s = await a.client.createService({ name: 'from-registry', image });
      const first = await settled(a, s.id);
      assert.equal(first.status, 'running', `pulled from the loopback registry on first deploy: ${first.last_error ?? ''}`);
      await docker.getContainer(workloadName(s.id)).remove({ force: true });
      await docker.getImage(image).remove({ force: true });
      const r = await a.client.serviceAction(s.id, 'redeploy');
      assert.equal(r.deployment?.reason, 'redeploy');
      assert.equal((await settled(a, s.id)).status, 'running');
      assert.ok(await docker.getImage(image).inspect(), 'the redeploy pulled the image again');
    } finally {
      await registry.stop();
    }
  });

  test('delete removes the container, and the tenant network with the last service; suspension stops services', async () => {
    const a = await tenantOn(t);
    const s = await a.client.createService({ name: 'doomed', image: BUSYBOX_IMAGE });
    await settled(a, s.id);
    assert.equal((await a.client.raw('DELETE', `/v1/services/${s.id}`)).status, 204);
    await assert.rejects(docker.getContainer(workloadName(s.id)).inspect(), /no such container/i);
    await assert.rejects(docker.getNetwork(tenantNetworkName(a.id)).inspect(), /not found/i);
    assert.equal((await a.client.raw('GET', `/v1/services/${s.id}`)).status, 404);
    assert.ok((await a.client.activity()).some((e) => e.action === 'service.deleted'));

    const kept = await a.client.createService({ name: 'suspended-one', image: BUSYBOX_IMAGE });
    await settled(a, kept.id);
    await a.client.suspendTenant();
    const row = await t.deps.store.services.findAny(kept.id);
    assert.equal(row?.status, 'stopped');
    await assert.rejects(docker.getContainer(workloadName(kept.id)).inspect(), /no such container/i);
  });
});
