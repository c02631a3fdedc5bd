// svc-init's side in svcd (runtime/tenant-init.ts): the command the engine would have run,
// wrapped; the images left as they are; the binary installed where the engine can mount it.
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { isAbsolute, join, relative } from 'node:path';
import { describe, test } from 'node:test';
import { TENANT_INIT_PATH, installTenantInit, forwardedStopSignal, resolveCommand, runsOnlyAsPid1, tenantCommand, underTenantInit, withoutPrivilegeGain } from '../src/runtime/tenant-init.js';

describe('the command a tenant workload runs', () => {
  const image = { entrypoint: ['/docker-entrypoint.sh'], cmd: ['nginx', '-g', 'daemon off;'] };

  test("the image's own, as the engine merges it with the container's overrides", () => {
    assert.deepEqual(resolveCommand(image, undefined, undefined), ['/docker-entrypoint.sh', 'nginx', '-g', 'daemon off;']);
    // A CMD given replaces the image's, after its ENTRYPOINT.
    assert.deepEqual(resolveCommand(image, undefined, ['sh']), ['/docker-entrypoint.sh', 'sh']);
    // An ENTRYPOINT given drops the image's CMD.
    assert.deepEqual(resolveCommand(image, ['sleep'], undefined), ['sleep']);
    assert.deepEqual(resolveCommand(image, ['sleep'], ['infinity']), ['sleep', 'infinity']);
    // An empty ENTRYPOINT is none, with the image's CMD unless one is given.
    assert.deepEqual(resolveCommand(image, [], undefined), ['nginx', '-g', 'daemon off;']);
    assert.deepEqual(resolveCommand(image, [], ['true']), ['true']);
    // An image with a CMD alone, and one with neither.
    assert.deepEqual(resolveCommand({ entrypoint: null, cmd: ['/start.sh'] }, undefined, undefined), ['/start.sh']);
    assert.deepEqual(resolveCommand({ entrypoint: null, cmd: null }, undefined, undefined), []);
  });

  test('wrapped: svc-init first, the rate as its flags, the command after --', () => {
    const wrapped = underTenantInit(['-weird', 'arg'], { linesPerSecond: 500, bytesPerSecond: 524_288 });
    assert.deepEqual(wrapped.entrypoint, [TENANT_INIT_PATH, '--lines-per-second=500', '--bytes-per-second=524288', '--']);
    assert.deepEqual(wrapped.cmd, ['-weird', 'arg']);
  });

  test("an image's STOPSIGNAL other than SIGTERM is named to svc-init, which asks for it before the command starts (and forwards a real-time one only so)", () => {
    const rate = { linesPerSecond: 500, bytesPerSecond: 1024 };
    const flags = (stopSignal: string | null) => tenantCommand({ entrypoint: null, cmd: ['/start.sh'], stopSignal }, {}, rate).entrypoint;
    assert.deepEqual(flags('SIGRTMIN+3'), [TENANT_INIT_PATH, '--lines-per-second=500', '--bytes-per-second=1024', '--forward-signal=37', '--']);
    // haproxy's: one svc-init asks Go for only once the command runs, unless named.
    assert.deepEqual(flags('SIGUSR1'), [TENANT_INIT_PATH, '--lines-per-second=500', '--bytes-per-second=1024', '--forward-signal=10', '--']);
    assert.deepEqual(flags('SIGQUIT'), [TENANT_INIT_PATH, '--lines-per-second=500', '--bytes-per-second=1024', '--forward-signal=3', '--']);
    // The engine's default stop, and none: no flag.
    for (const stopSignal of ['SIGTERM', null]) assert.deepEqual(flags(stopSignal), [TENANT_INIT_PATH, '--lines-per-second=500', '--bytes-per-second=1024', '--']);
    // As the engine reads STOPSIGNAL (moby's names): with or without SIG, any case, or a number.
    for (const [name, n] of [['SIGRTMIN+1', 35], ['rtmin+15', 49], ['SIGRTMAX-14', 50], ['RTMAX-1', 63], ['SIGRTMAX', 64], ['40', 40], [' 64 ', 64], ['usr1', 10], ['SIGPWR', 30], ['IOT', 6], ['poll', 29], ['28', 28], ['SIGHUP', 1]] as const) assert.equal(forwardedStopSignal(name), n, name);
    // SIGTERM and none; signals svc-init does not forward (KILL and STOP the engine's own, CHLD,
    // PIPE, URG, PROF); names the engine does not know; and 32 to 34 (SIGRTMIN: Go delivers none of them).
    for (const name of ['SIGTERM', '15', '', null, undefined, 'SIGKILL', '9', 'STOP', '19', 'SIGCHLD', 'CLD', '17', 'PIPE', '13', 'URG', '23', 'PROF', '27', '0', '32', '33', '34', 'SIGRTMIN', 'RTMIN+16', 'RTMAX-15', 'RTMIN-1', 'RTMAX+1', '65', 'SIGBOGUS', '4e1']) assert.equal(forwardedStopSignal(name), null, String(name));
  });

  test('inits that must be PID 1 become PID 1 through svc-init --exec, which only sets no-new-privileges first', () => {
    assert.equal(runsOnlyAsPid1(['/init']), true);
    assert.equal(runsOnlyAsPid1(['/sbin/init', '--log-target=console']), true);
    assert.equal(runsOnlyAsPid1(['/docker-entrypoint.sh', '/init']), false);
    assert.equal(runsOnlyAsPid1(['nginx']), false);
    assert.equal(runsOnlyAsPid1([]), false);
    const rate = { linesPerSecond: 500, bytesPerSecond: 1024 };
    assert.deepEqual(tenantCommand({ entrypoint: ['/init'], cmd: null }, {}, rate), { entrypoint: [TENANT_INIT_PATH, '--exec', '--'], cmd: ['/init'] });
    assert.deepEqual(tenantCommand({ entrypoint: null, cmd: ['nginx'] }, {}, rate, '/.svc/abc'), { entrypoint: ['/.svc/abc', '--lines-per-second=500', '--bytes-per-second=1024', '--'], cmd: ['nginx'] });
    assert.throws(() => tenantCommand({ entrypoint: null, cmd: null }, {}, rate), /no command specified/);
  });

  test("svc's own workloads on a swarm (databases, boards) start through --exec alone: their command as it is, after the flag", () => {
    assert.deepEqual(withoutPrivilegeGain(['docker-entrypoint.sh', 'redis-server'], '/.svc/abc'), { entrypoint: ['/.svc/abc', '--exec', '--'], cmd: ['docker-entrypoint.sh', 'redis-server'] });
    assert.throws(() => withoutPrivilegeGain([]), /no command specified/);
  });
});

describe('installing svc-init for the engine to mount', () => {
  test('copied under its hash, absolute whatever the data dir, executable by everyone; a changed copy is replaced', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'svc-init-install-'));
    try {
      const source = join(dir, 'built');
      writeFileSync(source, '#!/bin/sh\necho svc-init\n');
      // A relative data dir (make run's .svc-data): the engine refuses a relative bind source.
      const target = await installTenantInit(source, relative(process.cwd(), join(dir, 'data')));
      assert.ok(isAbsolute(target), target);
      assert.equal(readFileSync(target, 'utf8'), '#!/bin/sh\necho svc-init\n');
      assert.equal(statSync(target).mode & 0o777, 0o555);
      // The same content again: the same file.
      assert.equal(await installTenantInit(source, join(dir, 'data')), target);
      // A file under that name with other content is not trusted: it is written again.
      rmSync(target);
      writeFileSync(target, 'tampered', { mode: 0o755 });
      assert.equal(await installTenantInit(source, join(dir, 'data')), target);
      assert.equal(readFileSync(target, 'utf8'), '#!/bin/sh\necho svc-init\n');
      await assert.rejects(installTenantInit(join(dir, 'missing'), join(dir, 'data')), /svc-init is missing at/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
