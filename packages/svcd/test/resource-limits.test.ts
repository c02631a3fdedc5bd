// The bookkeeping behind the resource limits: session slots on both stores (counted across svcd
// processes, a dead holder's slots expire), the scratch budget, and whose built image is whose.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { SessionLimits } from '../src/sessions/session-limits.js';
import { ScratchSpace, SCRATCH_DISK_RESERVE_BYTES } from '../src/scratch/scratch-space.js';
import { DataDirLockedError, loadInstanceId, lockDataDir } from '../src/instance.js';
import { builtImageOwner } from '../src/services/images.js';
import { openStore, type Store } from '../src/store/index.js';
import { eachStore, storeLocation, tenantRow, waitFor } from './harness.js';
import { ManualClock } from './manual-clock.js';

const caps = { tenant: { logs: 2, exec: 1, sync: 1 }, svcd: { logs: 10, exec: 10, sync: 10 }, leaseMs: 60_000 };

eachStore((kind) => {
  describe(`session slots (${kind})`, () => {
    let store: Store;
    let second: Store;
    let cleanup: () => Promise<void>;
    const clock = new ManualClock();

    before(async () => {
      const loc = await storeLocation(kind);
      cleanup = loc.cleanup;
      store = await openStore(loc);
      second = await openStore(loc);
      await store.tenants.insert(tenantRow('t-slots', 'slots'));
      await store.tenants.insert(tenantRow('t-other', 'other'));
    });
    after(async () => {
      await store.close();
      await second.close();
      await cleanup();
    });

    test("a tenant's cap holds across two svcd on one store; a released slot is free again", async () => {
      const one = new SessionLimits(store, clock, clock, 'instance-a/boot1', caps);
      const two = new SessionLimits(second, clock, clock, 'instance-b/boot1', caps);
      const s1 = await one.acquire('t-slots', 'logs');
      const s2 = await two.acquire('t-slots', 'logs');
      await assert.rejects(one.acquire('t-slots', 'logs'), /quota exceeded: at most 2 log streams at once/);
      await assert.rejects(two.acquire('t-slots', 'logs'), /quota exceeded: at most 2 log streams at once/);
      // Other kinds and other tenants are counted apart.
      await (await one.acquire('t-slots', 'exec')).release();
      const other = await two.acquire('t-other', 'logs');
      await s1.release();
      const s3 = await two.acquire('t-slots', 'logs');
      await Promise.all([s2, s3, other].map((s) => s.release()));
    });

    test("a holder that died: its slots expire with their lease; a live holder's renewals keep them", async () => {
      const dead = new SessionLimits(store, clock, clock, 'instance-c/boot1', caps);
      const live = new SessionLimits(second, clock, clock, 'instance-d/boot1', caps);
      await live.start();
      try {
        await dead.acquire('t-slots', 'sync'); // never released: its process is gone
        await assert.rejects(live.acquire('t-slots', 'sync'), /quota exceeded/);
        const kept = await live.acquire('t-slots', 'exec');
        // Past the lease: the dead holder's slot no longer counts; the live one's was renewed.
        clock.advance(caps.leaseMs + 25_000);
        // The renewal runs on its timer without being awaited: its write is waited for, not a fixed moment.
        await waitFor('the live holder to renew its slot', async () => ((await second.sessionSlots.countLive('t-slots', 'exec', clock.now())) === 1 ? true : undefined), 10_000);
        const fresh = await live.acquire('t-slots', 'sync');
        await assert.rejects(dead.acquire('t-slots', 'exec'), /quota exceeded: at most 1 commands/);
        await Promise.all([kept.release(), fresh.release()]);
      } finally {
        live.close();
      }
    });

    test('a restarted instance drops the slots of its earlier boot at once', async () => {
      const before = new SessionLimits(store, clock, clock, 'instance-e/boot1', caps);
      await before.acquire('t-other', 'sync');
      const after = new SessionLimits(store, clock, clock, 'instance-e/boot2', caps);
      await assert.rejects(after.acquire('t-other', 'sync'), /quota exceeded/);
      await after.start();
      try {
        await (await after.acquire('t-other', 'sync')).release();
      } finally {
        after.close();
      }
    });
  });
});

