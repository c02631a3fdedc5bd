// The workload driver port's contract (src/runtime/driver.ts), as cases every driver must pass:
// the Docker driver on the real engine (driver-docker.test.ts) and the in-memory driver
// (driver-memory.test.ts), and later the Swarm driver. A domain test that runs on the memory
// driver is only as good as this suite's hold on both.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { isPortInUse } from '../src/provisioning/host-ports.js';
import { tcpAccepts } from '../src/runtime/ready-wait.js';
import { freePort } from './harness.js';
import { WorkloadNotRunningError, type ApplyRequest, type WorkloadDriver, type WorkloadSpec, type WorkloadExit } from '../src/runtime/index.js';

/** A workload to run: its image, and the command that makes it behave (none: the image's own). */
export interface FixtureImage {
  image: string;
  entrypoint?: string[];
  cmd?: string[];
}

export interface DriverFixture {
  driver: WorkloadDriver;
  /** Prints a line with "starting" and serves on port 8000. */
  serving: FixtureImage;
  /** Runs and serves nothing; exec in it runs `echo` (coreutils' timeout on the Docker driver). */
  idle: FixtureImage;
  /** Prints "giving up" and exits with code 7 at once. */
  exiting: FixtureImage;
  /** No engine has it and no registry serves it. */
  missing: string;
  /** Removes what the cases left (by tenant). */
  cleanup(tenantIds: string[]): Promise<void>;
  /** The networks a workload is on: a tenant's by the tenant's id, the warm pool's as `warm-pool`. */
  networksOf(ref: string): Promise<string[]>;
  /** How long after its first read a subscription to events hears them (the engine's stream opens over HTTP). */
  eventsOpenMs: number;
}

const PORT = 8000;

