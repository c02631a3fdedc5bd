// The workload controller's rules on both stores, with the in-memory driver (held to the Docker
// driver's contract by driver-conformance.ts): claims and leases, a newer request winning over
// an apply under way, a dead holder's lease lapsing and another controller taking the row over,
// writes fenced by the lease, the engine's absence waited out, and two controllers on one store
// applying each workload once. The engine-backed suites (databases, kanban, two-svcd) run the
// same controller on the real engine.
import assert from 'node:assert/strict';
import { after, afterEach, before, beforeEach, describe, test } from 'node:test';
import pino from 'pino';
import { NodeUnavailableError, type Applied, type ApplyRequest, type Runtime } from '../src/runtime/index.js';
import { openStore, type Repositories, type Store, type WorkloadRow } from '../src/store/index.js';
import { DROPPED_CONNECTION_TRIES, Superseded, WorkloadController, parseSpecRecord, type WorkloadOutcome, type WorkloadRules } from '../src/workloads/controller.js';
import { eachStore, storeLocation, waitFor } from './harness.js';
import { ManualClock } from './manual-clock.js';
import { memoryRuntime } from './memory-runtime.js';

const SERVING = 'serving';
const SLOW = 'slow';

/** A connect error as the engine client reports an engine that is not there. */
function engineGone(): Error {
  return Object.assign(new Error('connect ECONNREFUSED /var/run/docker.sock'), { code: 'ECONNREFUSED', syscall: 'connect' });
}

/** Rules that run each row's spec image on port 8000 and keep every outcome they are told. */
class RecordingRules implements WorkloadRules {
  readonly outcomes: Array<{ resource: string; outcome: WorkloadOutcome['state']; nodeUnavailable?: boolean }> = [];
  applies = 0;
  /** Runs before each apply (a kind's own step, such as handing the generation over). */
  beforeApply: ((w: WorkloadRow) => Promise<void>) | null = null;

  constructor(private readonly runtime: Runtime) {}

  async apply(w: WorkloadRow, signal: AbortSignal): Promise<Applied> {
    this.applies += 1;
    await this.beforeApply?.(w);
    const spec = JSON.parse(w.spec) as { name: string; image: string };
    const request: ApplyRequest = {
      spec: { name: spec.name, image: spec.image, env: {}, port: 8000, tenantId: w.tenant_id, kind: 'database', resourceId: w.resource_id, limits: { memoryMb: 64, cpus: 0.1, pids: 64 }, sandbox: false, volumes: [{ name: spec.name, target: '/data' }] },
      pull: 'missing',
      ready: { timeoutMs: 120_000, everyMs: 20, probeTimeoutMs: 1_000 },
      signal,
    };
    return await this.runtime.apply(request);
  }

  observed(_tx: Repositories, w: WorkloadRow, outcome: WorkloadOutcome): Promise<void> {
    this.outcomes.push({ resource: w.resource_id, outcome: outcome.state, ...(outcome.state === 'waiting' && outcome.nodeUnavailable ? { nodeUnavailable: true } : {}) });
    return Promise.resolve();
  }
}

