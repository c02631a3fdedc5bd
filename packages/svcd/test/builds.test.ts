// Builds from git against the real engine, from repositories a loopback `git daemon` serves,
// deployed and reached through svc's Caddy.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { ADMIN_TOKEN, freePort, newTenant, startServer, viaProxy, waitFor, type TestServer } from './harness.js';
import { BUSYBOX_IMAGE, SLEEPER_IMAGE, TEST_REGISTRY, docker, ensureTestImages, pushToRegistry, removeImages, removeTenantWorkloads, startRegistry } from './images.js';
import { commit, dockerfile, gitHttpBackend, repo, startGitServer, type GitServer } from './git-fixtures.js';
import { finishedBuild } from './service-fixtures.js';
import { killableSvcd } from './svcd-process.js';

type Tenant = Awaited<ReturnType<typeof newTenant>>;

/** Waits until the service answers `text` through the proxy (a redeploy replaces the container). */
async function answers(port: number, serviceId: string, text: string): Promise<void> {
  await waitFor(`service to answer ${JSON.stringify(text)}`, async () => {
    const r = await viaProxy(port, `${serviceId}.localhost:${port}`, '/index.html').catch(() => ({ status: 0, body: '' }));
    return r.status === 200 && r.body === text ? true : undefined;
  }, 60_000);
}

/** When the engine pulled `image` since `startedAt` (ms), by its events. */
async function pullsSince(image: string, startedAt: number): Promise<number[]> {
  const events = await docker.getEvents({ since: Math.floor(startedAt / 1000), until: Math.ceil(Date.now() / 1000) + 1, filters: { type: ['image'], event: ['pull'] } });
  const pulls: number[] = [];
  for await (const chunk of events as AsyncIterable<Buffer>) {
    for (const line of chunk.toString().split('\n').filter(Boolean)) {
      const e = JSON.parse(line) as { Actor?: { ID?: string }; timeNano: number };
      const at = e.timeNano / 1e6;
      if (e.Actor?.ID === image && at >= startedAt) pulls.push(at);
    }
  }
  return pulls;
}