describe('scratch space', () => {
  const dirs: string[] = [];
  after(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })));
  const root = () => {
    const d = mkdtempSync(join(tmpdir(), 'svc-scratch-test-'));
    dirs.push(d);
    return join(d, 'instance');
  };
  const MB = 1024 * 1024;

  test('clones reserve their cap: within the budget they get a fresh directory, past it none', async () => {
    const space = new ScratchSpace(root(), 1000 * MB, () => 100 * 1024 * MB);
    await space.start();
    const a = space.reserve('builds', 'b1', 500 * MB);
    const b = space.reserve('sync', 'e1', 500 * MB);
    assert.ok(a && b);
    assert.notEqual(a.dir, b.dir);
    assert.ok(a.dir.startsWith(join(space.root, 'builds')) && b.dir.startsWith(join(space.root, 'sync')));
    assert.equal(space.reserve('builds', 'b2', 1), null, 'the budget is spent');
    writeFileSync(join(a.dir, 'file'), 'x');
    await a.release();
    await a.release(); // twice is harmless
    assert.ok(!existsSync(a.dir), 'a released clone is removed');
    assert.equal(space.inUse, 500 * MB);
    const c = space.reserve('builds', 'b3', 500 * MB);
    assert.ok(c, 'a released reservation is free again');
  });

  test('no clone starts when the disk lacks room for it and the reserve, whatever the budget', async () => {
    let free = 500 * MB + SCRATCH_DISK_RESERVE_BYTES - 1;
    const space = new ScratchSpace(root(), 100_000 * MB, () => free);
    await space.start();
    assert.equal(space.reserve('sync', 'e1', 500 * MB), null);
    assert.equal(space.inUse, 0, 'a refused reservation holds nothing');
    free += 1;
    assert.ok(space.reserve('sync', 'e1', 500 * MB));
  });

  test('a scratch directory others may write to is refused at start', async () => {
    const shared = mkdtempSync(join(tmpdir(), 'svc-scratch-shared-'));
    dirs.push(shared);
    chmodSync(shared, 0o777);
    await assert.rejects(new ScratchSpace(join(shared, 'instance'), 1000 * MB).start(), /must be a directory owned by svcd's user and writable by it alone/);
    chmodSync(shared, 0o700);
    await new ScratchSpace(join(shared, 'instance'), 1000 * MB).start();
  });

  test('concurrent clones each need their room on the disk: reservations count as written', async () => {
    const space = new ScratchSpace(root(), 100_000 * MB, () => 900 * MB + SCRATCH_DISK_RESERVE_BYTES);
    await space.start();
    assert.ok(space.reserve('builds', 'b1', 500 * MB));
    assert.equal(space.reserve('builds', 'b2', 500 * MB), null, 'the disk has room for one of them, not both');
  });

  test('start clears what an earlier process of the instance left', async () => {
    const space = new ScratchSpace(root(), 1000 * MB, () => 100 * 1024 * MB);
    await space.start();
    const left = space.reserve('builds', 'crashed', 10 * MB);
    assert.ok(left);
    writeFileSync(join(left.dir, 'half-cloned'), 'x');
    await new ScratchSpace(space.root, 1000 * MB).start();
    assert.ok(!existsSync(left.dir));
  });

  test('close removes the instance folder and nothing beside it; not while a clone runs in it; no reservation after', async () => {
    const space = new ScratchSpace(root(), 1000 * MB, () => 100 * 1024 * MB);
    await space.start();
    const area = space.reserve('builds', 'b1', 10 * MB);
    assert.ok(area);
    writeFileSync(join(area.dir, 'file'), 'x');
    const beside = join(dirname(space.root), 'other-instance');
    mkdirSync(beside);
    assert.equal(await space.close(), false, 'a clone still runs');
    assert.ok(existsSync(join(area.dir, 'file')), 'its clone is left alone');
    assert.equal(space.reserve('sync', 'e1', 10 * MB), null, 'a stopping svcd takes no new clone');
    await area.release();
    assert.equal(await space.close(), true);
    assert.ok(!existsSync(space.root));
    assert.ok(existsSync(beside), "another instance's folder stays");
  });

  test('the instance id that names the folder is what svcd writes; anything else is refused', () => {
    const dir = mkdtempSync(join(tmpdir(), 'svc-instance-'));
    dirs.push(dir);
    const id = loadInstanceId(dir);
    assert.match(id, /^[0-9a-f]{16}$/);
    assert.equal(loadInstanceId(dir), id, 'kept across starts');
    for (const bad of ['', '..', '../other', '/', 'ABCDEF0123456789', `${id}/x`]) {
      writeFileSync(join(dir, 'instance-id'), bad);
      assert.throws(() => loadInstanceId(dir), /holds no instance id/, bad);
    }
    writeFileSync(join(dir, 'instance-id'), `${id}\n`);
    assert.equal(loadInstanceId(dir), id, 'a trailing newline (an operator editing it) is fine');
  });

  test("a data directory is one svcd's: a live holder refuses, a file from a process that is gone, another boot or not svcd's does not; the release removes only its own", async () => {
    const dir = mkdtempSync(join(tmpdir(), 'svc-instance-'));
    dirs.push(dir);
    const file = join(dir, 'svcd.pid');
    const release = lockDataDir(dir);
    const mine = readFileSync(file, 'utf8');
    assert.equal((JSON.parse(mine) as { pid: number }).pid, process.pid);
    assert.throws(() => lockDataDir(dir), (err: Error) => err instanceof DataDirLockedError && err.message.includes(`pid ${String(process.pid)}`), 'a second start in this very process');
    release();
    assert.ok(!existsSync(file));
    assert.deepEqual(readdirSync(dir), [], 'nothing else left: the file is written whole under another name, then linked in place');
    // This process's own pid with another start: its predecessor's, killed (in a container svcd is PID 1 at every start).
    const boot = readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim();
    writeFileSync(file, JSON.stringify({ pid: process.pid, boot, started: '1' }));
    lockDataDir(dir)();
    assert.ok(!existsSync(file), "a predecessor's file of the same pid is taken over");
    // Another live process (a child that sleeps), as its own lock would name it.
    const child = spawn('sleep', ['30'], { stdio: 'ignore' });
    try {
      const pid = child.pid!;
      const stat = readFileSync(`/proc/${String(pid)}/stat`, 'utf8');
      const started = stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19]!;
      writeFileSync(file, JSON.stringify({ pid, boot, started }));
      assert.throws(() => lockDataDir(dir), new RegExp(`another svcd \\(pid ${String(pid)}\\)`), 'a live holder');
      assert.equal(readFileSync(file, 'utf8'), JSON.stringify({ pid, boot, started }), 'and its file stays');
      // Not that process: the same pid started at another moment (a pid used again), or another boot.
      for (const stale of [{ pid, boot, started: String(Number(started) + 1) }, { pid, boot: 'another-boot', started }, 'not json', { pid: 'x' }]) {
        writeFileSync(file, typeof stale === 'string' ? stale : JSON.stringify(stale));
        const again = lockDataDir(dir);
        assert.equal((JSON.parse(readFileSync(file, 'utf8')) as { pid: number }).pid, process.pid, JSON.stringify(stale));
        again();
      }
      // A release whose file another svcd has since taken leaves it.
      const taken = lockDataDir(dir);
      writeFileSync(file, JSON.stringify({ pid, boot, started }));
      taken();
      assert.ok(existsSync(file), "another svcd's file stays");
    } finally {
      child.kill();
    }
    // A holder that is gone (exited and reaped).
    const ended = spawn('true');
    await new Promise((resolve) => ended.once('close', resolve));
    writeFileSync(file, JSON.stringify({ pid: ended.pid, boot, started: '1' }));
    lockDataDir(dir)();
    assert.ok(!existsSync(file), 'taken, then released');
  });
});

describe("a built image's owner (disk quota)", () => {
  test('only svc/<tenant>/<service>:<build>, locally or under the build registry, names a tenant', () => {
    const registry = '127.0.0.1:5000';
    assert.equal(builtImageOwner('svc/abc123/s1:b1', null), 'abc123');
    assert.equal(builtImageOwner('127.0.0.1:5000/svc/abc123/s1:b1', registry), 'abc123');
    // Names a tenant could give an image it pulls do not charge another tenant.
    for (const tag of ['docker.io/evil/svc/abc123/s1:b1', '127.0.0.1:5001/svc/abc123/s1:b1', 'evil/svc/abc123/s1:b1', 'svc/ABC/s1:b1', 'svc/abc123/s1/x:b1', 'busybox:latest']) {
      assert.equal(builtImageOwner(tag, registry), null, tag);
    }
  });
});
