// Source URLs end to end: what the check accepts is what git connects to (issue 17, item 1).
//
// Every URL here is taken down the whole path a build takes (check, then cloneAt with whatever
// the check returned), against listeners this file owns on loopback. Nothing may connect
// anywhere else: resolvers are injected (the system's is never asked), the "public" answers they
// give are never cloned (see cloneIfLoopback), and names end in .invalid, which no resolver knows.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { ScratchSpace } from '../src/scratch/scratch-space.js';
import { SourceUploads } from '../src/builds/source-uploads.js';
import { BaseImagePrefetch } from '../src/builds/base-image-prefetch.js';
import { RecentPulls } from '../src/builds/recent-pulls.js';
import { HeldWaits } from '../src/sessions/held-waits.js';
import { SessionLimits } from '../src/sessions/session-limits.js';
import { DiskQuota } from '../src/disk/disk-quota.js';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer as createHttpServer, type Server as HttpServer } from 'node:http';
import { createServer, type AddressInfo, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import pino from 'pino';
import { Activity } from '../src/activity/activity.js';
import { Builds } from '../src/builds/builds.js';
import { cloneAt, gitSettings } from '../src/sources/git.js';
import { BuildRunner } from '../src/builds/runner.js';
import { checkSourceUrl, type CheckedSource, type ResolveHost, type SourceRules } from '../src/sources/sources.js';
import { systemClock, systemTimers } from '../src/clock.js';
import { ValidationError } from '../src/errors.js';
import type { Runtime } from '../src/runtime/index.js';
import type { Services } from '../src/services/services.js';
import { openStore, type Store } from '../src/store/index.js';
import { commit, gitHttpBackend, repo, startGitServer, startHttpsGitServer, type GitServer, type HttpsGitServer } from './git-fixtures.js';
import { storeLocation, tenantRow } from './harness.js';

/** A TCP listener that only counts who connects (and hangs up on them). */
interface Trap {
  port: number;
  connections: number;
  close(): Promise<void>;
}

async function listen(server: Server | HttpServer, host: string, port = 0): Promise<number> {
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => resolve());
  });
  return (server.address() as AddressInfo).port;
}

async function startTrap(host: string): Promise<Trap> {
  const sockets = new Set<Socket>();
  const trap: Trap = { port: 0, connections: 0, close: async () => {} };
  const server = createServer((socket) => {
    trap.connections++;
    sockets.add(socket);
    socket.destroy();
  });
  trap.port = await listen(server, host);
  trap.close = () => new Promise((r) => server.close(() => r()));
  return trap;
}

/** `repo` (one commit) served over plain HTTP by git http-backend, on 127.0.0.1 and ::1. */
async function startPlainHttpGitServer(): Promise<{ port4: number; port6: number | null; sha: string; stop(): Promise<void> }> {
  const base = mkdtempSync(join(tmpdir(), 'svc-http-git-'));
  const sha = commit(base, 'repo', repo(base, 'repo'), { README: 'served over http\n' }, 'one');

  const handler = gitHttpBackend(base);
  const v4 = createHttpServer(handler);
  const v6 = createHttpServer(handler);
  const port4 = await listen(v4, '127.0.0.1');
  const port6 = await listen(v6, '::1').catch(() => null); // a host without IPv6 loopback skips those cases
  return {
    port4,
    port6,
    sha,
    stop: async () => {
      await new Promise((r) => v4.close(r));
      if (port6 !== null) await new Promise((r) => v6.close(r));
      rmSync(base, { recursive: true, force: true });
    },
  };
}

const strict: SourceRules = { allowLoopback: false };
const dev: SourceRules = { allowLoopback: true };
/** Every name is public to this resolver: the check must refuse numeric spellings by itself, not trust DNS. */
const everyNameIsPublic: ResolveHost = async () => ['140.82.121.3'];

/** Loopback as this test sees it, independently of the code under test. */
function isLoopbackLiteral(address: string): boolean {
  const a = address.replace(/^\[|\]$/g, '').toLowerCase();
  return /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(a) || a === '::1' || /^::ffff:(?:127\.\d{1,3}\.\d{1,3}\.\d{1,3}|7f[0-9a-f]{2}:[0-9a-f]{1,4})$/.test(a);
}

/**
 * True only if git, given this checked source, can connect to loopback and nowhere else: the
 * pinned URL names a loopback address, or names a host that curl is told to reach on loopback.
 */
