// The Docker Engine driver held to the driver port's contract (driver-conformance.ts), on the
// real engine: the same cases the in-memory driver passes.
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { connect, createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { DEFAULT_LOG_RATE, DockerRuntime, TENANT_NETWORK_PREFIX, WARM_POOL_NETWORK, builtTenantInit, type WorkloadSpec } from '../src/runtime/index.js';
import { KeptAnswer } from '../src/runtime/kept-answer.js';
import { systemClock } from '../src/clock.js';
import { driverConformance } from './driver-conformance.js';
import { DOCKER_HOST, waitFor } from './harness.js';
import { BUSYBOX_IMAGE, EXITER_IMAGE, TEST_REGISTRY, docker, ensureTestImages } from './images.js';
import { TEMPLATE_IMAGES, ensureTemplateImages } from './operator-images.js';

driverConformance('docker', async () => {
  await ensureTestImages();
  await ensureTemplateImages();
  const driver = new DockerRuntime({ host: DOCKER_HOST, installation: `conformance-${process.pid}` });
  return {
    driver,
    serving: { image: BUSYBOX_IMAGE },
    // coreutils' timeout, which the Docker driver's exec runs the command under, is in the templates.
    idle: { image: TEMPLATE_IMAGES.default, entrypoint: ['sleep'], cmd: ['infinity'] },
    exiting: { image: EXITER_IMAGE },
    missing: `${TEST_REGISTRY}/svc-test/no-such-image:1`,
    cleanup: async (tenantIds) => {
      for (const tenantId of tenantIds) {
        for (const w of await driver.list({ tenantId })) await driver.remove(w.id);
        await driver.releaseTenant(tenantId);
      }
    },
    networksOf: async (ref) =>
      Object.keys((await docker.getContainer(ref).inspect()).NetworkSettings.Networks).map((n) => (n === WARM_POOL_NETWORK ? 'warm-pool' : n.replace(TENANT_NETWORK_PREFIX, ''))),
    // The events stream's request reaches the engine a moment after the first read.
    eventsOpenMs: 300,
  };
});

/**
 * The pid of the host's own engine when the tests use it (a reload is a SIGHUP to it) and this
 * process may signal it; null otherwise. Under make test this file runs alone in the engine's
 * lane (scripts/run-tests.ts): no other test sees the reload.
 */
function localEnginePid(): number | null {
  if (DOCKER_HOST !== 'unix:///var/run/docker.sock') return null;
  try {
    const pid = Number(readFileSync('/var/run/docker.pid', 'utf8').trim());
    process.kill(pid, 0);
    return pid;
  } catch {
    return null;
  }
}

describe("the builder's step runtime: the engine's default, kept while the engine reports no change", () => {
  const enginePid = localEnginePid();
  test('asked once while the engine is quiet, and again after its configuration is reloaded (SIGHUP: a daemon event)', { skip: enginePid === null && "needs the host's own engine and its pid file (a reload is a SIGHUP to it)" }, async () => {
    const runtime = new DockerRuntime({ host: DOCKER_HOST, installation: `kept-answer-${process.pid}` });
    const engineDefault = ((await docker.info()) as { DefaultRuntime: string }).DefaultRuntime;
    assert.equal(await runtime.stepRuntime(), engineDefault);
    // The runtime's own watch, around an answer the test counts.
    let asks = 0;
    const kept = new KeptAnswer(
      async () => {
        asks++;
        return ((await docker.info()) as { DefaultRuntime: string }).DefaultRuntime;
      },
      (onChange, onEnd, signal) => runtime.watchEngine(onChange, onEnd, signal),
      { clock: systemClock, maxAgeMs: 3_600_000 },
    );
    // A function, not the variable: an assertion on asks has the type checker take it for that value for good.
    const asked = () => asks;
    const pause = () => new Promise((r) => setTimeout(r, 50));
    /** Asks until a question is answered from what is kept (the watch open, the replay heard). */
    const untilKept = async () => {
      for (const deadline = Date.now() + 5_000; ; ) {
        const n = asked();
        await pause();
        assert.equal(await kept.get(), engineDefault);
        if (asked() === n) return;
        assert.ok(Date.now() < deadline, 'kept within 5 s');
      }
    };
    try {
      await kept.get();
      await untilKept();
      const before = asked();
      await pause();
      await kept.get();
      assert.equal(asked(), before, 'kept while the engine says nothing');
      // dockerd reads daemon.json again and reports it (the same file: nothing else changes).
      process.kill(enginePid!, 'SIGHUP');
      for (const deadline = Date.now() + 10_000; asked() === before; await pause()) {
        assert.ok(Date.now() < deadline, 'asked again within 10 s of the reload');
        assert.equal(await kept.get(), engineDefault);
      }
      await untilKept();

      // A watch opened after the reload hears of it too (the engine subscribes a watch only after
      // it has answered its headers: a reload between would go unheard without the replay).
      let replayed = 0;
      const stop = new AbortController();
      await runtime.watchEngine(() => replayed++, () => {}, stop.signal);
      try {
        await waitFor('the reload before the watch opened, replayed', () => Promise.resolve(replayed > 0 || undefined), 5_000);
      } finally {
        stop.abort();
      }
    } finally {
      kept.close();
      await runtime.close();
    }
  });
});

describe("a tenant workload's command, read from its image", () => {
  test('a deploy resolves its image to an ID and creates from that ID: the image is not inspected again (a driver that has not seen it inspects it)', { skip: !DOCKER_HOST.startsWith('unix://') && 'needs the engine on a unix socket, to record its requests' }, async () => {
    await ensureTestImages();
    // Every request line the drivers send to the engine, through a socket of the test's own.
    const requests: string[] = [];
    const dir = mkdtempSync(join(tmpdir(), 'svc-image-commands-'));
    const socket = join(dir, 'engine.sock');
    const recorder = createServer((client) => {
      const engine = connect(DOCKER_HOST.slice('unix://'.length));
      client.on('data', (chunk: Buffer) => {
        for (const m of chunk.toString('latin1').matchAll(/^(GET|POST|PUT|DELETE|HEAD) (\S+) HTTP\/1\.1\r$/gm)) requests.push(`${m[1]} ${decodeURIComponent(m[2]!)}`);
      });
      client.pipe(engine).pipe(client);
      client.on('error', () => engine.destroy());
      engine.on('error', () => client.destroy());
    });
    await new Promise<void>((resolve) => recorder.listen(socket, resolve));
    const driver = () => new DockerRuntime({ host: `unix://${socket}`, installation: `image-commands-${process.pid}`, tenantInit: { binary: builtTenantInit(), rate: DEFAULT_LOG_RATE } });
    const tenant = `imgcmd${Math.random().toString(36).slice(2, 10)}`;
    const spec = (name: string, image: string): WorkloadSpec => ({ name, image, env: { PORT: '8000' }, port: 8000, tenantId: tenant, kind: 'service', resourceId: name, limits: { memoryMb: 128, cpus: 0.5, pids: 128 }, sandbox: false, tenantCode: true });
    const apply = (d: DockerRuntime, s: WorkloadSpec) => d.apply({ spec: s, pull: 'never', ready: { timeoutMs: 30_000, everyMs: 50, probeTimeoutMs: 2_000 }, signal: new AbortController().signal });
    const deploying = driver();
    const fresh = driver();
    try {
      const image = await docker.getImage(BUSYBOX_IMAGE).inspect();
      const id = await deploying.imageId(BUSYBOX_IMAGE);
      assert.equal(id, image.Id);
      const inspectsOfId = () => requests.filter((r) => r.startsWith(`GET /images/${image.Id}/json`)).length;

      const applied = await apply(deploying, spec(`svc-imgcmd-${tenant}-1`, image.Id));
      assert.equal(inspectsOfId(), 0, 'created from the command its imageId read');
      // The command it was given is the image's, behind svc-init, as an inspect would have said.
      const created = await docker.getContainer(applied.ref).inspect();
      assert.equal(image.Config.Entrypoint, null, 'the test image names a CMD alone');
      assert.deepEqual([created.Config.Entrypoint?.[0], created.Config.Cmd], ['/.svc/init', image.Config.Cmd]);

      // The control, through the same recorder: a driver that has not resolved the image asks the engine.
      await apply(fresh, spec(`svc-imgcmd-${tenant}-2`, image.Id));
      assert.equal(inspectsOfId(), 1, 'a driver that had not seen the image inspected it once');
    } finally {
      for (const w of await deploying.list({ tenantId: tenant })) await deploying.remove(w.id);
      await deploying.releaseTenant(tenant);
      await deploying.close();
      await fresh.close();
      recorder.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
