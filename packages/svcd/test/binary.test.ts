// The built launcher bin/svcd: start-up refusals, production start, graceful SIGTERM, and a
// SIGKILL that loses nothing.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, test } from 'node:test';
import { SvcClient, type Service } from '@svc/client';
import { BUSYBOX_IMAGE, docker, ensureTestImages, removeTenantWorkloads } from './images.js';
import { BIN, exited, startSvcdProcess } from './svcd-process.js';
import { freePort, waitFor } from './harness.js';

const TOKEN = 'binary-test-bootstrap-token-0123456789';
const dirs: string[] = [];
after(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })));

function dataDir(): string {
  const d = mkdtempSync(join(tmpdir(), 'svcd-bin-'));
  dirs.push(d);
  return d;
}

/** bin/svcd run with `args` as given, for a start expected to end by itself (a refusal, a failure). */
function startThatEnds(args: string[], env: Record<string, string> = {}) {
  return spawnSync(BIN, args, { env: { PATH: process.env.PATH, ...env }, encoding: 'utf8', timeout: 20_000 });
}

function refuse(args: string[], env: Record<string, string>, message: RegExp): void {
  const r = startThatEnds([...args, '--data-dir', dataDir()], env);
  assert.equal(r.status, 2, `${args.join(' ')}: ${r.stderr}`);
  assert.match(r.stderr, message);
}

const start = startSvcdProcess;

/** The host's egress allowance rules for one address (this machine's iptables). */
function allowanceRulesOf(address: string): string[] {
  return spawnSync('iptables', ['-w', '-S'], { encoding: 'utf8' })
    .stdout.split('\n')
    .filter((line) => line.includes(`-d ${address}/32 `));
}