export function driverConformance(name: string, setup: () => Promise<DriverFixture>): void {
  describe(`workload driver contract: ${name}`, () => {
    let f: DriverFixture;
    const tenant = `conf${Math.random().toString(36).slice(2, 10)}`;
    let seq = 0;
    const spec = (w: FixtureImage, over: Partial<WorkloadSpec> = {}): WorkloadSpec => ({
      name: `svc-conformance-${tenant}-${++seq}`,
      image: w.image,
      ...(w.entrypoint ? { entrypoint: w.entrypoint } : {}),
      ...(w.cmd ? { cmd: w.cmd } : {}),
      env: { PORT: String(PORT) },
      tenantId: tenant,
      kind: 'service',
      resourceId: `res-${seq}`,
      limits: { memoryMb: 128, cpus: 0.5, pids: 128 },
      sandbox: false,
      ...over,
    });
    const request = (s: WorkloadSpec, over: Partial<ApplyRequest> = {}): ApplyRequest => ({
      spec: s,
      pull: 'never',
      ready: { timeoutMs: 30_000, everyMs: 50, probeTimeoutMs: 2_000 },
      signal: new AbortController().signal,
      ...over,
    });

    before(async () => {
      f = await setup();
    });
    after(async () => {
      await f.cleanup([tenant]);
    });

    test('apply resolves once the workload accepts connections at its endpoint, labelled as asked', async () => {
      const s = spec(f.serving, { port: PORT });
      let startedRef: string | null = null;
      const applied = await f.driver.apply(request(s, { started: (ref) => Promise.resolve(void (startedRef = ref)) }));
      assert.equal(startedRef, applied.ref, 'told the ref before it was ready');
      assert.equal(applied.endpoint.port, PORT);
      assert.equal(await tcpAccepts(applied.endpoint.host, PORT), true, 'the endpoint answers');
      assert.equal(await tcpAccepts(applied.endpoint.host, PORT + 1), false, 'the probe tells a closed port apart');
      const info = await f.driver.inspect(applied.ref);
      assert.equal(info?.state, 'running');
      assert.equal(info.labels['svc.tenant'], tenant);
      assert.equal(info.labels['svc.kind'], 'service');
      assert.equal(info.labels['svc.resource'], s.resourceId);
      assert.equal((await f.driver.inspect(s.name))?.id, applied.ref, 'found by name too');
      assert.ok((await f.driver.list({ tenantId: tenant })).some((w) => w.id === applied.ref));
      assert.ok(!(await f.driver.list({ tenantId: `${tenant}x` })).some((w) => w.id === applied.ref), 'another tenant lists none of it');
      await f.driver.remove(applied.ref);
    });

    test('apply is idempotent by name: a second apply replaces the first; `replaces` removes an older ref', async () => {
      const s = spec(f.serving, { port: PORT });
      const first = await f.driver.apply(request(s));
      const second = await f.driver.apply(request(s));
      assert.notEqual(second.ref, first.ref);
      assert.equal(await f.driver.inspect(first.ref), null);
      assert.equal((await f.driver.list({ tenantId: tenant })).filter((w) => w.name === s.name).length, 1);
      const renamed = spec(f.serving, { port: PORT });
      const third = await f.driver.apply(request(renamed, { replaces: second.ref }));
      assert.equal(await f.driver.inspect(second.ref), null, 'the replaced workload is gone');
      assert.equal((await f.driver.inspect(third.ref))?.state, 'running');
      await f.driver.remove(third.ref);
    });

    test('a workload that exits fails the apply with its code and last output, and nothing is left', async () => {
      const s = spec(f.exiting, { port: PORT });
      await assert.rejects(f.driver.apply(request(s)), /exited with code 7 before it was ready: .*giving up/);
      assert.equal(await f.driver.inspect(s.name), null);
    });

    test('one that never listens fails at the deadline, and nothing is left', async () => {
      const s = spec(f.idle, { port: PORT });
      await assert.rejects(f.driver.apply(request(s, { ready: { timeoutMs: 1_500, everyMs: 100, probeTimeoutMs: 1_000 } })), /not ready within 2 s: no connection accepted on port 8000/);
      assert.equal(await f.driver.inspect(s.name), null);
    });

    test('an abort while it waits rejects with the reason and removes what it started', async () => {
      const s = spec(f.idle, { port: PORT });
      const controller = new AbortController();
      const p = f.driver.apply(request(s, { signal: controller.signal, started: () => Promise.resolve(void setTimeout(() => controller.abort(new Error('cancelled by the test')), 300)) }));
      await assert.rejects(p, /cancelled by the test/);
      assert.equal(await f.driver.inspect(s.name), null);
    });

    test('an image neither present nor pullable fails the apply before anything runs', async () => {
      const s = spec({ image: f.missing }, { port: PORT });
      let started = false;
      await assert.rejects(f.driver.apply(request(s, { pull: 'missing', started: () => Promise.resolve(void (started = true)) })), (err: Error) => !/before it was ready/.test(err.message));
      assert.equal(started, false, 'nothing was started');
      assert.equal(await f.driver.inspect(s.name), null);
    });

    test('under a restart policy a workload that exits is started again, and only the deadline fails its apply', async () => {
      const s = spec(f.exiting, { port: PORT, engineRestarts: true });
      await assert.rejects(f.driver.apply(request(s, { ready: { timeoutMs: 3_000, everyMs: 100, probeTimeoutMs: 1_000 } })), /not ready within 3 s/);
      assert.equal(await f.driver.inspect(s.name), null);
    });

    test('a published port answers on the host; a second workload cannot publish it, and leaves nothing', async () => {
      const hostPort = await freePort();
      const first = spec(f.serving, { port: PORT, publish: { address: '127.0.0.1', port: hostPort } });
      const applied = await f.driver.apply(request(first));
      assert.equal(await tcpAccepts('127.0.0.1', hostPort), true);
      const second = spec(f.serving, { port: PORT, publish: { address: '127.0.0.1', port: hostPort } });
      await assert.rejects(f.driver.apply(request(second)), (err: Error) => isPortInUse(err));
      assert.equal(await f.driver.inspect(second.name), null);
      await f.driver.remove(applied.ref);
      assert.equal(await tcpAccepts('127.0.0.1', hostPort), false, 'the port is free once it is removed');
    });

    test('two applies of one name at once: one workload runs, the ref of the apply that succeeded', async () => {
      const s = spec(f.serving, { port: PORT });
      const outcomes = await Promise.allSettled([f.driver.apply(request(s)), f.driver.apply(request(s))]);
      const won = outcomes.filter((o) => o.status === 'fulfilled');
      assert.equal(won.length, 1, outcomes.map((o) => (o.status === 'rejected' ? String(o.reason) : 'ok')).join('; '));
      const named = (await f.driver.list({ tenantId: tenant })).filter((w) => w.name === s.name);
      assert.deepEqual(named.map((w) => w.id), [won[0]?.value.ref]);
      await f.driver.remove(s.name);
    });

    test("a warm-pool workload waits on the pool's network, or, kept for a tenant, on that tenant's; assign leaves it on the new tenant's network and no other tenant's", async () => {
      // Another tenant, its bridge named apart (a bridge is named after the start of the tenant id).
      const other = `kept${Math.random().toString(36).slice(2, 10)}`;
      const pooled = await f.driver.apply(request(spec(f.idle, { kind: 'environment', warmPool: true, tenantId: '' })));
      const kept = await f.driver.apply(request(spec(f.idle, { kind: 'environment', warmPool: true, tenantId: other })));
      try {
        assert.deepEqual(await f.networksOf(pooled.ref), ['warm-pool']);
        assert.deepEqual(await f.networksOf(kept.ref), [other], "kept: on its tenant's network from its start");
        assert.equal((await f.driver.inspect(kept.ref))?.labels['svc.tenant'], 'warm-pool', "the pool's until handed over");
        // Handed to another tenant (whatever offered it): off the first tenant's network before it answers.
        const address = await f.driver.assign(kept.ref, tenant);
        assert.deepEqual(await f.networksOf(kept.ref), [tenant]);
        assert.equal(address, (await f.driver.inspect(kept.ref))?.address?.host);
        const pooledAddress = await f.driver.assign(pooled.ref, tenant);
        assert.ok((await f.networksOf(pooled.ref)).includes(tenant));
        assert.ok(pooledAddress);
      } finally {
        await f.driver.remove(pooled.ref);
        await f.driver.remove(kept.ref);
        await f.driver.releaseTenant(other);
      }
    });

    test('a workload without a port is ready once it runs; exec runs in it, and not once it stopped', async () => {
      const s = spec(f.idle, { kind: 'environment' });
      const applied = await f.driver.apply(request(s));
      assert.equal(applied.endpoint.port, null);
      const out = await f.driver.exec(applied.ref, { cmd: ['echo', 'conformance'], workDir: '/', timeoutSeconds: 30, maxOutputBytes: 1024 });
      assert.equal(out.exitCode, 0);
      assert.equal(out.stdout, 'conformance\n');
      const failing = await f.driver.exec(applied.ref, { cmd: ['false'], workDir: '/', timeoutSeconds: 30, maxOutputBytes: 1024 });
      assert.equal(failing.exitCode, 1);
      await f.driver.stop(applied.ref, 2);
      await assert.rejects(f.driver.exec(applied.ref, { cmd: ['true'], workDir: '/', timeoutSeconds: 30, maxOutputBytes: 1024 }), WorkloadNotRunningError);
      await f.driver.remove(applied.ref);
    });

    test('stop ends it with an exit event of its labels; start brings it back as it was', async () => {
      const s = spec(f.serving, { port: PORT });
      const applied = await f.driver.apply(request(s));
      const controller = new AbortController();
      const exits: WorkloadExit[] = [];
      const listening = (async () => {
        for await (const e of f.driver.events(controller.signal)) {
          exits.push(e);
          if (e.id === applied.ref) return;
        }
      })();
      // Subscribed before the stop.
      await new Promise((r) => setTimeout(r, f.eventsOpenMs));
      await f.driver.stop(applied.ref, 2);
      await listening;
      controller.abort();
      const mine = exits.find((e) => e.id === applied.ref);
      assert.equal(mine?.labels['svc.resource'], s.resourceId);
      assert.equal((await f.driver.inspect(applied.ref))?.state, 'exited');
      const endpoint = await f.driver.start(applied.ref);
      assert.equal((await f.driver.inspect(applied.ref))?.state, 'running');
      assert.ok(endpoint?.host);
      assert.notEqual(await f.driver.stats(applied.ref), null);
      await f.driver.remove(applied.ref);
    });

    test('a remove that finds another remove of the workload under way returns once it is gone: its volume can go next', async () => {
      const volume = `svc-conformance-${tenant}-volume-${++seq}`;
      const s = spec(f.serving, { port: PORT, volumes: [{ name: volume, target: '/data' }] });
      const applied = await f.driver.apply(request(s));
      // As a provisioning that starts a database's volume again empty while its failed start is
      // still being removed: the engine answers the second remove 409 (removal in progress).
      const first = f.driver.remove(applied.ref);
      await f.driver.remove(applied.ref);
      await f.driver.removeVolume(volume);
      await first;
      assert.equal(await f.driver.inspect(applied.ref), null);
    });

    test('logs give what it printed; stats read while it runs; remove is final and idempotent', async () => {
      const s = spec(f.serving, { port: PORT });
      const applied = await f.driver.apply(request(s));
      let text = '';
      for await (const chunk of await f.driver.logs(applied.ref, { tail: 10, follow: false })) text += String(chunk);
      assert.match(text, /starting/);
      const stats = await f.driver.stats(applied.ref);
      assert.ok(stats && stats.memoryBytes > 0);
      assert.equal(await f.driver.releaseTenant(tenant), false, 'the tenant still runs something');
      await f.driver.remove(applied.ref);
      await f.driver.remove(applied.ref);
      assert.equal(await f.driver.inspect(applied.ref), null);
      assert.equal(await f.driver.stats(applied.ref), null);
      await assert.rejects(f.driver.logs(applied.ref, { tail: 10, follow: false }), WorkloadNotRunningError);
      for (const w of await f.driver.list({ tenantId: tenant })) await f.driver.remove(w.id);
      assert.equal(await f.driver.releaseTenant(tenant), true, 'nothing of the tenant is left');
    });
  });
}
