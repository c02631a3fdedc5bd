// Builds from an uploaded source archive (issue 25) against the real engine, on both stores: the
// upload's checks answer hostile archives with a clear 4xx and keep nothing; the build's own
// unpacking checks again (an archive put in the store behind the upload's back is refused too)
// and writes nothing outside its scratch area; a good archive builds, deploys a service created
// without an image, and answers through the proxy.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { request as httpRequest } from 'node:http';
import { after, before, describe, test } from 'node:test';
import { gzipSync } from 'node:zlib';
import { SOURCE_ARCHIVE_MAX_BYTES, SOURCE_ARCHIVES_STORED_MAX, type SourceArchive, type SourceUpload } from '@svc/contract';
import { BUILD_QUEUE_MAX } from '../src/builds/builds.js';
import { ADMIN_TOKEN, eachStore, freePort, newTenant, startServer, viaProxy, waitFor, type TestServer } from './harness.js';
import { BUSYBOX_IMAGE, engineTenants, ensureTestImages, removeImages } from './images.js';
import { rewriteHeader, tarOf, type ArchiveEntry } from './archive-fixtures.js';
import { finishedBuild } from './service-fixtures.js';
import { ManualClock } from './manual-clock.js';
import { Retention } from '../src/retention/retention.js';
import { DEFAULT_RETENTION } from '../src/retention/rules.js';
import pino from 'pino';

type Tenant = Awaited<ReturnType<typeof newTenant>>;

const site = (text: string): ArchiveEntry[] => [
  { name: 'Dockerfile', body: `FROM ${BUSYBOX_IMAGE}\nCOPY index.html /www/index.html\n` },
  { name: 'index.html', body: text },
];

/** A tar whose second entry's header declares `bytes` (its body never comes). */
async function declaring(bytes: number): Promise<Buffer> {
  const tar = await tarOf([{ name: 'Dockerfile', body: `FROM ${BUSYBOX_IMAGE}\n` }, { name: 'big', size: 0 }]);
  return rewriteHeader(tar, 512 * 2, (h) => h.write(bytes.toString(8).padStart(11, '0') + '\0', 124, 'latin1'));
}

/**
 * POST .../sources?build=true of `body` in two halves, `meanwhile` run between them (once the
 * upload has begun): the answer's status and text.
 */
function uploadWithAPause(base: string, key: string, serviceId: string, body: Buffer, meanwhile: () => Promise<void>): Promise<{ status: number; text: string }> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(`${base}/v1/services/${serviceId}/sources?build=true`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/gzip', 'content-length': String(body.length) },
    });
    req.once('response', (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (text += c));
      res.once('end', () => resolve({ status: res.statusCode ?? 0, text }));
    });
    req.once('error', reject);
    req.write(body.subarray(0, body.length / 2));
    meanwhile().then(() => req.end(body.subarray(body.length / 2)), reject);
  });
}