function pinsOnlyLoopback(source: CheckedSource): boolean {
  const hostname = new URL(source.pinned.url).hostname;
  if (isLoopbackLiteral(hostname)) return true;
  const resolveEntries = source.pinned.gitConfig.filter((s) => s.startsWith('http.curloptResolve='));
  if (!['http', 'https'].includes(source.scheme) || resolveEntries.length !== 1) return false;
  const entry = /^http\.curloptResolve=([^:]+):\d+:(.+)$/.exec(resolveEntries[0] ?? '');
  return entry?.[1] === hostname && (entry[2] ?? '').split(',').every(isLoopbackLiteral);
}

type Outcome = { kind: 'refused'; error: Error } | { kind: 'cloned'; sha: string } | { kind: 'clone failed'; error: Error } | { kind: 'accepted, not cloned'; source: CheckedSource };

/**
 * What a build does with the URL: check it, then clone what the check returned. A source that
 * would take git anywhere but loopback is not cloned (the test fails on the acceptance instead).
 */
async function buildPath(raw: string, rules: SourceRules, resolve: ResolveHost, caBundle: string | null = null): Promise<Outcome> {
  let source: CheckedSource;
  try {
    source = await checkSourceUrl(raw, rules, resolve);
  } catch (error) {
    return { kind: 'refused', error: error as Error };
  }
  if (!pinsOnlyLoopback(source)) return { kind: 'accepted, not cloned', source };
  const dir = mkdtempSync(join(tmpdir(), 'svc-source-clone-'));
  try {
    const sha = await cloneAt({ source, ref: null, dir, maxBytes: 50 * 1024 * 1024, signal: AbortSignal.timeout(20_000), timers: systemTimers, caBundle, onOutput: () => {} });
    return { kind: 'cloned', sha };
  } catch (error) {
    return { kind: 'clone failed', error: error as Error };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

function describeOutcome(o: Outcome): string {
  if (o.kind === 'refused' || o.kind === 'clone failed') return `${o.kind}: ${o.error.message}`;
  if (o.kind === 'cloned') return `cloned ${o.sha}`;
  return `accepted as ${o.source.pinned.url} ${o.source.pinned.gitConfig.join(' ')}`;
}

/** Spellings whose real host is the listener on `port` (127.0.0.1) or `port6` ([::1]). */
function differentialCorpus(port: number, port6: number): string[] {
  const P = port;
  return [
    // "\" is "/" to WHATWG URL in https URLs (host 1.1.1.1) and part of the userinfo to curl (host 127.0.0.1).
    `https://1.1.1.1\\@127.0.0.1:${P}/x.git`,
    `https://1.1.1.1:443\\@127.0.0.1:${P}/x.git`,
    `HTTPS://1.1.1.1\\@127.0.0.1:${P}/x.git`,
    `http://1.1.1.1\\@127.0.0.1:${P}/x.git`,
    `git://1.1.1.1\\@127.0.0.1:${P}/x`,
    `https://127.0.0.1:${P}\\@1.1.1.1/x.git`,
    // Where the authority ends: userinfo, fragment, query, an escaped backslash.
    `https://1.1.1.1@127.0.0.1:${P}/x.git`,
    `https://127.0.0.1:${P}#@1.1.1.1/`,
    `https://127.0.0.1:${P}?@1.1.1.1/`,
    `https://1.1.1.1%5C@127.0.0.1:${P}/x.git`,
    `git://1.1.1.1%40127.0.0.1:${P}/x`,
    // Whitespace and control characters (WHATWG URL drops tabs and newlines; curl does not).
    `https://127.0.0.1\t:${P}/x.git`,
    `https://127.0.0.\n1:${P}/x.git`,
    `https://1.1.1.1\t@127.0.0.1:${P}/x`,
    `https://1.1.1.1 @127.0.0.1:${P}/x`,
    `git://127.0.0.1\r:${P}/x`,
    `git://127.0.0.1\x00.example:${P}/x`,
    `git://127.0.0.1\u00a0:${P}/x`,
    // Numbers inet_aton reads as 127.0.0.1 or 0.0.0.0; WHATWG URL normalises them for http(s) only.
    `git://2130706433:${P}/x`,
    `git://0x7f.1:${P}/x`,
    `git://0x7f000001:${P}/x`,
    `git://0177.0.0.1:${P}/x`,
    `git://0x7f.0x0.0x0.0x1:${P}/x`,
    `git://127.1:${P}/x`,
    `git://127.0.1:${P}/x`,
    `git://0:${P}/x`,
    `git://127.0.0.1.:${P}/x`,
    `http://127.1:${P}/x`,
    `https://2130706433:${P}/x`,
    `https://0x7f.1:${P}/x`,
    `https://0177.0.0.1:${P}/x`,
    `https://127.0.0.1.:${P}/x`,
    // IPv6 spellings of loopback: mapped (both forms), compatible, translated, 6to4, unspecified.
    `https://[::ffff:127.0.0.1]:${P}/x`,
    `https://[::ffff:7f00:1]:${P}/x`,
    `https://[0:0:0:0:0:ffff:7f00:0001]:${P}/x`,
    `git://[::ffff:127.0.0.1]:${P}/x`,
    `git://[::ffff:7f00:1]:${P}/x`,
    `https://[::127.0.0.1]:${P}/x`,
    `https://[::7f00:1]:${P}/x`,
    `https://[64:ff9b::7f00:1]:${P}/x`,
    `https://[2002:7f00:1::]:${P}/x`,
    `https://[::]:${P}/x`,
    `https://[::1]:${port6}/x`,
    `https://[0:0:0:0:0:0:0:1]:${port6}/x`,
    `git://[::1]:${port6}/x`,
    `https://[fe80::1%25lo]:${P}/x`,
    // Percent-encoded and non-ASCII hosts (IDNA maps fullwidth digits and "。" to ASCII in https only).
    `https://%31%32%37.0.0.1:${P}/x`,
    `git://%31%32%37.0.0.1:${P}/x`,
    `git://127%2e0%2e0%2e1:${P}/x`,
    `https://\uff11\uff12\uff17.\uff10.\uff10.\uff11:${P}/x`,
    `git://\uff11\uff12\uff17.\uff10.\uff10.\uff11:${P}/x`,
    `git://127\u30020\u30020\u30021:${P}/x`,
    // Upper-case schemes, the zero address, and plain loopback.
    `HTTPS://127.0.0.1:${P}/x`,
    `GIT://127.0.0.1:${P}/x`,
    `Http://127.0.0.1:${P}/x`,
    `https://0.0.0.0:${P}/x`,
    `git://0.0.0.0:${P}/x`,
    `git://127.0.0.1:${P}/x`,
    `https://127.0.0.1:${P}/x`,
    `http://127.0.0.1:${P}/x`,
  ];
}

describe('source URLs: the checked address is the connected address', () => {
  let trap4: Trap;
  let trap6: Trap | null;
  let daemon: GitServer;
  let https: HttpsGitServer;
  let plain: Awaited<ReturnType<typeof startPlainHttpGitServer>>;

  before(async () => {
    trap4 = await startTrap('127.0.0.1');
    trap6 = await startTrap('::1').catch(() => null);
    daemon = await startGitServer();
    https = await startHttpsGitServer();
    plain = await startPlainHttpGitServer();
  });
  after(async () => {
    await trap4.close();
    await trap6?.close();
    await daemon.stop();
    await https.stop();
    await plain.stop();
  });

  test('parser-differential spellings of a loopback listener are refused (400, naming the field) and nothing connects', async () => {
    const corpus = differentialCorpus(trap4.port, trap6?.port ?? trap4.port);
    const wrong: string[] = [];
    for (const [rules, field] of [[strict, 'source_url'], [{ ...strict, field: 'git_url', httpsOnly: true }, 'git_url']] as const) {
      for (const url of corpus) {
        const outcome = await buildPath(url, rules, everyNameIsPublic);
        const ok = outcome.kind === 'refused' && outcome.error instanceof ValidationError && outcome.error.status === 400 && outcome.error.message.startsWith(`${field} `);
        if (!ok) wrong.push(`${JSON.stringify(url)} (${field}): ${describeOutcome(outcome)}`);
      }
    }
    assert.deepEqual(wrong, [], 'every spelling is refused');
    assert.equal(trap4.connections, 0, 'nothing connected to 127.0.0.1');
    assert.equal(trap6?.connections ?? 0, 0, 'nothing connected to ::1');
  });

  test('the same tool sees connections: with loopback allowed, the listener is reached and real servers clone', async () => {
    const before4 = trap4.connections;
    const toTrap = await buildPath(`git://127.0.0.1:${trap4.port}/x`, dev, everyNameIsPublic);
    assert.equal(toTrap.kind, 'clone failed', describeOutcome(toTrap));
    assert.ok(trap4.connections > before4, 'the listener saw the clone');
    if (trap6) {
      const before6 = trap6.connections;
      const toTrap6 = await buildPath(`http://[::1]:${trap6.port}/x`, dev, everyNameIsPublic);
      assert.equal(toTrap6.kind, 'clone failed', describeOutcome(toTrap6));
      assert.ok(trap6.connections > before6, 'the IPv6 listener saw the clone');
    }

    const viaDaemon = await buildPath(daemon.url('app'), dev, everyNameIsPublic);
    assert.deepEqual(viaDaemon, { kind: 'cloned', sha: daemon.shas.v2 });
    const viaHttps = await buildPath(https.url('project'), dev, everyNameIsPublic, https.caFile);
    assert.deepEqual(viaHttps, { kind: 'cloned', sha: https.shas.v2 });
    const viaHttp = await buildPath(`http://127.0.0.1:${plain.port4}/repo`, dev, everyNameIsPublic);
    assert.deepEqual(viaHttp, { kind: 'cloned', sha: plain.sha });
    // Spellings stay refused when loopback is allowed: the refusal is about the spelling.
    for (const url of [`git://0x7f.1:${new URL(daemon.url('app')).port}/app`, `git://2130706433:${trap4.port}/x`]) {
      const outcome = await buildPath(url, dev, everyNameIsPublic);
      assert.equal(outcome.kind, 'refused', `${url}: ${describeOutcome(outcome)}`);
    }
  });

  test('a clone is a repository of its own: the commit checked out is the one reported, and it keeps the remote it came from', async () => {
    const source = await checkSourceUrl(daemon.url('app'), dev, everyNameIsPublic);
    const dir = mkdtempSync(join(tmpdir(), 'svc-source-clone-'));
    try {
      const sha = await cloneAt({ source, ref: null, dir, maxBytes: 50 * 1024 * 1024, signal: AbortSignal.timeout(20_000), timers: systemTimers, onOutput: () => {} });
      const git = (...args: string[]) => execFileSync('git', ['-C', dir, ...args], { encoding: 'utf8' }).trim();
      assert.equal(sha, daemon.shas.v2);
      assert.equal(git('rev-parse', 'HEAD'), sha);
      // An environment's synced checkout is what the tenant fetches from and pushes to.
      assert.equal(git('remote', 'get-url', 'origin'), source.pinned.url);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test('a full ref name and HEAD are fetched (git clone takes neither); an environment\'s checkout fetches every branch afterwards, a build\'s only its own', async () => {
    const source = await checkSourceUrl(daemon.url('app'), dev, everyNameIsPublic);
    const clone = async (ref: string | null, trackAllBranches: boolean) => {
      const dir = mkdtempSync(join(tmpdir(), 'svc-source-clone-'));
      const sha = await cloneAt({ source, ref, dir, maxBytes: 50 * 1024 * 1024, signal: AbortSignal.timeout(20_000), timers: systemTimers, trackAllBranches, onOutput: () => {} });
      const refspecs = execFileSync('git', ['-C', dir, 'config', '--get-all', 'remote.origin.fetch'], { encoding: 'utf8' }).trim();
      rmSync(dir, { recursive: true, force: true });
      return { sha, refspecs };
    };
    assert.equal((await clone('refs/tags/v1', false)).sha, daemon.shas.v1);
    assert.equal((await clone('HEAD', false)).sha, daemon.shas.v2);
    assert.equal((await clone('v1', false)).sha, daemon.shas.v1, 'a tag name is cloned');
    assert.deepEqual(await clone(null, true), { sha: daemon.shas.v2, refspecs: '+refs/heads/*:refs/remotes/origin/*' });
    assert.deepEqual(await clone('main', false), { sha: daemon.shas.v2, refspecs: '+refs/heads/main:refs/remotes/origin/main' });
  });

  test('a name is resolved once and pinned: git clones from the checked address, not from its own lookup', async () => {
    // No system resolver knows .invalid names: a clone that succeeds went through the pin.
    const pinnedTo = (address: string): ResolveHost => async (host) => (host === 'rebind.invalid' ? [address] : []);
    const daemonPort = Number(new URL(daemon.url('app')).port);

    const viaGit = await checkSourceUrl(`git://rebind.invalid:${daemonPort}/app`, dev, pinnedTo('127.0.0.1'));
    assert.equal(viaGit.url, `git://rebind.invalid:${daemonPort}/app`);
    assert.equal(viaGit.pinned.url, `git://127.0.0.1:${daemonPort}/app`);
    assert.deepEqual(await buildPath(`git://rebind.invalid:${daemonPort}/app`, dev, pinnedTo('127.0.0.1')), { kind: 'cloned', sha: daemon.shas.v2 });

    assert.deepEqual(await buildPath(`http://rebind.invalid:${plain.port4}/repo`, dev, pinnedTo('127.0.0.1')), { kind: 'cloned', sha: plain.sha });
    if (plain.port6 !== null) {
      // curl's resolve list takes IPv6 in brackets.
      assert.deepEqual(await buildPath(`http://rebind.invalid:${plain.port6}/repo`, dev, pinnedTo('::1')), { kind: 'cloned', sha: plain.sha });
    }
    // HTTPS through the pin reaches the fixture, whose certificate is for 127.0.0.1 only: TLS
    // still verifies the name in the URL, so the pin does not weaken certificate checks.
    const viaHttps = await buildPath(`https://rebind.invalid:${new URL(https.url('x')).port}/project`, dev, pinnedTo('127.0.0.1'), https.caFile);
    assert.equal(viaHttps.kind, 'clone failed', describeOutcome(viaHttps));
    assert.match(describeOutcome(viaHttps), /certificate|subject name|SSL/i);
    assert.doesNotMatch(describeOutcome(viaHttps), /resolve host/i);
  });

  test('the pin as git sees it: curl resolve list for http(s) names, the address in git:// URLs, no proxy', async () => {
    // Public answers are checked here but never connected to: only the arguments are compared.
    const resolve: ResolveHost = async (host) => ({ 'github.example': ['140.82.121.3'], 'dual.example': ['2606:4700::1', '140.82.121.3'] })[host] ?? [];
    const https443 = await checkSourceUrl('https://GitHub.example/acme/app.git', strict, resolve);
    assert.equal(https443.url, 'https://github.example/acme/app.git');
    assert.equal(https443.pinned.url, 'https://github.example/acme/app.git', 'the name stays in the URL, for TLS');
    const args = gitSettings(https443, null);
    assert.ok(args.join(' ').includes('-c http.curloptResolve=github.example:443:140.82.121.3'), args.join(' '));
    for (const setting of ['http.followRedirects=false', 'http.proxy=', 'core.gitProxy=none', 'protocol.allow=never']) {
      assert.ok(args.includes(setting), `${setting} in ${args.join(' ')}`);
    }
    const dual = await checkSourceUrl('https://dual.example:8443/x', strict, resolve);
    assert.deepEqual(dual.pinned.gitConfig, ['http.curloptResolve=dual.example:8443:[2606:4700::1],140.82.121.3']);
    assert.deepEqual(dual.addresses, ['2606:4700::1', '140.82.121.3']);
    const git = await checkSourceUrl('git://dual.example/x', strict, resolve);
    assert.equal(git.pinned.url, 'git://[2606:4700::1]/x');
    assert.deepEqual(git.pinned.gitConfig, []);
    const literal = await checkSourceUrl('https://[2606:4700:0:0::1]:443/x', strict, resolve);
    assert.equal(literal.pinned.url, 'https://[2606:4700::1]:443/x');
    assert.deepEqual(literal.pinned.gitConfig, [], 'a literal needs no resolve entry');
  });

  test('a name that rebinds between the check at queue time and the clone never reaches loopback', async () => {
    let calls = 0;
    const rebinding: ResolveHost = async (host) => (host === 'rebind.invalid' ? (calls++ === 0 ? ['140.82.121.3'] : ['127.0.0.1']) : []);
    const url = `git://rebind.invalid:${trap4.port}/x`;
    const connectionsBefore = trap4.connections;
    const first = await checkSourceUrl(url, strict, rebinding);
    assert.deepEqual(first.addresses, ['140.82.121.3'], 'public at queue time (never cloned here)');
    const atClone = await buildPath(url, strict, rebinding);
    assert.equal(atClone.kind, 'refused', describeOutcome(atClone));
    assert.match(describeOutcome(atClone), /loopback is refused/);
    // A name with loopback and public answers at once is refused as a whole.
    await assert.rejects(checkSourceUrl(url, dev, async () => ['140.82.121.3', '127.0.0.1']), /both loopback and public/);
    assert.equal(trap4.connections, connectionsBefore, 'nothing connected');
  });

  describe('the build runner checks again at clone time', () => {
    let store: Store;
    let cleanup: () => Promise<void>;
    let workDir: string;

    before(async () => {
      const loc = await storeLocation('sqlite');
      cleanup = loc.cleanup;
      store = await openStore(loc);
      workDir = mkdtempSync(join(tmpdir(), 'svc-runner-'));
      await store.tenants.insert(tenantRow('t-src', 'sourcetenant'));
      await store.services.insert({
        id: 's-src', tenant_id: 't-src', name: 'web', name_key: 'web', image: 'busybox', port: 80, status: 'stopped', desired_state: 'stopped',
        dns_label: 'web-src', last_error: null, container_id: null, upstream: null, crash_count: 0, crash_window_start: null,
        last_crash_at: null, circuit_open_at: null, created_at: 1_800_000_000, updated_at: 1_800_000_000,
      });
    });
    after(async () => {
      await store.close();
      await cleanup();
      rmSync(workDir, { recursive: true, force: true });
    });

    /** Queues a build through Builds (the create-time check) and lets a runner take it (the clone-time check). */
    async function runBuild(url: string, allowLoopbackSources: boolean, resolveHost: ResolveHost) {
      const activity = new Activity(store, systemClock);
      // Only the clone is under test: the image build stops the run with a known error.
      const runtime = { buildImage: async () => { throw new Error('no engine in this test'); } } as unknown as Runtime;
      // One check for both, as app.ts wires them: at create (Builds) and before the clone (the runner).
      const checkSource = (raw: string) => checkSourceUrl(raw, { allowLoopback: allowLoopbackSources }, resolveHost);
      const scratch = new ScratchSpace(join(workDir, 'scratch'), 8 * 1024 ** 3);
      await scratch.start();
      const runner = new BuildRunner({
        store,
        runtime,
        services: {} as unknown as Services,
        prefetch: new BaseImagePrefetch({ store, runtime, clock: systemClock, timers: systemTimers, buildRegistry: null, recent: new RecentPulls(systemClock, 0) }),
        recentPulls: new RecentPulls(systemClock, 0),
        activity,
        clock: systemClock,
        timers: systemTimers,
        log: pino({ level: 'silent' }),
        holder: 'source-test/1',
        scratch,
        tickMs: 100,
        checkSource,
      });
      const sessions = new SessionLimits(store, systemClock, systemTimers, 'source-test/1');
      const disk = new DiskQuota(store);
      const uploads = new SourceUploads({ store, activity, clock: systemClock, log: pino({ level: 'silent' }), disk, prefetch: new BaseImagePrefetch({ store, runtime, clock: systemClock, timers: systemTimers, buildRegistry: null, recent: new RecentPulls(systemClock, 0) }) });
      const builds = new Builds({ store, execution: runner, uploads, activity, clock: systemClock, checkSource, buildRegistry: null, sessions, waits: new HeldWaits(systemClock), disk });
      await runner.start();
      try {
        const { build_id } = await builds.create('t-src', 's-src', { source_type: 'git', source_url: url });
        for (let i = 0; i < 300; i++) {
          const b = await store.builds.findAny(build_id);
          if (b && b.status !== 'queued' && b.status !== 'running') return b;
          await new Promise((r) => setTimeout(r, 100));
        }
        throw new Error('build did not finish');
      } finally {
        await runner.close();
      }
    }

    test('public when queued, loopback when cloned: the build fails on the second check and nothing connects', async () => {
      let calls = 0;
      const rebinding: ResolveHost = async (host) => (host === 'rebind.invalid' ? (calls++ === 0 ? ['140.82.121.3'] : ['127.0.0.1']) : []);
      const connectionsBefore = trap4.connections;
      const b = await runBuild(`git://rebind.invalid:${trap4.port}/x`, false, rebinding);
      assert.equal(calls, 2, 'checked at create and again at clone');
      assert.equal(b.status, 'failed');
      assert.match(b.last_error ?? '', /source_url must point to a public address \(loopback is refused\)/);
      assert.equal(b.source_url, `git://rebind.invalid:${trap4.port}/x`, 'stored as sent');
      assert.equal(trap4.connections, connectionsBefore, 'nothing connected');
    });

    test('the runner clones what its own check pinned (a name no system resolver knows)', async () => {
      const b = await runBuild(`git://rebind.invalid:${new URL(daemon.url('app')).port}/app`, true, async (host) => (host === 'rebind.invalid' ? ['127.0.0.1'] : []));
      assert.equal(b.commit_sha, daemon.shas.v2, 'cloned through the pin');
      assert.equal(b.status, 'failed', 'then stopped: this test has no engine');
    });
  });
});