eachStore((kind) => {
  describe(`workload controller (${kind})`, () => {
    let store: Store;
    let cleanup: () => Promise<void>;
    let mem: ReturnType<typeof memoryRuntime>;
    let runtime: Runtime;
    let engineDown = false;
    /** How many removals fail next with an engine error that is not its absence (a timeout, a 500). */
    let failingRemovals = 0;
    /** How many applies fail next with the engine's connection dropped mid-request. */
    let droppingApplies = 0;
    /** How many applies fail next because the node the workload's data is on is away (a swarm node down). */
    let nodeAwayApplies = 0;
    /** The stops and removals asked of the engine, in order, with their ref. */
    const stopsAndRemovals: string[] = [];
    const controllers: WorkloadController[] = [];
    let seq = 0;

    /** What the controllers logged at warn and above: { workload, msg }. */
    const warnings: Array<{ workload?: string; msg: string }> = [];
    const log = pino({ level: 'warn' }, { write: (line: string) => void warnings.push(JSON.parse(line) as { workload?: string; msg: string }) });
    /**
     * The controllers' time, running a hundred times faster than real time (ManualClock.run):
     * their backoffs (1 s, 2 s, 4 s...) and passes pass in milliseconds, in the order they fall
     * due. A store's answer is waited for in real time meanwhile (PostgreSQL's, over a socket),
     * so leases are ten minutes unless the case is about them: a renewal has seconds of real time
     * to be written before the controller gives its work up.
     */
    let clock: ManualClock;
    let stopClock: () => void = () => {};
    const controller = (holder: string, leaseMs = 600_000, time: ManualClock = clock) => {
      const c = new WorkloadController({ store, runtime, clock: time, timers: time, log, holder, leaseMs });
      const rules = new RecordingRules(runtime);
      c.handle('database', rules);
      controllers.push(c);
      return { c, rules };
    };

    /** A new workload row asking for `image` to run. */
    const add = async (image: string, spec: { stopTimeoutS?: number } = {}): Promise<WorkloadRow> => {
      const id = `svc-db-ctl${++seq}-${Date.now()}`;
      const now = Math.floor(Date.now() / 1000);
      await store.workloads.insertPending({ id, tenant_id: 'tenantctl', kind: 'database', resource_id: id, spec: JSON.stringify({ name: id, image, volumes: [id], ...spec }) }, now);
      const row = await store.workloads.findById(id);
      assert.ok(row);
      return row;
    };
    const row = async (id: string) => {
      const r = await store.workloads.findById(id);
      assert.ok(r);
      return r;
    };
    const observedAt = (id: string, state: WorkloadRow['observed_state']) =>
      waitFor(`${id} observed ${state}`, async () => {
        const r = await store.workloads.findById(id);
        return r && r.observed_generation === r.generation && r.observed_state === state ? r : undefined;
      }, 20_000);

    before(async () => {
      const loc = await storeLocation(kind);
      store = await openStore(loc);
      cleanup = loc.cleanup;
      mem = memoryRuntime({ [SERVING]: { serves: true, output: 'ready' }, [SLOW]: { serves: true, startsAfterMs: 60_000 } });
      // The memory runtime, with an engine that can be switched off: every call fails as a missing socket does.
      runtime = new Proxy(mem.runtime, {
        get(target, prop, receiver) {
          const value = Reflect.get(target, prop, receiver) as unknown;
          if (typeof value !== 'function') return value;
          return (...args: unknown[]) => {
            if (engineDown) return Promise.reject(engineGone());
            if (prop === 'stop' || prop === 'remove') stopsAndRemovals.push(`${prop} ${String(args[0])}`);
            if (prop === 'apply' && nodeAwayApplies > 0) {
              nodeAwayApplies -= 1;
              return Promise.reject(new NodeUnavailableError('swarm node node2, which holds its data, is down: it starts again there once the node is back'));
            }
            if (prop === 'apply' && droppingApplies > 0) {
              droppingApplies -= 1;
              return Promise.reject(Object.assign(new Error('socket hang up'), { code: 'ECONNRESET' }));
            }
            if (prop === 'remove' && failingRemovals > 0) {
              failingRemovals -= 1;
              return Promise.reject(new Error('(HTTP code 500) server error - could not kill: tried to kill container, but did not receive an exit event'));
            }
            return (value as (...a: unknown[]) => unknown).apply(target, args);
          };
        },
      });
    });
    beforeEach(() => {
      clock = new ManualClock(Date.now());
      stopClock = clock.run(100);
    });
    afterEach(async () => {
      stopClock();
      for (const c of controllers.splice(0)) await c.close();
      engineDown = false;
      failingRemovals = 0;
      droppingApplies = 0;
      nodeAwayApplies = 0;
      stopsAndRemovals.length = 0;
      warnings.length = 0;
    });
    after(async () => {
      await mem.driver.close();
      await store.close();
      await cleanup();
    });

    test('a lagging row is claimed, applied and observed running at its endpoint; stopped and absent follow', async () => {
      const { c, rules } = controller('ctl-a/1');
      const w = await add(SERVING);
      c.start();
      const running = await observedAt(w.id, 'running');
      assert.ok(running.driver_ref);
      assert.equal((await mem.driver.inspect(running.driver_ref))?.state, 'running');
      assert.match(running.endpoint ?? '', /^127\.\d+\.\d+\.\d+:8000$/);
      assert.equal(running.lease_holder, null, 'the lease is freed with the observation');

      await store.workloads.request('database', w.id, 'stopped', 0);
      c.kick();
      await observedAt(w.id, 'stopped');
      assert.equal(await mem.driver.inspect(running.driver_ref), null, 'its container is gone');
      assert.ok(mem.driver.volumeNames().includes(w.id), 'its volume is kept');

      await store.workloads.request('database', w.id, 'absent', 0);
      c.kick();
      await waitFor('the row to go', async () => (await store.workloads.findById(w.id)) === undefined);
      assert.ok(!mem.driver.volumeNames().includes(w.id), 'the volume went with it');
      assert.deepEqual(rules.outcomes.filter((o) => o.resource === w.id).map((o) => o.outcome), ['running', 'stopped', 'absent']);
    });

    test("a wait for a workload's change ends when this process's work on it ends, not on another's; its signal ends it too", async () => {
      const { c } = controller('ctl-wake/1');
      const w = await add(SERVING);
      const stop = new AbortController();
      // Pauses of a minute: within the test only a wake ends them.
      /** 'ended' when `wait` ends within `ms`, else 'still waiting' (its timer cleared either way). */
      const within = async (wait: Promise<void>, ms: number) => {
        let timer: NodeJS.Timeout | undefined;
        const late = new Promise<string>((r) => (timer = setTimeout(() => r('still waiting'), ms)));
        try {
          return await Promise.race([wait.then(() => 'ended'), late]);
        } finally {
          clearTimeout(timer);
        }
      };
      const onIt = c.nextChange(60_000, 'database', w.id, stop.signal);
      const onAnother = c.nextChange(60_000, 'database', `${w.id}-other`, stop.signal);
      c.start();
      assert.equal(await within(onIt, 15_000), 'ended', 'woken by the end of the work on it');
      await observedAt(w.id, 'running');
      assert.equal(await within(onAnother, 200), 'still waiting', "not by another workload's");
      stop.abort();
      assert.equal(await within(onAnother, 15_000), 'ended', 'ended by its signal');
    });

    test('a newer request wins over the apply under way: it is aborted, its container removed, and the newer one carried out', async () => {
      const { c, rules } = controller('ctl-a/1');
      const w = await add(SLOW);
      c.start();
      await waitFor('the apply to run', async () => ((await mem.driver.list({ tenantId: 'tenantctl' })).some((x) => x.name === w.id) ? true : undefined));
      const startedAt = Date.now();
      await store.workloads.request('database', w.id, 'stopped', 0);
      await observedAt(w.id, 'stopped');
      assert.ok(Date.now() - startedAt < 5_000, 'within a few generation checks, not the minute the apply would wait');
      assert.equal((await mem.driver.list({ tenantId: 'tenantctl' })).filter((x) => x.name === w.id).length, 0);
      assert.deepEqual(rules.outcomes.filter((o) => o.resource === w.id).map((o) => o.outcome), ['stopped'], 'the aborted apply wrote nothing');
    });

    test("a dead holder's lease is waited out; then another controller takes the row over and applies it", async () => {
      const w = await add(SERVING);
      // A svcd that claimed the row and died: its lease runs 5 s more. Time stands still while
      // the live lease is looked at (its passes kicked, not timed).
      stopClock();
      assert.equal(await store.workloads.claim(w.id, 'dead-svcd/1', clock.now(), 5_000), true);
      const { c, rules } = controller('ctl-b/1');
      c.start();
      await c.passNow();
      assert.equal(rules.applies, 0, 'not while the lease is live');
      assert.equal((await row(w.id)).lease_holder, 'dead-svcd/1');
      stopClock = clock.run(100);
      const running = await observedAt(w.id, 'running');
      assert.equal(rules.applies, 1);
      assert.ok(running.driver_ref);
    });

    test('writes are fenced: a holder whose lease lapsed and was taken over cannot observe, renew or release', async () => {
      const w = await add(SERVING);
      const t0 = Date.now();
      assert.equal(await store.workloads.claim(w.id, 'old/1', t0, 100), true);
      assert.equal(await store.workloads.claim(w.id, 'new/1', t0 + 50, 30_000), false, 'a live lease is not taken');
      assert.equal(await store.workloads.claim(w.id, 'new/1', t0 + 200, 30_000), true, 'a lapsed one is');
      assert.equal(await store.workloads.observe(w.id, 'old/1', 1, { observed_state: 'failed', last_error: 'stale' }, 0), false);
      assert.equal(await store.workloads.renew(w.id, 'old/1', t0 + 300, 30_000), false);
      assert.equal(await store.workloads.release(w.id, 'old/1', 1, null, 'stale', 0), false);
      const now = await row(w.id);
      assert.equal(now.lease_holder, 'new/1');
      assert.equal(now.observed_state, 'pending');
      assert.equal(now.last_error, null);
      assert.equal(await store.workloads.observe(w.id, 'new/1', 1, { observed_state: 'running', last_error: null }, 0), true, 'the holder itself can');
    });

    test('while the engine is away the row waits with backoff, saying so; when it answers, the workload is applied', async () => {
      const { c, rules } = controller('ctl-a/1');
      engineDown = true;
      const w = await add(SERVING);
      c.start();
      const waiting = await waitFor('the first try to fail', async () => {
        const r = await store.workloads.findById(w.id);
        return r?.retry_at_ms ? r : undefined;
      });
      assert.match(waiting.last_error ?? '', /ECONNREFUSED/);
      assert.equal(waiting.observed_generation, 0, 'not observed: it is still to be applied');
      assert.ok(rules.outcomes.some((o) => o.resource === w.id && o.outcome === 'waiting'));
      assert.ok(!rules.outcomes.some((o) => o.resource === w.id && o.outcome === 'failed'), 'never failed for it');
      engineDown = false;
      await observedAt(w.id, 'running');
    });

    test("while the node a workload's data is on is away (the engine answers), it waits as unavailable, never failed; it is applied once the node is back", async () => {
      const { c, rules } = controller('ctl-a/1');
      nodeAwayApplies = 1;
      const w = await add(SERVING);
      c.start();
      const waiting = await waitFor('the first try to be refused', async () => {
        const r = await store.workloads.findById(w.id);
        return r?.retry_at_ms ? r : undefined;
      });
      assert.match(waiting.last_error ?? '', /swarm node node2, which holds its data, is down/);
      assert.equal(waiting.observed_generation, 0, 'not observed: it is still to be applied');
      assert.ok(rules.outcomes.some((o) => o.resource === w.id && o.outcome === 'waiting' && o.nodeUnavailable), JSON.stringify(rules.outcomes));
      await observedAt(w.id, 'running');
      assert.ok(!rules.outcomes.some((o) => o.resource === w.id && o.outcome === 'failed'), 'never failed for it');
    });

    test('a start whose engine connection drops mid-request (the engine restarting under it) is tried again, and applied', async () => {
      const { c, rules } = controller('ctl-a/1');
      droppingApplies = DROPPED_CONNECTION_TRIES - 1;
      const w = await add(SERVING);
      c.start();
      await observedAt(w.id, 'running');
      assert.equal(droppingApplies, 0);
      assert.ok(rules.outcomes.some((o) => o.resource === w.id && o.outcome === 'waiting'));
      assert.ok(!rules.outcomes.some((o) => o.resource === w.id && o.outcome === 'failed'), 'never failed for it');
    });

    test('a start whose connection drops as the engine comes back, after tries while it was away, is still tried again', async () => {
      const { c } = controller('ctl-a/1');
      engineDown = true;
      const w = await add(SERVING);
      c.start();
      await waitFor('tries while the engine is away', async () => ((await row(w.id)).attempts >= DROPPED_CONNECTION_TRIES ? true : undefined), 30_000);
      droppingApplies = 1;
      engineDown = false;
      await observedAt(w.id, 'running');
      assert.equal(droppingApplies, 0, 'the dropped connection happened');
    });

    test('a start whose engine connection drops every time (the engine too slow for its client) fails after a few tries, not never', async () => {
      const { c, rules } = controller('ctl-a/1');
      droppingApplies = 100;
      const w = await add(SERVING);
      c.start();
      const failed = await observedAt(w.id, 'failed');
      assert.match(failed.last_error ?? '', /socket hang up/);
      assert.equal(100 - droppingApplies, DROPPED_CONNECTION_TRIES, 'tries');
      assert.ok(rules.outcomes.some((o) => o.resource === w.id && o.outcome === 'failed'));
    });

    test('a controller whose lease went to another holder stops its apply, removes what it started, and writes nothing', async () => {
      // A lease of a minute, renewed every 20 s: losing it shows at the next renewal.
      const { c, rules } = controller('ctl-a/1', 60_000);
      const w = await add(SLOW);
      c.start();
      await waitFor('the apply to run', async () => ((await mem.driver.list({ tenantId: 'tenantctl' })).some((x) => x.name === w.id) ? true : undefined));
      // Another svcd takes the row over (as if this one had stalled past its lease).
      assert.equal(await store.workloads.release(w.id, 'ctl-a/1', 1, null, null, 0), true);
      assert.equal(await store.workloads.claim(w.id, 'ctl-b/1', clock.now(), 600_000), true);
      await waitFor('the apply to stop and remove its container', async () => ((await mem.driver.list({ tenantId: 'tenantctl' })).some((x) => x.name === w.id) ? undefined : true), 15_000);
      const now = await row(w.id);
      assert.equal(now.lease_holder, 'ctl-b/1', "the other holder's lease stands");
      assert.equal(now.observed_generation, 0);
      assert.deepEqual(rules.outcomes.filter((o) => o.resource === w.id), [], 'nothing written by the one that lost it');
    });

    test('a stop the engine refuses is tried again, never given up as failed', async () => {
      const { c, rules } = controller('ctl-a/1');
      const w = await add(SERVING);
      c.start();
      await observedAt(w.id, 'running');
      failingRemovals = 1;
      await store.workloads.request('database', w.id, 'stopped', 0);
      c.kick();
      const waiting = await waitFor('the refusal to be recorded', async () => {
        const r = await store.workloads.findById(w.id);
        return r?.retry_at_ms ? r : undefined;
      });
      assert.match(waiting.last_error ?? '', /could not kill/);
      const stopped = await observedAt(w.id, 'stopped');
      assert.equal(stopped.last_error, null);
      assert.deepEqual(rules.outcomes.filter((o) => o.resource === w.id).map((o) => o.outcome), ['running', 'stopped'], 'no failed, no waiting for a stop');
    });

    test('two controllers on one store apply each workload once', async () => {
      const a = controller('ctl-a/1');
      const b = controller('ctl-b/1');
      const rows = await Promise.all([add(SERVING), add(SERVING), add(SERVING), add(SERVING)]);
      a.c.start();
      b.c.start();
      for (const w of rows) await observedAt(w.id, 'running');
      assert.equal(a.rules.applies + b.rules.applies, rows.length, 'one apply per workload, not one per controller');
      for (const w of rows) {
        const r = await row(w.id);
        assert.equal((await mem.driver.list({ tenantId: 'tenantctl' })).filter((x) => x.name === parseSpecRecord(r).name && x.state === 'running').length, 1);
      }
    });

    test('a running workload whose container vanished is marked lost by reconcile and applied again', async () => {
      const { c } = controller('ctl-a/1');
      const w = await add(SERVING);
      c.start();
      const first = await observedAt(w.id, 'running');
      assert.ok(first.driver_ref);
      await mem.driver.remove(first.driver_ref);
      await c.reconcile();
      const again = await observedAt(w.id, 'running');
      assert.notEqual(again.driver_ref, first.driver_ref);
      assert.equal((await mem.driver.inspect(again.driver_ref ?? ''))?.state, 'running');
    });

    test('a request made in this process stops the apply under way at once, without waiting for a timer', async () => {
      // Timers that never fire: neither the pass nor the generation watch runs unless kicked.
      const { c, rules } = controller('ctl-a/1', undefined, new ManualClock(Date.now()));
      const w = await add(SLOW);
      c.kick();
      await waitFor('the apply to run', async () => ((await mem.driver.list({ tenantId: 'tenantctl' })).some((x) => x.name === w.id) ? true : undefined));
      await store.workloads.request('database', w.id, 'stopped', 0);
      c.kick();
      await observedAt(w.id, 'stopped');
      assert.deepEqual(rules.outcomes.filter((o) => o.resource === w.id).map((o) => o.outcome), ['stopped']);
    });

    test('a kind that hands its generation over in apply (Superseded) has nothing written for the old one; the new one is applied', async () => {
      const { c, rules } = controller('ctl-a/1');
      const w = await add(SERVING);
      rules.beforeApply = async (x) => {
        if (x.generation !== 1) return;
        assert.equal(await store.workloads.request('database', x.id, 'running', 0, { ifGeneration: 1 }), 2);
        throw new Superseded('a new generation was requested in its place');
      };
      c.start();
      const running = await waitFor('generation 2 to run', async () => {
        const r = await row(w.id);
        return r.observed_generation === 2 && r.observed_state === 'running' ? r : undefined;
      }, 20_000);
      assert.equal(running.last_error, null);
      assert.equal(rules.applies, 2);
      assert.deepEqual(rules.outcomes.filter((o) => o.resource === w.id).map((o) => o.outcome), ['running'], 'no failure for the generation handed over');
      assert.deepEqual(warnings.filter((x) => x.workload === w.id).map((x) => x.msg), [], 'nor one in the log');
    });

    test("a claim waits for the row's retry time, even one set after the row was listed", async () => {
      const w = await add(SERVING);
      await store.workloads.request('database', w.id, 'running', 0, { retryAtMs: Date.now() + 60_000 });
      assert.equal(await store.workloads.claim(w.id, 'ctl-x/1', Date.now(), 30_000), false, 'not before its retry time');
      assert.equal(await store.workloads.claim(w.id, 'ctl-x/1', Date.now() + 61_000, 30_000), true, 'once it is due');
    });

    test('a conditional request is refused once the generation moved on', async () => {
      const w = await add(SERVING);
      assert.equal(await store.workloads.request('database', w.id, 'running', 0, { ifGeneration: 1 }), 2);
      assert.equal(await store.workloads.request('database', w.id, 'stopped', 0, { ifGeneration: 1 }), null, 'read at 1, acted on at 2: nothing written');
      const now = await row(w.id);
      assert.deepEqual([now.generation, now.desired_state], [2, 'running']);
    });

    test('a workload with a grace period is stopped before it is removed; one without is removed at once', async () => {
      const { c } = controller('ctl-a/1');
      const graceful = await add(SERVING, { stopTimeoutS: 3 });
      const abrupt = await add(SERVING);
      c.start();
      const refs = [(await observedAt(graceful.id, 'running')).driver_ref, (await observedAt(abrupt.id, 'running')).driver_ref];
      for (const w of [graceful, abrupt]) await store.workloads.request('database', w.id, 'stopped', 0);
      c.kick();
      for (const w of [graceful, abrupt]) await observedAt(w.id, 'stopped');
      assert.deepEqual(stopsAndRemovals.filter((x) => x.endsWith(refs[0] ?? '-')), [`stop ${refs[0]}`, `remove ${refs[0]}`]);
      assert.deepEqual(stopsAndRemovals.filter((x) => x.endsWith(refs[1] ?? '-')), [`remove ${refs[1]}`]);
    });

    test("reconcile removes a container of a controlled kind whose workload row is gone, and keeps one whose row exists", async () => {
      const { c } = controller('ctl-a/1');
      const kept = await add(SERVING);
      c.start();
      const keptRef = (await observedAt(kept.id, 'running')).driver_ref;
      assert.ok(keptRef);
      const { ref: orphan } = await runtime.apply({
        spec: { name: `orphan-${Date.now()}`, image: SERVING, env: {}, port: 8000, tenantId: 'tenantctl', kind: 'database', resourceId: 'no-such-database', limits: { memoryMb: 64, cpus: 0.1, pids: 64 }, sandbox: false },
        pull: 'missing',
        ready: { timeoutMs: 20_000, everyMs: 20, probeTimeoutMs: 1_000 },
        signal: new AbortController().signal,
      });
      assert.ok(await mem.driver.inspect(orphan), 'the orphan runs before reconcile');
      await c.reconcile();
      assert.equal(await mem.driver.inspect(orphan), null, 'the orphan is removed');
      assert.equal((await mem.driver.inspect(keptRef))?.state, 'running', 'the container of a row is kept');
    });
  });
});