eachStore((kind) => {
  describe(`builds from an uploaded archive (${kind})`, () => {
    let t: TestServer;
    let proxyPort: number;
    const tenants = engineTenants(() => t);
    const tenant = () => tenants.add();
    const upload = (a: Tenant, serviceId: string, body: Buffer) =>
      a.client.raw<SourceArchive & { error: string }>('POST', `/v1/services/${serviceId}/sources`, { rawBody: new Uint8Array(body), headers: { 'content-type': 'application/gzip' } });

    before(async () => {
      await ensureTestImages();
      proxyPort = await freePort();
      t = await startServer({ store: kind, realTime: true, config: { adminTokens: [ADMIN_TOKEN], proxyListen: `127.0.0.1:${proxyPort}` }, overrides: { readyTimeoutMs: 10_000 } });
    });
    after(async () => {
      await t.close();
      await tenants.cleanup();
      for (const id of tenants.ids) await removeImages(`svc/${id}/*`);
    });

    test('a service created to await its build deploys from an uploaded directory and answers through the proxy', async () => {
      const a = await tenant();
      const created = await a.client.raw<{ id: string; status: string; image: string; error: string }>('POST', '/v1/services', { body: { name: 'from-dir', await_build: true } });
      assert.equal(created.status, 201, created.text);
      assert.equal(created.body.status, 'stopped');
      assert.equal(created.body.image, '');
      const id = created.body.id;
      // Nothing to start before the build; no snapshot of nothing.
      for (const action of ['start', 'restart', 'redeploy', 'reset']) {
        const r = await a.client.raw<{ error: string }>('POST', `/v1/services/${id}/${action}`);
        assert.equal(r.status, 409, action);
        assert.match(r.body.error, /no image yet/);
      }
      assert.equal((await a.client.raw('POST', `/v1/services/${id}/snapshots`, { body: { name: 'nothing' } })).status, 409);
      assert.equal((await a.client.raw('POST', '/v1/services', { body: { name: 'both', image: BUSYBOX_IMAGE, await_build: true } })).status, 400);
      const source = await a.client.createService({ name: 'snapshotted', image: BUSYBOX_IMAGE });
      const snap = await a.client.createSnapshot(source.id, 'snap');
      const fromSnap = await a.client.raw<{ error: string }>('POST', '/v1/services', { query: { from_snapshot: snap.id }, body: { name: 'from-snap', await_build: true } });
      assert.equal(fromSnap.status, 400);
      assert.match(fromSnap.body.error, /await_build/);

      const archive = gzipSync(await tarOf(site('hello from a directory\n')));
      const up = await upload(a, id, archive);
      assert.equal(up.status, 201, up.text);
      assert.equal(up.body.size_bytes, archive.length);
      assert.equal(up.body.files, 2);
      assert.match(up.body.sha256, /^[0-9a-f]{64}$/);
      const b = await a.client.createBuild(id, { source_type: 'archive', source_id: up.body.id });
      // An archive builds once: it is the build's now (then gone, once the build has ended).
      const again = await a.client.raw<{ error: string }>('POST', `/v1/services/${id}/builds`, { body: { source_type: 'archive', source_id: up.body.id } });
      assert.ok(again.status === 409 || again.status === 404, again.text);
      const done = await finishedBuild(a.client, id, b.build_id);
      assert.equal(done.status, 'succeeded', done.last_error ?? '');
      assert.equal(done.source_type, 'archive');
      assert.equal(done.source_url, `archive:sha256:${up.body.sha256}`);
      assert.match(await a.client.buildLogs(id, b.build_id), /==> unpacking the uploaded archive:sha256:[0-9a-f]{64}\n==> 2 files/);
      await waitFor('the built service to answer through the proxy', async () => {
        const r = await viaProxy(proxyPort, `${id}.localhost:${proxyPort}`, '/index.html').catch(() => ({ status: 0, body: '' }));
        return r.status === 200 && r.body === 'hello from a directory\n' ? true : undefined;
      }, 60_000);
      assert.equal((await a.client.service(id)).status, 'running');
      // The archive is not kept once built.
      await waitFor('the archive to be removed', async () => ((await t.deps.store.sourceArchives.findAny(up.body.id)) === undefined ? true : undefined));
      const actions = (await a.client.activity({ resource_type: 'source_archive' })).map((e) => e.action);
      assert.deepEqual(actions, ['source.uploaded']);
    });

    test('hostile uploads are refused with the reason and nothing is kept', async () => {
      const a = await tenant();
      const s = await a.client.createService({ name: 'hostile', await_build: true });
      const canary = `/tmp/svc-archive-canary-${randomBytes(6).toString('hex')}`;
      const dockerfile: ArchiveEntry = { name: 'Dockerfile', body: `FROM ${BUSYBOX_IMAGE}\n` };
      const cases: Array<[string, Buffer, number, RegExp]> = [
        ['absolute path', await tarOf([dockerfile, { name: canary, body: 'x' }]), 400, /absolute paths are not allowed/],
        ['..', await tarOf([dockerfile, { name: `../../../../../../..${canary}`, body: 'x' }]), 400, /"\.\." is not allowed/],
        ['symlink out', await tarOf([dockerfile, { name: 'out', type: 'symlink', linkname: '/tmp' }]), 400, /absolute path \/tmp/],
        ['symlink up', await tarOf([dockerfile, { name: 'a/out', type: 'symlink', linkname: '../../..' }]), 400, /points out of the archive/],
        ['through a symlink', await tarOf([dockerfile, { name: 'd', type: 'directory' }, { name: 'l', type: 'symlink', linkname: 'd' }, { name: 'l/x', body: 'x' }]), 400, /inside the symlink/],
        ['hard link out', await tarOf([dockerfile, { name: 'h', type: 'link', linkname: '/etc/passwd' }]), 400, /absolute paths/],
        ['device', await tarOf([dockerfile, { name: 'mem', type: 'character-device', devmajor: 1, devminor: 1 }]), 400, /character-device/],
        ['not a tar', Buffer.from('this is not an archive\n'.repeat(100)), 400, /not a tar archive/],
        ['no Dockerfile', await tarOf([{ name: 'index.html', body: 'x' }]), 400, /no Dockerfile at its root/],
        // A tar bomb: a few KB of gzip whose entry says 600 MB, refused on that header.
        ['tar bomb', gzipSync(await declaring(600 * 1024 * 1024)), 413, /unpacks to more than 500 MB/],
      ];
      for (const [what, body, status, message] of cases) {
        const r = await upload(a, s.id, body);
        assert.equal(r.status, status, `${what}: ${r.text}`);
        assert.match(r.body.error, message, what);
        assert.equal(r.headers.get('connection'), 'close', `${what}: the rest of a refused body is not read`);
      }
      // Past the size cap as sent: refused on its Content-Length, before anything is read.
      const declared = await new Promise<number>((resolve, reject) => {
        const req = httpRequest(`${t.url}/v1/services/${s.id}/sources`, {
          method: 'POST',
          headers: { authorization: `Bearer ${a.key}`, 'content-type': 'application/gzip', 'content-length': String(SOURCE_ARCHIVE_MAX_BYTES + 1) },
        });
        req.once('response', (res) => {
          res.resume();
          resolve(res.statusCode ?? 0);
          req.destroy();
        });
        req.once('error', reject);
        req.write(Buffer.alloc(1024)); // and no more: the answer comes before the rest would
      });
      assert.equal(declared, 413);
      const over = await upload(a, s.id, Buffer.alloc(SOURCE_ARCHIVE_MAX_BYTES + 1024 * 1024));
      assert.equal(over.status, 413, over.text);
      assert.equal(existsSync(canary), false);
      assert.equal(await t.deps.store.sourceArchives.countStored(a.id), 0, 'no refused upload is kept');
    });

    test('the build checks again: an archive stored behind the upload\'s back fails its build and writes nothing outside', async () => {
      const a = await tenant();
      const s = await a.client.createService({ name: 'behind', await_build: true });
      const canary = `/tmp/svc-archive-canary-${randomBytes(6).toString('hex')}`;
      const hostile = gzipSync(await tarOf([...site('x'), { name: `../../../../../../..${canary}`, body: 'x' }]));
      // Stored as an upload would be, without the upload's check.
      const id = `sneaky${randomBytes(4).toString('hex')}`;
      await t.deps.store.sourceArchives.insert({ id, tenant_id: a.id, service_id: s.id, size_bytes: hostile.length, sha256: 'f'.repeat(64), files: 2, unpacked_bytes: 2, created_at: Math.floor(Date.now() / 1000) });
      await t.deps.store.sourceArchives.appendChunk(id, 1, hostile);
      const b = await a.client.createBuild(s.id, { source_type: 'archive', source_id: id });
      const done = await finishedBuild(a.client, s.id, b.build_id);
      assert.equal(done.status, 'failed');
      assert.match(done.last_error ?? '', /"\.\." is not allowed/);
      assert.equal(existsSync(canary), false);
      assert.equal((await a.client.service(s.id)).status, 'stopped', 'the service still awaits a build');
    });

    test('an archive a build has taken: a second build of it is 409, it counts against the cap, and only its build\'s end lets retention remove it', async () => {
      const a = await tenant();
      const s = await a.client.createService({ name: 'claimed', await_build: true });
      const up = await upload(a, s.id, gzipSync(await tarOf(site('x'))));
      assert.equal(up.status, 201);
      // Taken by a build that another svcd runs, its lease good for an hour: this svcd's build
      // runner leaves it alone (a queued one, as the create writes it, it would start and end
      // under the test's feet: seen on PostgreSQL).
      const store = t.deps.store;
      const buildId = `running${randomBytes(4).toString('hex')}`;
      const now = Math.floor(Date.now() / 1000);
      await store.builds.insert({ id: buildId, tenant_id: a.id, service_id: s.id, status: 'running', source_type: 'archive', source_url: 'archive:sha256:x', source_ref: null, source_id: up.body.id, image: 'svc/x', commit_sha: null, last_error: null, deployment_id: null, holder: 'another-svcd/1', lease_until_ms: Date.now() + 3_600_000, log_bytes: 0, log_truncated: 0, created_at: now, started_at: now, finished_at: null, duration_ms: null });
      assert.equal(await store.sourceArchives.claim(up.body.id, buildId), true);
      const second = await a.client.raw<{ error: string }>('POST', `/v1/services/${s.id}/builds`, { body: { source_type: 'archive', source_id: up.body.id } });
      assert.equal(second.status, 409);
      assert.match(second.body.error, /built already/);
      assert.equal(await store.sourceArchives.countStored(a.id), 1, 'a taken archive still counts');
      // Listed as due by an old pass, it is not removed while its build runs...
      const anHourOn = Math.floor(Date.now() / 1000) + 3601;
      assert.equal(await store.sourceArchives.deleteIfDue(up.body.id, anHourOn), false);
      assert.ok(await store.sourceArchives.findAny(up.body.id));
      // ...and is once the build has ended (its own clean-up missed: its svcd died).
      assert.equal(await store.builds.transition(buildId, ['running'], { status: 'failed', last_error: 'interrupted', finished_at: now, duration_ms: 0 }), true, 'the build was still running');
      assert.ok((await store.sourceArchives.listDue(now - 3600, 100)).includes(up.body.id));
      assert.equal(await store.sourceArchives.deleteIfDue(up.body.id, now - 3600), true);
      assert.equal(await store.sourceArchives.findAny(up.body.id), undefined);
      assert.deepEqual(await store.sourceArchives.chunks(up.body.id, 0, 10), [], 'its chunks go with it');
    });

    test('uploads are scoped to the service and tenant, and at most a few wait unused', async () => {
      const a = await tenant();
      const other = await tenant();
      const s = await a.client.createService({ name: 'scoped', await_build: true });
      const mine = await a.client.createService({ name: 'second', await_build: true });
      const archive = gzipSync(await tarOf(site('x')));
      const first = await upload(a, s.id, archive);
      assert.equal(first.status, 201);
      assert.equal((await upload(other, s.id, archive)).status, 404, "another tenant's service");
      assert.equal((await other.client.raw('POST', `/v1/services/${s.id}/builds`, { body: { source_type: 'archive', source_id: first.body.id } })).status, 404);
      const foreign = await other.client.createService({ name: 'theirs', await_build: true });
      assert.equal((await other.client.raw('POST', `/v1/services/${foreign.id}/builds`, { body: { source_type: 'archive', source_id: first.body.id } })).status, 404, 'another tenant cannot build my upload');
      assert.equal((await a.client.raw('POST', `/v1/services/${mine.id}/builds`, { body: { source_type: 'archive', source_id: first.body.id } })).status, 404, 'an upload builds only its own service');
      for (const [body, message] of [
        [{ source_type: 'archive' }, /source_id is required/],
        [{ source_type: 'archive', source_id: first.body.id, source_url: 'https://example.com/x.git' }, /takes source_id, not source_url/],
        [{ source_type: 'git', source_id: first.body.id, source_url: 'https://example.com/x.git' }, /takes source_url, not source_id/],
      ] as const) {
        const r = await a.client.raw<{ error: string }>('POST', `/v1/services/${s.id}/builds`, { body });
        assert.equal(r.status, 400, JSON.stringify(body));
        assert.match(r.body.error, message);
      }
      for (let i = 1; i < SOURCE_ARCHIVES_STORED_MAX; i++) assert.equal((await upload(a, s.id, archive)).status, 201);
      const past = await upload(a, s.id, archive);
      assert.equal(past.status, 409);
      assert.match(past.body.error, /^quota exceeded: at most 3 uploaded archives/);
      // Unused uploads expire: an hour on, the prune removes them and there is room again.
      assert.equal(await t.deps.retention.pruneSourceArchives(), 0, 'not before their hour');
      const anHourOn = new Retention(t.deps.store, new ManualClock(Date.now() + 3601_000), pino({ level: 'silent' }), DEFAULT_RETENTION);
      assert.ok((await anHourOn.pruneSourceArchives()) >= SOURCE_ARCHIVES_STORED_MAX);
      assert.equal(await t.deps.store.sourceArchives.countStored(a.id), 0);
      assert.equal((await upload(a, s.id, archive)).status, 201);
    });

    test('one request, ?build=true: the archive stored and its build queued, or neither', async () => {
      // A server of its own whose builds stay queued (no workers), so that its queue can be
      // filled; git sources resolve to a public address without asking DNS.
      const q = await startServer({ store: kind, config: { adminTokens: [ADMIN_TOKEN] }, overrides: { buildRunner: { workers: 0 }, resolveHost: async () => ['93.184.216.34'] } });
      try {
        const a = await newTenant(q);
        const s = await a.client.createService({ name: 'one-request', await_build: true });
        const send = (body: Buffer, build?: boolean) =>
          a.client.raw<SourceUpload & { error: string }>('POST', `/v1/services/${s.id}/sources`, { query: { build }, rawBody: new Uint8Array(body), headers: { 'content-type': 'application/gzip' } });
        const uploaded = () => a.client.activity({ resource_type: 'source_archive' }).then((entries) => entries.length);
        const archive = gzipSync(await tarOf(site('one request\n')));

        const both = await send(archive, true);
        assert.equal(both.status, 201, both.text);
        assert.equal(both.body.files, 2);
        const build = both.body.build;
        assert.ok(build, 'the build is answered with the upload');
        assert.equal(build.status, 'queued');
        const queued = await a.client.build(s.id, build.build_id);
        assert.equal(queued.source_type, 'archive');
        assert.equal(queued.source_url, `archive:sha256:${both.body.sha256}`);
        const again = await a.client.raw<{ error: string }>('POST', `/v1/services/${s.id}/builds`, { body: { source_type: 'archive', source_id: both.body.id } });
        assert.equal(again.status, 409, 'the archive is that build\'s');
        assert.match(again.body.error, /built already/);
        // Without the flag, the upload alone, as before.
        const alone = await send(archive);
        assert.equal(alone.status, 201, alone.text);
        assert.equal(alone.body.build, undefined);
        assert.equal((await a.client.builds(s.id)).length, 1);

        // A refused archive queues nothing.
        const refused = await send(gzipSync(await tarOf([{ name: 'index.html', body: 'x' }])), true);
        assert.equal(refused.status, 400);
        assert.match(refused.body.error, /no Dockerfile at its root/);
        assert.equal((await a.client.builds(s.id)).length, 1);

        // Another tenant's service: 404, and nothing of the upload kept.
        const other = await newTenant(q);
        const theirs = await other.client.raw<{ error: string }>('POST', `/v1/services/${s.id}/sources`, { query: { build: true }, rawBody: new Uint8Array(archive), headers: { 'content-type': 'application/gzip' } });
        assert.equal(theirs.status, 404);
        assert.equal(await q.deps.store.sourceArchives.countStored(other.id), 0);

        // A build the tenant cannot queue (its queue full, with builds of another of its
        // services: the queue is the tenant's): 409, and the upload is not kept, nor said to have come.
        const second = await a.client.createService({ name: 'second', await_build: true });
        for (let i = 1; i < BUILD_QUEUE_MAX; i++) await a.client.createBuild(second.id, { source_type: 'git', source_url: 'https://git.example.test/app.git' });
        const [stored, entries] = [await q.deps.store.sourceArchives.countStored(a.id), await uploaded()];
        const full = await send(archive, true);
        assert.equal(full.status, 409, full.text);
        assert.match(full.body.error, /build queue is full/);
        assert.equal(await q.deps.store.sourceArchives.countStored(a.id), stored, 'no archive kept');
        assert.equal(await uploaded(), entries, 'no upload in the activity log');
        assert.equal((await a.client.builds(s.id, { limit: 50 })).length, 1);

        // A tenant suspended while its archive comes (an upload may take minutes) gets no build
        // queued after the suspension cancelled its queue: 409, nothing kept.
        const late = await newTenant(q);
        const lateService = await late.client.createService({ name: 'late', await_build: true });
        const body = gzipSync(await tarOf([...site('late\n'), { name: 'padding.bin', body: randomBytes(256 * 1024).toString('hex') }]));
        const refusedLate = await uploadWithAPause(q.url, late.key, lateService.id, body, async () => {
          await waitFor('the upload to be taken', async () => ((await q.deps.store.sourceArchives.countStored(late.id)) === 1 ? true : undefined));
          assert.equal((await late.client.raw('DELETE', '/v1/tenant')).status, 200, 'suspended');
        });
        assert.equal(refusedLate.status, 409, refusedLate.text);
        assert.match(refusedLate.text, /the tenant was suspended/);
        assert.equal(await q.deps.store.sourceArchives.countStored(late.id), 0, 'no archive kept');
        assert.deepEqual(await q.deps.store.builds.listUnfinished({ tenantId: late.id }), [], 'no build queued');

        // Its service deleted while the archive came: 404, as for a service that is not there.
        const gone = await a.client.createService({ name: 'gone', await_build: true });
        const deleted = await uploadWithAPause(q.url, a.key, gone.id, body, async () => {
          await waitFor('the upload to be taken', async () => ((await q.deps.store.sourceArchives.countStored(a.id)) === 3 ? true : undefined));
          await a.client.deleteService(gone.id);
        });
        assert.equal(deleted.status, 404, deleted.text);
        assert.equal(await q.deps.store.sourceArchives.countStored(a.id), 2, 'no archive kept');
      } finally {
        await q.close();
      }
    });
  });
});
