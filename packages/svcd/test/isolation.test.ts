// Tenant isolation on the real engine, gVisor and a loopback registry (issue 17):
// - egress (item 4; DECISIONS.md "Tenant egress"): a tenant's service or build reaches neither the
//   host's ports nor a private network, unless the operator allows a destination. Every refused
//   probe is paired with an allowed one through the same tool (busybox's nc), so a probe that
//   cannot connect at all cannot pass for a refusal;
// - builds (item 3): RUN steps under gVisor, remote ADD and foreign FROM refused before the build;
// - images (item 2): a tenant runs only images it could pull itself, never another tenant's build.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { promisify } from 'node:util';
import { tenantNetworkName } from '../src/runtime/index.js';
import { workloadName } from '../src/services/deployer.js';
import { EGRESS_CHAIN, HOST_CHAIN, HostFirewall, hostShell, shellIptablesCheck } from '../src/runtime/host-firewall.js';
import type { Build, SvcClient } from '@svc/client';
import { freePort, newTenant, startServer, waitFor, type TestServer } from './harness.js';
import { fetchFromService, finishedBuild, settled } from './service-fixtures.js';
import { BUSYBOX_IMAGE, TEST_REGISTRY, buildImage, docker, ensureTestImages, finished, removeImages, removeTenantWorkloads } from './images.js';
import { dockerfile, startGitServer, type GitServer } from './git-fixtures.js';
import { startPrivateHost, type PrivateHost } from './private-host.js';

const run = promisify(execFile);
const ONBUILD_IMAGE = `${TEST_REGISTRY}/svc-test/onbuild:1`;
/** A clean base image in the registry whose local tag a test moves to ONBUILD_IMAGE mid-build. */
const MOVING_REPOSITORY = `${TEST_REGISTRY}/svc-test/moving`;
const MOVING_IMAGE = `${MOVING_REPOSITORY}:1`;

/** A TCP server on every host address that says which port it is. */
async function hostListener(port: number): Promise<Server> {
  const s = createServer((c) => c.end(`host port ${port}\n`));
  await new Promise<void>((r) => s.listen(port, '0.0.0.0', r));
  return s;
}

/** Probes until the answer matches (a loaded machine can miss nc's 2 s), at most 5 times. */
async function probe(serviceId: string, target: string, expect: RegExp): Promise<string> {
  let answer = '';
  for (let i = 0; i < 5 && !expect.test(answer); i++) answer = await fetchFromService(serviceId, `/cgi-bin/fetch?${target}`);
  return answer;
}

/** Builds `repo` for a new service of the tenant; returns the finished build and its log. */
async function buildOf(a: { client: SvcClient }, git: GitServer, repo: string): Promise<{ build: Build; log: string; serviceId: string }> {
  const s = await a.client.createService({ name: `b-${repo}`, image: BUSYBOX_IMAGE });
  const queued = await a.client.createBuild(s.id, { source_type: 'git', source_url: git.url(repo) });
  const build = await finishedBuild(a.client, s.id, queued.build_id, 180_000);
  return { build, log: await a.client.buildLogs(s.id, build.id), serviceId: s.id };
}