describe('bin/svcd start-up', () => {
  test('production refuses to start without SVC_BOOTSTRAP_TOKEN', () => {
    refuse([], {}, /SVC_BOOTSTRAP_TOKEN is required/);
  });
  test('tokens shorter than 32 characters are refused', () => {
    refuse([], { SVC_BOOTSTRAP_TOKEN: 'too-short' }, /at least 32/);
    refuse([], { SVC_BOOTSTRAP_TOKEN: TOKEN, SVC_ADMIN_TOKEN: `${'a'.repeat(32)},short` }, /SVC_ADMIN_TOKEN/);
  });
  test('--open-registration needs --dev', () => {
    refuse(['--open-registration'], { SVC_BOOTSTRAP_TOKEN: TOKEN }, /only with --dev/);
  });

  test('production refuses to start when the tenant egress rules cannot be installed; --egress-allow is checked', () => {
    // An iptables that always fails, first on PATH: the rules cannot go in.
    const bin = dataDir();
    writeFileSync(join(bin, 'iptables'), '#!/bin/sh\necho "iptables: Permission denied (you must be root)" >&2\nexit 4\n', { mode: 0o755 });
    const r = spawnSync(BIN, ['--listen', '127.0.0.1:0', '--metrics-listen', 'off', '--data-dir', dataDir()], {
      env: { PATH: `${bin}:${process.env.PATH}`, SVC_BOOTSTRAP_TOKEN: TOKEN },
      encoding: 'utf8',
      timeout: 30_000,
    });
    assert.equal(r.status, 2, r.stderr);
    assert.match(r.stderr, /tenant egress rules could not be installed: iptables: Permission denied/);
    refuse(['--dev', '--egress-allow', '10.0.0.300/32'], {}, /--egress-allow entries must be IPv4 CIDR\[:PORT\]/);
    refuse(['--dev', '--egress-allow', '10.0.0.5:70000'], {}, /--egress-allow/);
  });

  test('scratch space must lie outside the data dir, with a budget in range', () => {
    // The data dirs of these tests live under the system's temp dir, so that one contains them.
    refuse(['--dev', '--scratch-dir', tmpdir()], {}, /--scratch-dir .* must lie outside --data-dir/);
    refuse(['--dev', '--scratch-budget-gb', '0'], {}, /--scratch-budget-gb must be a number from 1 to 10000/);
  });

  test("a data directory's instance id that svcd did not write is refused, with what to do", async () => {
    const dir = dataDir();
    writeFileSync(join(dir, 'instance-id'), '../elsewhere\n');
    const r = startThatEnds(['--dev', '--data-dir', dir, '--listen', '127.0.0.1:0', '--metrics-listen', 'off']);
    assert.equal(r.status, 2, r.stderr);
    assert.match(r.stderr, /^svcd: .*instance-id holds no instance id .*remove the file and svcd writes a new one\n$/);
    // As it says: without the file it starts, and writes a new one.
    rmSync(join(dir, 'instance-id'));
    const { proc } = await start(['--dev', '--data-dir', dir]);
    const done = exited(proc);
    proc.kill('SIGTERM');
    assert.equal(await done, 0);
    assert.match(readFileSync(join(dir, 'instance-id'), 'utf8'), /^[0-9a-f]{16}$/);
  });

  test('svc-init and the log rate are checked', () => {
    refuse(['--dev', '--tenant-init', '/nonexistent/svc-init'], {}, /svc-init is missing at \/nonexistent\/svc-init/);
    refuse(['--dev', '--log-lines-per-second', '9'], {}, /--log-lines-per-second must be an integer from 10 to 1000000/);
    refuse(['--dev', '--log-kib-per-second', '15.5'], {}, /--log-kib-per-second must be an integer from 16 to 1048576/);
  });

  test('metering and metrics flags are checked', () => {
    refuse(['--dev', '--metering-interval', '0'], {}, /--metering-interval must be whole seconds from 1 to 3600/);
    refuse(['--dev', '--metering-retention-days', '1'], {}, /--metering-retention-days must be an integer from 2 to 3650/);
    refuse(['--dev', '--metering-database-url', 'mysql://x'], {}, /--metering-database-url must be a postgres:\/\/ URL/);
    refuse(['--dev', '--metrics-listen', 'nowhere'], {}, /listen address must be HOST:PORT/);
  });

  test('--metrics-listen serves Prometheus text; a taken address stops start-up with its name, and the failed start undoes only its own', async () => {
    // The host's egress rules (this machine's iptables, as every svcd here installs them): an
    // allowance of the running svcd, which the failed one names too (each has its own rule of
    // it), and one of its own.
    const shared = '192.0.2.57/32:5057';
    const ownOnly = '192.0.2.58/32:5058';
    const port = await freePort();
    const runningDir = dataDir();
    const { proc } = await start(['--dev', '--data-dir', runningDir, '--metrics-listen', `127.0.0.1:${port}`, '--egress-allow', shared]);
    const runningTag = `--comment svc-egress-allow-${readFileSync(join(runningDir, 'instance-id'), 'utf8').trim()}-`;
    const done = exited(proc);
    try {
      const r = await fetch(`http://127.0.0.1:${port}/metrics`);
      assert.equal(r.status, 200);
      assert.match(await r.text(), /^# HELP svc_http_requests_total /m);
      assert.equal(allowanceRulesOf('192.0.2.57').length, 4, "the running svcd's allowance (TCP and UDP, in the egress and the host chain)");
      const secondScratch = dataDir();
      const second = startThatEnds(['--dev', '--data-dir', dataDir(), '--scratch-dir', secondScratch, '--listen', '127.0.0.1:0', '--metrics-listen', `127.0.0.1:${port}`, '--egress-allow', `${shared},${ownOnly}`]);
      assert.equal(second.status, 1);
      assert.match(second.stderr, new RegExp(`--metrics-listen 127\\.0\\.0\\.1:${port}: listen EADDRINUSE`));
      // What its start had made goes as at a stop (its folder was made before the port was tried),
      // but not what it found: the running svcd's allowance stays.
      assert.deepEqual(readdirSync(secondScratch), [], 'a failed start leaves no scratch folder');
      assert.deepEqual(allowanceRulesOf('192.0.2.58'), [], 'the allowance the failed start inserted is gone');
      // Each svcd has its own copy of the entry both name: the running one's stays.
      const sharedEntry = allowanceRulesOf('192.0.2.57');
      assert.equal(sharedEntry.length, 4, "the running svcd's allowance is still there, and only its");
      assert.ok(sharedEntry.every((line) => line.includes(runningTag)), sharedEntry.join('\n'));
    } finally {
      proc.kill('SIGTERM');
    }
    assert.equal(await done, 0);
    assert.deepEqual(allowanceRulesOf('192.0.2.57'), [], 'its own stop removes it');
  });

  test("--egress-allow: each svcd's rules carry its instance; an entry a killed svcd left that its flags no longer name is removed by its next start, the rest by its stop", async () => {
    // This machine's iptables, as every svcd here installs them.
    const dropped = '192.0.2.59/32:5059';
    const kept = '192.0.2.60/32';
    const dir = dataDir();
    const first = await start(['--dev', '--data-dir', dir, '--egress-allow', `${dropped},${kept}`]);
    const tag = `--comment svc-egress-allow-${readFileSync(join(dir, 'instance-id'), 'utf8').trim()}-192-0-2-59_32_5059 `;
    const gone = exited(first.proc);
    first.proc.kill('SIGKILL');
    await gone;
    assert.equal(allowanceRulesOf('192.0.2.59').length, 4, 'TCP and UDP in the egress and the host chain, left by the killed svcd');
    assert.ok(allowanceRulesOf('192.0.2.59').every((line) => line.includes(tag)), allowanceRulesOf('192.0.2.59').join('\n'));
    // The operator took the first entry out and starts it again on the same data directory.
    const second = await start(['--dev', '--data-dir', dir, '--egress-allow', kept]);
    const done = exited(second.proc);
    try {
      assert.deepEqual(allowanceRulesOf('192.0.2.59'), [], 'the entry taken out is gone');
      assert.equal(allowanceRulesOf('192.0.2.60').length, 2, 'the entry still named, once in each chain');
    } finally {
      second.proc.kill('SIGTERM');
    }
    assert.equal(await done, 0);
    assert.deepEqual(allowanceRulesOf('192.0.2.60'), [], 'its stop removes the rest');
  });

  test("one svcd per data directory: a second start on a running svcd's is refused and changes nothing of it; a killed svcd's file does not stop the next start, a stop removes it", async () => {
    const dir = dataDir();
    const lockFile = join(dir, 'svcd.pid');
    const holder = () => (JSON.parse(readFileSync(lockFile, 'utf8')) as { pid: number }).pid;
    const first = await start(['--dev', '--data-dir', dir, '--egress-allow', '192.0.2.61/32:5061']);
    const firstGone = exited(first.proc);
    try {
      assert.equal(holder(), first.proc.pid);
      const second = startThatEnds(['--dev', '--data-dir', dir, '--listen', '127.0.0.1:0', '--metrics-listen', '127.0.0.1:0', '--egress-allow', '192.0.2.61/32:5061']);
      assert.equal(second.status, 2, second.stderr);
      assert.match(second.stderr, new RegExp(`svcd: another svcd \\(pid ${String(first.proc.pid)}\\) runs on the data directory .*give this one a --data-dir of its own`));
      assert.equal(allowanceRulesOf('192.0.2.61').length, 4, "the running svcd's allowances stay");
      assert.equal(holder(), first.proc.pid, "the file is still the running svcd's");
      assert.equal((await fetch(`${first.url}/v1/system/health`)).status, 200, 'the running svcd serves on');
    } finally {
      first.proc.kill('SIGKILL');
    }
    await firstGone;
    assert.equal(holder(), first.proc.pid, 'a killed svcd leaves its file');
    const next = await start(['--dev', '--data-dir', dir, '--egress-allow', '192.0.2.61/32:5061']);
    const done = exited(next.proc);
    assert.equal(holder(), next.proc.pid);
    next.proc.kill('SIGTERM');
    assert.equal(await done, 0);
    assert.ok(!existsSync(lockFile), 'a stop removes the file');
    assert.deepEqual(allowanceRulesOf('192.0.2.61'), [], 'and its allowances');
  });

  test("the launcher runs svcd with Node 20's young generation (Node 24's grows to 128 MB on this machine)", async () => {
    const { proc } = await start(['--dev', '--data-dir', dataDir()]);
    try {
      // bin/svcd execs node: the child's pid is node's.
      const argv = readFileSync(`/proc/${proc.pid}/cmdline`, 'utf8').split('\0');
      assert.ok(argv.includes('--max-semi-space-size=16'), argv.join(' '));
    } finally {
      const done = exited(proc);
      proc.kill('SIGTERM');
      await done;
    }
  });

  test("the launcher runs svcd on jemalloc (glibc's malloc kept a stream burst's freed memory), and svcd alone", async () => {
    // An operator's own preload (here a harmless one, the math library) goes on, to svcd and to
    // what svcd starts; jemalloc goes to svcd only. svcd with a proxy starts Caddy, a child to look at.
    const { proc } = await start(['--dev', '--data-dir', dataDir(), '--proxy-listen', `127.0.0.1:${await freePort()}`], { LD_PRELOAD: 'libm.so.6' });
    try {
      // make test installs libjemalloc2 (scripts/ensure-jemalloc.sh): the library is mapped into
      // node's process, and its allocator hands freed pages back on its own thread.
      const environOf = (pid: number) => readFileSync(`/proc/${pid}/environ`, 'utf8').split('\0');
      assert.match(readFileSync(`/proc/${proc.pid}/maps`, 'utf8'), /\/libjemalloc\.so\.2\n/, 'libjemalloc.so.2 mapped into svcd');
      const environ = environOf(proc.pid!);
      assert.ok(environ.includes('MALLOC_CONF=background_thread:true'), environ.filter((e) => e.startsWith('MALLOC_CONF')).join(' ') || 'no MALLOC_CONF');
      assert.ok(environ.includes('LD_PRELOAD=libjemalloc.so.2 libm.so.6'), environ.filter((e) => e.startsWith('LD_PRELOAD')).join(' ') || 'no LD_PRELOAD');

      // A process may be gone between the listing and the read.
      const statusOf = (pid: string) => {
        try {
          return readFileSync(`/proc/${pid}/status`, 'utf8');
        } catch {
          return '';
        }
      };
      const caddy = await waitFor('svcd to start Caddy', async () => {
        for (const entry of readdirSync('/proc').filter((e) => /^\d+$/.test(e))) {
          const status = statusOf(entry);
          if (new RegExp(`^PPid:\\s+${proc.pid}$`, 'm').test(status) && /^Name:\s+caddy$/m.test(status)) return Number(entry);
        }
        return undefined;
      }, 20_000);
      assert.ok(environOf(caddy).includes('LD_PRELOAD=libm.so.6'), `Caddy's LD_PRELOAD: ${environOf(caddy).filter((e) => e.startsWith('LD_PRELOAD')).join(' ') || 'none'}`);
      assert.ok(!environOf(caddy).some((e) => e.startsWith('SVCD_PRELOADED=')));
      assert.doesNotMatch(readFileSync(`/proc/${caddy}/maps`, 'utf8'), /libjemalloc/, 'Caddy runs on its own allocator');
    } finally {
      const done = exited(proc);
      proc.kill('SIGTERM');
      await done;
    }
  });

  test('production start: the HTTPS rule holds, registration needs the token, SIGTERM exits cleanly', async () => {
    const { proc, url } = await start(['--data-dir', dataDir()], { SVC_BOOTSTRAP_TOKEN: TOKEN });
    const c = new SvcClient({ baseUrl: url });
    assert.equal((await c.raw('GET', '/v1/system/health')).status, 200);
    assert.equal((await c.raw('GET', '/v1/tenant')).status, 403);
    const https = { 'x-forwarded-proto': 'https' };
    const noToken = await c.raw('POST', '/v1/tenants/register', { body: { name: 'prod', email: 'p@x.io' }, headers: https });
    assert.equal(noToken.status, 401);
    const ok = await c.raw('POST', '/v1/tenants/register', {
      body: { name: 'prod', email: 'p@x.io' },
      headers: { ...https, 'x-bootstrap-token': TOKEN },
    });
    assert.equal(ok.status, 201);
    const done = exited(proc);
    proc.kill('SIGTERM');
    assert.equal(await done, 0);
  });

  test("once svcd says it listens, a SIGTERM stops it cleanly, which removes its own scratch folder", async () => {
    // Five starts, each stopped the moment the line comes: with the handler set after the line,
    // one stop in four ended svcd where it stood (no exit code, the folder left).
    for (let i = 0; i < 5; i++) {
      const scratch = dataDir();
      const { proc } = await start(['--dev', '--data-dir', dataDir(), '--scratch-dir', scratch]);
      const done = exited(proc);
      try {
        assert.equal(readdirSync(scratch).length, 1, 'its folder, while it runs');
      } finally {
        proc.kill('SIGTERM');
      }
      // Node's own handler for a SIGTERM nobody asked for ends the process by the signal: no code.
      assert.equal(await done, 0, 'a clean stop');
      assert.deepEqual(readdirSync(scratch), [], 'its scratch folder is gone');
    }
  });

  test('SIGKILL loses nothing that was acknowledged (SQLite)', async () => {
    const dir = dataDir();
    const first = await start(['--dev', '--open-registration', '--data-dir', dir]);
    const c = new SvcClient({ baseUrl: first.url });
    const reg = await c.register({ name: 'survivor', email: 's@x.io' });
    const key = await c.withKey(reg.api_key).createKey({ name: 'after-kill' });
    const gone = exited(first.proc);
    first.proc.kill('SIGKILL');
    await gone;
    const second = await start(['--dev', '--open-registration', '--data-dir', dir]);
    try {
      const again = new SvcClient({ baseUrl: second.url, apiKey: key.api_key });
      assert.equal((await again.tenant()).name, 'survivor');
      assert.ok((await again.listKeys()).some((k) => k.name === 'after-kill'));
    } finally {
      second.proc.kill('SIGTERM');
      await exited(second.proc);
    }
  });
});

describe('bin/svcd killed in the middle of deploys', () => {
  test('after a SIGKILL and a restart, every service runs, interrupted deploys say so, nothing is orphaned', async () => {
    await ensureTestImages();
    const dir = dataDir();
    const first = await start(['--dev', '--open-registration', '--data-dir', dir]);
    const c = new SvcClient({ baseUrl: first.url });
    const reg = await c.register({ name: 'killed', email: 'k@x.io' });
    const a = c.withKey(reg.api_key);
    try {
      const created: Service[] = [];
      for (const name of ['one', 'two', 'three']) created.push(await a.createService({ name, image: BUSYBOX_IMAGE }));
      const gone = exited(first.proc);
      first.proc.kill('SIGKILL');
      await gone;

      const second = await start(['--dev', '--open-registration', '--data-dir', dir]);
      let interrupted = 0;
      try {
        const b = new SvcClient({ baseUrl: second.url, apiKey: reg.api_key });
        for (const s of created) {
          const until = Date.now() + 60_000;
          let now = await b.service(s.id);
          while (now.status !== 'running' && Date.now() < until) {
            await new Promise((r) => setTimeout(r, 200));
            now = await b.service(s.id);
          }
          assert.equal(now.status, 'running', `${s.name}: ${now.last_error ?? ''}`);
          const containers = await docker.listContainers({ all: true, filters: { label: [`svc.resource=${s.id}`] } });
          assert.equal(containers.length, 1, `${s.name}: exactly one container`);
          const deps = await b.deployments(s.id);
          assert.equal(deps[0]?.status, 'succeeded');
          for (const d of deps.slice(1)) {
            assert.equal(d.status, 'failed', 'an earlier deployment was interrupted');
            assert.match(d.last_error ?? '', /interrupted: svcd stopped during this deployment/);
            interrupted += 1;
          }
          assert.ok(deps.every((d) => d.status !== 'pending' && d.status !== 'running'), 'nothing left unfinished');
        }
        // A deploy takes longer than the kill comes after the last create: at least that one was cut.
        assert.ok(interrupted >= 1, 'the kill interrupted at least one deploy');
      } finally {
        second.proc.kill('SIGTERM');
        await exited(second.proc);
      }
    } finally {
      await removeTenantWorkloads([reg.tenant_id]);
    }
  });
});