describe('builds from git', () => {
  let t: TestServer;
  let git: GitServer;
  let proxyPort: number;
  const tenants: string[] = [];
  const tenant = async (): Promise<Tenant> => {
    const a = await newTenant(t);
    tenants.push(a.id);
    return a;
  };

  before(async () => {
    await ensureTestImages();
    git = await startGitServer({ quiet: { Dockerfile: dockerfile('RUN sleep 7 && echo done sleeping') } });
    proxyPort = await freePort();
    // Every build pulls its base images here (the pulls ahead of a clone are under test); a
    // tenant's recent pull used again has a describe of its own below.
    t = await startServer({ realTime: true, config: { adminTokens: [ADMIN_TOKEN], proxyListen: `127.0.0.1:${proxyPort}`, baseImageReuseSeconds: 0 }, overrides: { readyTimeoutMs: 10_000 } });
    t.client.adminToken = ADMIN_TOKEN;
  });
  after(async () => {
    await t.close();
    await removeTenantWorkloads(tenants);
    for (const id of tenants) await removeImages(`svc/${id}/*`);
    await git.stop();
  });

  test('validation: source type, URL, ref and service; nothing is queued by a refused request', async () => {
    const a = await tenant();
    const s = await a.client.createService({ name: 'val', image: BUSYBOX_IMAGE });
    const post = (body: unknown, id = s.id) => a.client.raw<{ error: string }>('POST', `/v1/services/${id}/builds`, { body });
    const cases: Array<[unknown, number, RegExp]> = [
      [{ source_type: 'svn', source_url: git.url('app') }, 400, /source_type must be git/],
      [{ source_type: 'git', source_url: 'https://10.1.2.3/x.git' }, 400, /public address/],
      [{ source_type: 'git', source_url: 'ftp://example.com/x' }, 400, /https:\/\/ or git:\/\//],
      [{ source_type: 'git', source_url: git.url('app'), source_ref: '--upload-pack=touch /tmp/x' }, 400, /branch, a tag or a commit SHA/],
      [{ source_type: 'git' }, 400, /source_url/],
    ];
    for (const [body, status, msg] of cases) {
      const r = await post(body);
      assert.equal(r.status, status, JSON.stringify(body));
      assert.match(r.body.error, msg);
    }
    assert.equal((await post({ source_type: 'git', source_url: git.url('app') }, 'nope')).status, 404);
    const other = await tenant();
    assert.equal((await other.client.raw('POST', `/v1/services/${s.id}/builds`, { body: { source_type: 'git', source_url: git.url('app') } })).status, 404, "another tenant's service is a 404");
    assert.deepEqual(await a.client.builds(s.id), []);
  });

  test('branch, tag and SHA refs build, redeploy the service, and answer through the proxy', async () => {
    const a = await tenant();
    const s = await a.client.createService({ name: 'from-git', image: BUSYBOX_IMAGE });
    const created = await a.client.raw<{ build_id: string; status: string; image: string }>('POST', `/v1/services/${s.id}/builds`, {
      body: { source_type: 'git', source_url: git.url('app'), source_ref: 'main' },
    });
    assert.equal(created.status, 202);
    assert.equal(created.body.status, 'queued');
    assert.equal(created.body.image, `svc/${a.id}/${s.id}:${created.body.build_id}`);
    const main = await finishedBuild(a.client, s.id, created.body.build_id);
    assert.equal(main.status, 'succeeded', main.last_error ?? '');
    assert.equal(main.commit_sha, git.shas.v2);
    assert.ok(main.deployment_id);
    assert.ok(main.duration_ms !== null && main.duration_ms > 0);
    await answers(proxyPort, s.id, 'v2 from git\n');
    assert.equal((await a.client.service(s.id)).image, created.body.image);
    const dep = (await a.client.deployments(s.id)).find((d) => d.id === main.deployment_id);
    assert.equal(dep?.reason, 'build');
    assert.equal(dep.build_id, main.id);
    const log = await a.client.buildLogs(s.id, main.id);
    assert.match(log, /==> cloning git:\/\/127\.0\.0\.1:\d+\/app at main/);
    assert.match(log, new RegExp(`==> commit ${git.shas.v2}`));
    assert.match(log, /Step 2\/2 : COPY index.html/);

    for (const [ref, sha, text] of [
      ['v1', git.shas.v1, 'v1 from git\n'],
      ['feature', git.shas.feature, 'feature branch\n'],
      [git.shas.v2, git.shas.v2, 'v2 from git\n'],
      [git.shas.v1.slice(0, 10), git.shas.v1, 'v1 from git\n'],
    ] as const) {
      const b = await a.client.createBuild(s.id, { source_type: 'git', source_url: git.url('app'), source_ref: ref });
      const done = await finishedBuild(a.client, s.id, b.build_id);
      assert.equal(done.status, 'succeeded', `${ref}: ${done.last_error ?? ''}`);
      assert.equal(done.commit_sha, sha, ref);
      await answers(proxyPort, s.id, text);
    }
    const all = await a.client.builds(s.id);
    assert.equal(all.length, 5);
    assert.equal(all[0]!.source_ref, git.shas.v1.slice(0, 10), 'newest first');
    // The service keeps the images of its newest three successful builds; older ones are removed
    // (they count against the tenant's disk quota, and nothing else would ever remove them).
    const tagged = (image: string) => docker.getImage(image).inspect().then(() => true, () => false);
    assert.deepEqual(await Promise.all(all.map((b) => tagged(b.image))), [true, true, true, false, false]);
    assert.equal((await a.client.tenantBuilds(2)).length, 2, 'GET /v1/builds?limit=');
    const actions = (await a.client.activity({ resource_type: 'build' })).map((e) => e.action);
    for (const action of ['build.queued', 'build.started', 'build.succeeded']) assert.ok(actions.includes(action), action);

    const images = () => docker.listImages({ filters: { reference: [`svc/${a.id}/${s.id}`] } });
    assert.ok((await images()).length >= 3, 'one image per distinct build');
    await a.client.deleteService(s.id);
    assert.deepEqual(await images(), [], "deleting the service removes its builds' images");
    assert.equal((await a.client.raw('GET', `/v1/services/${s.id}/builds/${main.id}`)).status, 404);
  });

  test('a broken Dockerfile fails with its error in the logs; the service keeps its image', async () => {
    const a = await tenant();
    const s = await a.client.createService({ name: 'broken', image: BUSYBOX_IMAGE });
    const b = await a.client.createBuild(s.id, { source_type: 'git', source_url: git.url('broken') });
    const done = await finishedBuild(a.client, s.id, b.build_id);
    assert.equal(done.status, 'failed');
    assert.match(done.last_error ?? '', /returned a non-zero code: 7/);
    const log = await a.client.buildLogs(s.id, b.build_id);
    assert.match(log, /about to fail/);
    assert.match(log, /==> build failed: .*non-zero code: 7/);
    assert.equal((await a.client.service(s.id)).image, BUSYBOX_IMAGE);

    const none = await a.client.createBuild(s.id, { source_type: 'git', source_url: git.url('no-dockerfile') });
    assert.match((await finishedBuild(a.client, s.id, none.build_id)).last_error ?? '', /no Dockerfile/);
    const missing = await a.client.createBuild(s.id, { source_type: 'git', source_url: git.url('app'), source_ref: 'no-such-branch' });
    const m = await finishedBuild(a.client, s.id, missing.build_id);
    assert.equal(m.status, 'failed');
    assert.match(m.last_error ?? '', /couldn't find remote ref no-such-branch|not found/);
  });

  test('a step that prints nothing for several seconds builds (no idle timeout cuts the engine stream)', async () => {
    const a = await tenant();
    const s = await a.client.createService({ name: 'quiet', image: BUSYBOX_IMAGE });
    const b = await a.client.createBuild(s.id, { source_type: 'git', source_url: git.url('quiet') });
    const done = await finishedBuild(a.client, s.id, b.build_id);
    const log = await a.client.buildLogs(s.id, b.build_id);
    assert.equal(done.status, 'succeeded', log);
    assert.match(log, /done sleeping/);
  });

  test("the base images the previous build named (the service's, or for its first build its tenant's) are pulled while git clones; each is pulled once, and the build's record names them", async () => {
    // A git server whose pack answers take 1.5 s: a clone that long, so the order of the pull and
    // the clone's end is plain in the engine's events.
    const base = mkdtempSync(join(tmpdir(), 'svc-slow-git-'));
    commit(base, 'site', repo(base, 'site'), { Dockerfile: dockerfile('COPY index.html /www/index.html'), 'index.html': 'slow clone\n' }, 'site');
    const backend = gitHttpBackend(base);
    let packSentAt: number[] = [];
    const server = createServer((req, res) => {
      if (req.method !== 'POST') {
        backend(req, res);
        return;
      }
      res.on('finish', () => packSentAt.push(Date.now()));
      setTimeout(() => backend(req, res), 1_500);
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    try {
      const a = await tenant();
      const s = await a.client.createService({ name: 'prefetch', image: BUSYBOX_IMAGE });
      // Its own deploy pulls the same image: done before the builds are watched.
      await waitFor('the service to be deployed', async () => ((await a.client.service(s.id)).status === 'deploying' ? undefined : true));
      const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/site`;
      const build = async (serviceId = s.id, client = a.client) => {
        const startedAt = Date.now();
        const b = await client.createBuild(serviceId, { source_type: 'git', source_url: url });
        const done = await finishedBuild(client, serviceId, b.build_id);
        assert.equal(done.status, 'succeeded', done.last_error ?? '');
        return { done, pulls: await pullsSince(BUSYBOX_IMAGE, startedAt) };
      };
      const first = await build();
      const row = await t.deps.store.builds.findAny(first.done.id);
      assert.deepEqual(JSON.parse(row?.base_images ?? 'null'), [BUSYBOX_IMAGE], 'the record names the images its Dockerfile named');
      assert.equal(first.pulls.length, 1, 'the first build pulls its base image once, after the clone');
      assert.ok((first.pulls[0] ?? 0) > (packSentAt.at(-1) ?? Infinity), 'nothing to guess from: after the clone');

      packSentAt = [];
      const second = await build();
      assert.equal(second.pulls.length, 1, 'pulled once, not again after the clone');
      assert.ok((second.pulls[0] ?? Infinity) < (packSentAt.at(-1) ?? 0), `pulled while git cloned: ${JSON.stringify({ pulls: second.pulls, packSentAt })}`);

      // A record that cannot be read is no guess: the build pulls after the clone, and succeeds.
      assert.equal(await t.deps.store.builds.transition(second.done.id, ['succeeded'], { status: 'succeeded', base_images: '["unterminated' }), true);
      packSentAt = [];
      const third = await build();
      assert.equal(third.pulls.length, 1);
      assert.ok((third.pulls[0] ?? 0) > (packSentAt.at(-1) ?? Infinity), 'after the clone');

      // A new service's first build guesses from its tenant's latest build: pulled while git clones.
      const sibling = await a.client.createService({ name: 'prefetch-sibling', image: BUSYBOX_IMAGE });
      await waitFor('the sibling to be deployed', async () => ((await a.client.service(sibling.id)).status === 'deploying' ? undefined : true));
      packSentAt = [];
      const siblings = await build(sibling.id);
      assert.equal(siblings.pulls.length, 1);
      assert.ok((siblings.pulls[0] ?? Infinity) < (packSentAt.at(-1) ?? 0), `pulled while git cloned: ${JSON.stringify({ pulls: siblings.pulls, packSentAt })}`);
      // Another tenant's builds are no guess for this one's: its first build pulls after the clone.
      const b = await tenant();
      const stranger = await b.client.createService({ name: 'prefetch-stranger', image: BUSYBOX_IMAGE });
      await waitFor("the other tenant's service to be deployed", async () => ((await b.client.service(stranger.id)).status === 'deploying' ? undefined : true));
      packSentAt = [];
      const strangers = await build(stranger.id, b.client);
      assert.equal(strangers.pulls.length, 1);
      assert.ok((strangers.pulls[0] ?? 0) > (packSentAt.at(-1) ?? Infinity), "another tenant's build is no guess: after the clone");
    } finally {
      server.close();
      rmSync(base, { recursive: true, force: true });
    }
  });

  test('cancel stops a running build at once; a finished build cannot be cancelled', async () => {
    const a = await tenant();
    const s = await a.client.createService({ name: 'cancel-me', image: BUSYBOX_IMAGE });
    const b = await a.client.createBuild(s.id, { source_type: 'git', source_url: git.url('slow') });
    await waitFor('the slow step to start', async () => ((await a.client.buildLogs(s.id, b.build_id)).includes('slow step starting') ? true : undefined), 60_000);
    const t0 = Date.now();
    const r = await a.client.raw<{ status: string }>('DELETE', `/v1/services/${s.id}/builds/${b.build_id}`);
    assert.equal(r.status, 200);
    assert.deepEqual(r.body, { status: 'cancelled' });
    const now = await a.client.build(s.id, b.build_id);
    assert.equal(now.status, 'cancelled');
    assert.ok(Date.now() - t0 < 5_000);
    // The engine's build container goes away with the build.
    await waitFor('the build container to be removed', async () => {
      const list = await docker.listContainers({ all: true });
      return list.some((c) => c.Command.includes('slow step starting')) ? undefined : true;
    }, 30_000);
    await waitFor('the runner to let go', async () => (t.deps.buildRunner.active === 0 ? true : undefined));
    assert.equal((await a.client.build(s.id, b.build_id)).status, 'cancelled', 'the runner does not overwrite a cancel');
    assert.equal((await a.client.raw('DELETE', `/v1/services/${s.id}/builds/${b.build_id}`)).status, 409);
  });

  test('the queue: max_builds_concurrent run, ten wait, one more is 409; suspension cancels them all', async () => {
    const a = await tenant();
    await t.client.patchQuotas(a.id, { max_builds_concurrent: 1 });
    const s = await a.client.createService({ name: 'queue', image: BUSYBOX_IMAGE });
    const body = { source_type: 'git', source_url: git.url('slow') };
    const first = await a.client.createBuild(s.id, body);
    await waitFor('the first build to run', async () => ((await a.client.build(s.id, first.build_id)).status === 'running' ? true : undefined));
    const queued: string[] = [];
    for (let i = 0; i < 10; i++) queued.push((await a.client.createBuild(s.id, body)).build_id);
    const full = await a.client.raw<{ error: string }>('POST', `/v1/services/${s.id}/builds`, { body });
    assert.equal(full.status, 409);
    assert.match(full.body.error, /build queue is full/);
    await new Promise((r) => setTimeout(r, 1_500)); // a few ticks: the concurrency holds
    assert.deepEqual(new Set((await a.client.builds(s.id)).filter((b) => b.id !== first.build_id).map((b) => b.status)), new Set(['queued']));

    await a.client.raw('DELETE', '/v1/tenant');
    await waitFor('every build cancelled', async () => {
      const rows = await Promise.all([first.build_id, ...queued].map((id) => t.deps.store.builds.findAny(id)));
      return rows.every((b) => b?.status === 'cancelled') ? true : undefined;
    });
  });

  test('follow streams the output and ends with the build', async () => {
    const a = await tenant();
    const s = await a.client.createService({ name: 'follow', image: BUSYBOX_IMAGE });
    const b = await a.client.createBuild(s.id, { source_type: 'git', source_url: git.url('app'), source_ref: 'v1' });
    const res = await fetch(`${t.url}/v1/services/${s.id}/builds/${b.build_id}/logs?follow=true`, { headers: { authorization: `Bearer ${a.key}` } });
    assert.equal(res.status, 200);
    assert.match(res.headers.get('content-type') ?? '', /text\/plain/);
    const text = await res.text(); // resolves only when the server ends the stream
    const after = await a.client.build(s.id, b.build_id);
    assert.equal(after.status, 'succeeded', after.last_error ?? '');
    assert.match(text, /==> cloning/);
    assert.match(text, /==> built; deploying/);
    const missing = await fetch(`${t.url}/v1/services/${s.id}/builds/nope/logs?follow=true`, { headers: { authorization: `Bearer ${a.key}` } });
    assert.equal(missing.status, 404, 'existence is checked before the 200');
  });
});

describe("a tenant's recent pull of a base image (--base-image-reuse)", () => {
  test("serves the tenant's next build without a pull; another tenant's build pulls, and so does the tenant's once the name holds another copy", async () => {
    await ensureTestImages();
    // A name of this test's own in the registry: its local tag is moved below.
    const repository = `${TEST_REGISTRY}/svc-test/reused-base`;
    const base = `${repository}:1`;
    await pushToRegistry(BUSYBOX_IMAGE, base);
    const git = await startGitServer({ reuse: { Dockerfile: `FROM ${base}\nCOPY index.html /www/index.html\n`, 'index.html': 'reused\n' } });
    // A window of 10 minutes: the builds below follow each other within seconds, on a slow machine too.
    const t = await startServer({ realTime: true, config: { baseImageReuseSeconds: 600 }, overrides: { readyTimeoutMs: 10_000 } });
    const a = await newTenant(t);
    const b = await newTenant(t);
    try {
      const build = async (tenant: Tenant, serviceId: string) => {
        const startedAt = Date.now();
        const created = await tenant.client.createBuild(serviceId, { source_type: 'git', source_url: git.url('reuse') });
        const done = await finishedBuild(tenant.client, serviceId, created.build_id);
        const log = await tenant.client.buildLogs(serviceId, created.build_id);
        assert.equal(done.status, 'succeeded', `${done.last_error}\n${log}`);
        return { log, pulls: (await pullsSince(base, startedAt)).length };
      };
      const registryCopy = (await docker.getImage(base).inspect()).Id;
      const sa = await a.client.createService({ name: 'reuse', await_build: true });
      const first = await build(a, sa.id);
      assert.equal(first.pulls, 1);
      assert.match(first.log, /==> pulling /);

      const second = await build(a, sa.id);
      assert.equal(second.pulls, 0, 'the registry was not asked');
      assert.match(second.log, /was pulled for this tenant \d+ s ago: not pulled again \(within --base-image-reuse, 600 s\)/);
      assert.ok(second.log.includes(`FROM ${registryCopy}`), 'built from the copy the first pull checked');

      // A's pull proves nothing for B.
      const sb = await b.client.createService({ name: 'reuse', await_build: true });
      const other = await build(b, sb.id);
      assert.equal(other.pulls, 1);

      // The name moved to another copy on the engine (a local tag): not the one A's pull checked.
      await docker.getImage(SLEEPER_IMAGE).tag({ repo: repository, tag: '1' });
      const moved = await build(a, sa.id);
      assert.equal(moved.pulls, 1, 'pulled again');
      assert.match(moved.log, /==> pulling /);
      assert.ok(moved.log.includes(`FROM ${registryCopy}`), "built from the registry's copy, pulled back under the name");
    } finally {
      await t.close();
      await removeTenantWorkloads([a.id, b.id]);
      for (const id of [a.id, b.id]) await removeImages(`svc/${id}/*`);
      await docker.getImage(base).remove({ force: true }).catch(() => {});
      await git.stop();
    }
  });
});

describe('builds pushed to a build registry', () => {
  test('with --build-registry the image is tagged under it, pushed, and pulled again by a redeploy', async () => {
    await ensureTestImages();
    const git = await startGitServer();
    const registry = await startRegistry();
    const t = await startServer({ realTime: true, config: { buildRegistry: registry.host }, overrides: { readyTimeoutMs: 10_000 } });
    const a = await newTenant(t);
    try {
      const s = await a.client.createService({ name: 'pushed', image: BUSYBOX_IMAGE });
      const b = await a.client.createBuild(s.id, { source_type: 'git', source_url: git.url('app'), source_ref: 'v1' });
      assert.equal(b.image, `${registry.host}/svc/${a.id}/${s.id}:${b.build_id}`);
      const done = await finishedBuild(a.client, s.id, b.build_id);
      assert.equal(done.status, 'succeeded', done.last_error ?? '');
      assert.match(await a.client.buildLogs(s.id, b.build_id), /==> pushing/);
      const tags = (await (await fetch(`http://${registry.host}/v2/svc/${a.id}/${s.id}/tags/list`)).json()) as { tags: string[] };
      assert.deepEqual(tags.tags, [b.build_id]);

      // The local copy gone, a redeploy pulls it back from the registry.
      await waitFor('the build deployment', async () => ((await a.client.service(s.id)).status === 'running' ? true : undefined), 60_000);
      await docker.getImage(b.image).remove({ force: true });
      const redeploy = await a.client.serviceAction(s.id, 'redeploy');
      assert.equal(redeploy.deployment?.image, b.image);
      await waitFor('the redeploy', async () => ((await a.client.service(s.id)).status === 'running' ? true : undefined), 60_000);
      assert.equal((await a.client.deployments(s.id))[0]?.status, 'succeeded');
      await docker.getImage(b.image).inspect(); // pulled back
    } finally {
      await t.close();
      await removeTenantWorkloads([a.id]);
      await removeImages(`${registry.host}/svc/${a.id}/*`);
      await registry.stop();
      await git.stop();
    }
  });
});

describe('builds across a restart of svcd', () => {
  test('SIGKILL mid-build: the running build fails as interrupted, the queued one runs after the restart', async () => {
    await ensureTestImages();
    const git = await startGitServer();
    const svcd = await killableSvcd('restart-builds', [], { SVC_ADMIN_TOKEN: ADMIN_TOKEN });
    try {
      const c = svcd.client;
      await c.patchQuotas(svcd.tenantId, { max_builds_concurrent: 1 });
      const s = await c.createService({ name: 'restarted', image: BUSYBOX_IMAGE });
      const slow = await c.createBuild(s.id, { source_type: 'git', source_url: git.url('slow') });
      const quick = await c.createBuild(s.id, { source_type: 'git', source_url: git.url('app'), source_ref: 'v1' });
      await waitFor('the slow build to run', async () => ((await c.build(s.id, slow.build_id)).status === 'running' ? true : undefined), 60_000);
      assert.equal((await c.build(s.id, quick.build_id)).status, 'queued');
      await svcd.kill();

      const c2 = await svcd.restart();
      const interrupted = await c2.build(s.id, slow.build_id);
      assert.equal(interrupted.status, 'failed');
      assert.match(interrupted.last_error ?? '', /interrupted: svcd stopped during this build/);
      const done = await finishedBuild(c2, s.id, quick.build_id);
      assert.equal(done.status, 'succeeded', done.last_error ?? '');
      assert.equal(done.commit_sha, git.shas.v1);
    } finally {
      await svcd.close();
      await removeImages(`svc/${svcd.tenantId}/*`);
      await git.stop();
    }
  });
});

describe('build workers shared between tenants', () => {
  test('a tenant with many queued builds never holds every worker: another tenant\'s build starts beside them', async () => {
    await ensureTestImages();
    const git = await startGitServer();
    const t = await startServer({ realTime: true, overrides: { buildRunner: { workers: 2 } } });
    const ids: string[] = [];
    try {
      const [a, b] = [await newTenant(t), await newTenant(t)];
      ids.push(a.id, b.id);
      const body = { source_type: 'git' as const, source_url: git.url('slow') };
      const sa = await a.client.createService({ name: 'busy', image: BUSYBOX_IMAGE });
      const many: string[] = [];
      for (let i = 0; i < 3; i++) many.push((await a.client.createBuild(sa.id, body)).build_id);
      await waitFor("the busy tenant's first build to run", async () => (await a.client.build(sa.id, many[0]!)).status === 'running', 60_000);
      const sb = await b.client.createService({ name: 'patient', image: BUSYBOX_IMAGE });
      const one = await b.client.createBuild(sb.id, body);
      await waitFor("the other tenant's build to run", async () => (await b.client.build(sb.id, one.build_id)).status === 'running', 30_000);
      // Two workers: the busy tenant keeps one (its share), and its other builds still wait.
      const statuses = await Promise.all(many.map(async (id) => (await a.client.build(sa.id, id)).status));
      assert.deepEqual(statuses.sort(), ['queued', 'queued', 'running']);
    } finally {
      await t.close();
      await removeTenantWorkloads(ids);
      await git.stop();
    }
  });
});