describe('tenant isolation', () => {
  let t: TestServer;
  let git: GitServer;
  let net: PrivateHost;
  const tenants: string[] = [];
  const listeners: Server[] = [];
  // Ports in the private namespace (one allowed) and on the host (one allowed).
  const [PRIVATE_CLOSED, PRIVATE_OPEN] = [7000, 7001];
  let hostClosed = 0;
  let hostOpen = 0;

  before(async () => {
    await ensureTestImages();
    // A base image whose trigger would make the engine fetch a URL from the host's network.
    await buildImage(ONBUILD_IMAGE, { Dockerfile: { body: `FROM ${BUSYBOX_IMAGE}\nONBUILD ADD http://127.0.0.1:1/payload /payload\n` } });
    await finished(await docker.getImage(ONBUILD_IMAGE).push({ authconfig: {} }));
    await docker.getImage(BUSYBOX_IMAGE).tag({ repo: MOVING_REPOSITORY, tag: '1' });
    await finished(await docker.getImage(MOVING_IMAGE).push({ authconfig: {} }));
    net = await startPrivateHost([PRIVATE_CLOSED, PRIVATE_OPEN]);
    const ncProbe = (port: number) => `RUN echo "probe ${port}: $(echo | nc -w 2 ${net.address} ${port} || echo unreachable)"`;
    git = await startGitServer({
      // The same nc probes as the services', from a RUN step; and what runs the step.
      sandboxed: { Dockerfile: dockerfile(ncProbe(PRIVATE_CLOSED), ncProbe(PRIVATE_OPEN), 'RUN echo "kernel: $(dmesg | head -n 1)"', 'RUN grep -E "^(CapEff|Pid)" /proc/self/status; echo "nproc $(ulimit -u)"') },
      'remote-add': { Dockerfile: dockerfile('COPY Dockerfile /ok', 'ADD \\\n  http://127.0.0.1:1/payload /payload') },
      'onbuild-base': { Dockerfile: `FROM ${ONBUILD_IMAGE}\nRUN true\n` },
      'moving-base': { Dockerfile: `FROM ${MOVING_IMAGE}\nRUN true\n` },
      'foreign-from': { Dockerfile: `FROM ${TEST_REGISTRY}/svc/0123456789abcdef0123456789abcdef/x:1\nRUN true\n` },
    });
    hostClosed = await freePort();
    hostOpen = await freePort();
    listeners.push(await hostListener(hostClosed), await hostListener(hostOpen));
    t = await startServer({
      realTime: true,
      // Every address: the API port must be closed to tenants by the rules, not by loopback.
      listenHost: '0.0.0.0',
      config: {
        egressAllow: [{ cidr: `${net.address}/32`, port: PRIVATE_OPEN }, { cidr: `${net.hostAddress}/32`, port: hostOpen }],
        // Builds are pushed to the tests' registry: the place another tenant would pull them from.
        buildRegistry: TEST_REGISTRY,
      },
      overrides: { readyTimeoutMs: 5_000 },
    });
  });

  after(async () => {
    // Any of these is still unset when before() failed part-way.
    await (t as TestServer | undefined)?.close();
    for (const l of listeners) l.close();
    await (net as PrivateHost | undefined)?.close();
    await (git as GitServer | undefined)?.stop();
    await removeTenantWorkloads(tenants);
    for (const id of tenants) await removeImages(`${TEST_REGISTRY}/svc/${id}/*`);
  });

  test('a service reaches allowed destinations and its own network, never the host or a private network', async () => {
    const a = await newTenant(t);
    tenants.push(a.id);
    const prober = await a.client.createService({ name: 'prober', image: BUSYBOX_IMAGE });
    const peer = await a.client.createService({ name: 'peer', image: BUSYBOX_IMAGE });
    for (const id of [prober.id, peer.id]) assert.equal((await settled(a, id)).status, 'running');
    const info = await docker.getNetwork(tenantNetworkName(a.id)).inspect();
    const gateway = info.IPAM?.Config?.[0]?.Gateway;
    assert.ok(gateway, 'the tenant network has a gateway (the host)');
    const peerIp = Object.values((await docker.getContainer(workloadName(peer.id)).inspect()).NetworkSettings.Networks)[0]?.IPAddress;

    // Allowed: the tool works (own network, allow-listed private port and host port).
    assert.match(await probe(prober.id, `${peerIp}:8000`, /hello from svc-test/), /hello from svc-test/, 'own tenant network');
    assert.match(await probe(prober.id, `${net.address}:${PRIVATE_OPEN}`, /private host 7001/), /private host 7001/, '--egress-allow opens a private destination');
    assert.match(await probe(prober.id, `${net.hostAddress}:${hostOpen}`, /host port/), new RegExp(`host port ${hostOpen}`), '--egress-allow opens a host port');

    // Refused: the same tool, other ports of the same destinations.
    assert.match(await fetchFromService(prober.id, `/cgi-bin/fetch?${net.address}:${PRIVATE_CLOSED}`), /unreachable/, 'a private network host');
    assert.match(await fetchFromService(prober.id, `/cgi-bin/fetch?${net.hostAddress}:${hostClosed}`), /unreachable/, "the host's address on that network");
    assert.match(await fetchFromService(prober.id, `/cgi-bin/fetch?${gateway}:${hostClosed}`), /unreachable/, "the host's port through the bridge gateway");
    assert.match(await fetchFromService(prober.id, `/cgi-bin/fetch?${gateway}:${new URL(t.url).port}`), /unreachable/, "svcd's API port");
    assert.equal((await t.client.health()).status, 'ok', 'the API still answers the host');
  });

  test('health detail reports the rules, and a missing rule', async () => {
    const a = await newTenant(t);
    tenants.push(a.id);
    const ok = await a.client.healthDetailed(true);
    assert.equal(ok.egress_firewall.installed, true, ok.egress_firewall.detail);
    const jump = ['INPUT', '-i', 'svc-+', '-j', HOST_CHAIN];
    await run('iptables', ['-w', '-D', ...jump]);
    try {
      const missing = await a.client.healthDetailed(true);
      assert.equal(missing.egress_firewall.installed, false);
      assert.match(missing.egress_firewall.detail, /INPUT/);
      assert.equal(missing.status, 'degraded');
    } finally {
      await t.deps.hostFirewall.install();
    }
    const rules = (await run('iptables', ['-w', '-S', EGRESS_CHAIN])).stdout;
    assert.match(rules, /-d 10\.0\.0\.0\/8 .*REJECT/);
    assert.match(rules, /-d 169\.254\.0\.0\/16 .*REJECT/);
  });

  test("this host's rules are checked in one shell: in place, missing, a comment with a quote", async () => {
    const chain = `SVC-TEST-${process.pid}`;
    const kept = ['-d', '192.0.2.1/32', '-m', 'comment', '--comment', "svc's test", '-j', 'RETURN'];
    await run('iptables', ['-w', '-N', chain]);
    try {
      await run('iptables', ['-w', '-A', chain, ...kept]);
      const other = ['-d', '192.0.2.2/32', '-j', 'RETURN'];
      assert.deepEqual(await shellIptablesCheck(hostShell)([[chain, kept], [chain, other], [chain, ['-d', '192.0.2.1/32', '-m', 'comment', '--comment', 'svc', '-j', 'RETURN']]]), [true, false, false]);
      await run('iptables', ['-w', '-A', chain, ...other]);
      assert.deepEqual(await shellIptablesCheck(hostShell)([[chain, other], [chain, kept]]), [true, true]);
    } finally {
      await run('iptables', ['-w', '-F', chain]);
      await run('iptables', ['-w', '-X', chain]);
    }
  });

  test("svcd's check of this host's rules starts one shell, not an iptables a rule from its own process", async () => {
    // An iptables first on PATH that notes who started it, then runs the real one: started from
    // this process, each would be a fork of a large one, holding its event loop (a health
    // detail any tenant can ask for afresh checks some twenty rules).
    const shim = mkdtempSync(join(tmpdir(), 'svc-iptables-shim-'));
    const parents = join(shim, 'parents');
    const real = (await run('sh', ['-c', 'command -v iptables'])).stdout.trim();
    writeFileSync(join(shim, 'iptables'), `#!/bin/sh\necho "$PPID" >> '${parents}'\nexec '${real}' "$@"\n`, { mode: 0o755 });
    const path = process.env.PATH;
    process.env.PATH = `${shim}:${path ?? ''}`;
    try {
      await new HostFirewall({ allow: [{ cidr: '192.0.2.0/24', port: 5000 }], owner: '0123456789abcdef' }).missing();
      const started = readFileSync(parents, 'utf8').trim().split('\n');
      assert.ok(started.length >= 10, `${String(started.length)} rules checked`);
      assert.equal(new Set(started).size, 1, 'all from one shell');
      assert.notEqual(started[0], String(process.pid), "not from the checking process itself");
    } finally {
      if (path === undefined) delete process.env.PATH;
      else process.env.PATH = path;
      rmSync(shim, { recursive: true, force: true });
    }
  });

  test('RUN steps run under gVisor with a process limit and the tenant egress rules', async () => {
    const a = await newTenant(t);
    tenants.push(a.id);
    const { build, log } = await buildOf(a, git, 'sandboxed');
    assert.equal(build.status, 'succeeded', `${build.last_error}\n${log}`);
    assert.match(log, /RUN steps run under gVisor/);
    assert.match(log, /kernel: .*gVisor/, 'dmesg inside a RUN step is gVisor\'s');
    assert.match(log, /nproc \d+/);
    assert.doesNotMatch(log, /nproc unlimited/);
    assert.match(log, /probe 7001: private host 7001/, 'an allowed destination answers the build');
    assert.match(log, /probe 7000: unreachable/, 'a private host does not');
  });

  test("remote ADD, a FROM naming another tenant's build and a base image with ONBUILD triggers are refused before the build", async () => {
    const a = await newTenant(t);
    tenants.push(a.id);
    const add = await buildOf(a, git, 'remote-add');
    assert.equal(add.build.status, 'failed');
    assert.match(add.build.last_error ?? '', /Dockerfile line 3: ADD from a URL is not allowed/);
    assert.doesNotMatch(add.log, /Step 1\//, 'the engine never started the build');
    const from = await buildOf(a, git, 'foreign-from');
    assert.equal(from.build.status, 'failed');
    assert.match(from.build.last_error ?? '', /Dockerfile line 1: images under svc\/ are build outputs/);
    const onbuild = await buildOf(a, git, 'onbuild-base');
    assert.equal(onbuild.build.status, 'failed');
    assert.match(onbuild.build.last_error ?? '', /has ONBUILD triggers/);
    assert.match(onbuild.log, /==> pulling /, 'the base image was pulled and looked at first');
    // The service's next build guesses the image from this one's record and pulls it while git
    // clones (runner.ts, prefetchBaseImages): its triggers are read after the clone, from the copy
    // the build uses, and it is refused all the same.
    assert.deepEqual(JSON.parse((await t.deps.store.builds.findAny(onbuild.build.id))?.base_images ?? 'null'), [ONBUILD_IMAGE]);
    const again = await a.client.createBuild(onbuild.serviceId, { source_type: 'git', source_url: git.url('onbuild-base') });
    const second = await finishedBuild(a.client, onbuild.serviceId, again.build_id, 180_000);
    assert.equal(second.status, 'failed');
    assert.match(second.last_error ?? '', /has ONBUILD triggers/);
  });

  test('a build runs from the base image it checked, even when a pull of the same name moved the tag meanwhile (to a copy with ONBUILD triggers)', async () => {
    const a = await newTenant(t);
    tenants.push(a.id);
    const engine = t.deps.runtime;
    const realBuild = engine.buildImage.bind(engine);
    let moved = false;
    // Between the check of the pulled copy and the engine's read of FROM: what a deploy of the
    // same name (pushed anew with a trigger) would do to the local tag.
    engine.buildImage = async (spec) => {
      if (!moved) await docker.getImage(ONBUILD_IMAGE).tag({ repo: MOVING_REPOSITORY, tag: '1' });
      moved = true;
      return realBuild(spec);
    };
    try {
      const { build, log } = await buildOf(a, git, 'moving-base');
      assert.ok(moved, 'the tag was moved before the engine built');
      assert.equal(build.status, 'succeeded', `${build.last_error}\n${log}`);
      const checked = (await docker.getImage(BUSYBOX_IMAGE).inspect()).Id;
      assert.ok(log.includes(`==> ${MOVING_IMAGE} is ${checked}`), log);
      assert.ok(log.includes(`FROM ${checked}`), 'the engine built FROM the ID of the checked copy');
      assert.doesNotMatch(log, /build trigger/i, 'no trigger of the copy the tag moved to ran');
    } finally {
      engine.buildImage = realBuild;
      await docker.getImage(BUSYBOX_IMAGE).tag({ repo: MOVING_REPOSITORY, tag: '1' });
    }
  });

  test("a tenant cannot run another tenant's build in any spelling; each runs its own", async () => {
    const a = await newTenant(t);
    const b = await newTenant(t);
    tenants.push(a.id, b.id);
    // B builds and runs its own image (pushed to the registry as 127.0.0.1:PORT/svc/<B>/...).
    const own = await buildOf(b, git, 'app');
    assert.equal(own.build.status, 'succeeded', own.log);
    const image = own.build.image;
    assert.match(image, new RegExp(`^${TEST_REGISTRY}/svc/${b.id}/`));
    await waitFor('B to run its build', async () => ((await b.client.service(own.serviceId)).status === 'running' ? true : undefined), 60_000);
    // The engine's answer, where RepoDigests may be missing (dockerode's types say it is not).
    const inspected: { Id: string; RepoDigests?: string[] | null } = await docker.getImage(image).inspect();
    const digest = inspected.RepoDigests?.[0]?.split('@')[1];
    assert.ok(digest);
    const port = TEST_REGISTRY.split(':')[1];
    const path = image.slice(TEST_REGISTRY.length + 1);
    const spellings = [
      image,
      `localhost:${port}/${path}`,
      `[::1]:${port}/${path}`,
      `127.0.0.1:${port}/${path.split(':')[0]}@${digest}`,
      path, // the local tag without the registry
      `docker.io/${path}`,
      inspected.Id, // sha256:<id>
      inspected.Id.slice('sha256:'.length),
    ];
    for (const ref of spellings) {
      const r = await a.client.raw<{ error: string }>('POST', '/v1/services', { body: { name: `steal-${spellings.indexOf(ref)}`, image: ref } });
      assert.equal(r.status, 400, `${ref}: ${JSON.stringify(r.body)}`);
      assert.match(r.body.error, /build outputs|image IDs|invalid image reference/, ref);
    }
    // A copy in the engine that A could not pull itself: it is pulled on deploy, and fails.
    await docker.getImage(image).tag({ repo: 'leaked/app', tag: '1' });
    try {
      const leaked = await a.client.createService({ name: 'leaked', image: 'leaked/app:1' });
      const s = await settled(a, leaked.id);
      assert.equal(s.status, 'failed');
      assert.match(s.last_error ?? '', /could not be pulled/);
    } finally {
      await docker.getImage('leaked/app:1').remove().catch(() => {});
    }
    // What A can pull, A runs (the same path through the registry).
    const mine = await a.client.createService({ name: 'mine', image: BUSYBOX_IMAGE });
    assert.equal((await settled(a, mine.id)).status, 'running');
  });
});
