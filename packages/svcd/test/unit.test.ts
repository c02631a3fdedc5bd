// Pure logic: buckets, caches, key format, operator tokens, configuration, client IP.
import { execFileSync } from 'node:child_process';
import { chmodSync, copyFileSync, mkdirSync, mkdtempSync, readFileSync, renameSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import type { FastifyRequest } from 'fastify';
import { clientIp } from '../src/api/client-ip.js';
import { isReplayable } from '../src/api/idempotency.js';
import { afterCrash, restartDelayMs } from '../src/services/crashes.js';
import { imageRefusal } from '../src/services/images.js';
import { dnsLabelFor } from '../src/services/dns-labels.js';
import { KeyCache } from '../src/auth/key-cache.js';
import { generateKey, hashSecret, parseKey, tokenInList } from '../src/auth/key-format.js';
import { OperatorTokens } from '../src/auth/operator.js';
import { buildConfig, ConfigError, parseListen, SPEC_RATE_LIMITS, type RawOptions } from '../src/config.js';
import { buildCaddyConfig, joinUpstreams, splitUpstreams, type RouteTarget } from '../src/proxy/caddy-config.js';
import { PREVIEW_PORT_HEADER, PREVIEW_TOKEN_HEADER, previewToken } from '../src/environments/agent.js';
import { previewRouteTargets } from '../src/environments/previews.js';
import { RouteAnswers, STALE_AFTER_MS, answerQuery } from '../src/proxy/route-answers.js';
import { Resolver } from 'node:dns/promises';
import { createServer, request as httpRequest } from 'node:http';
import { EventEmitter, getEventListeners } from 'node:events';
import pino from 'pino';
import dnsPacket from 'dns-packet';
import { CertificateErrors } from '../src/proxy/certificate-errors.js';
import { ValidationError } from '../src/errors.js';
import { wantsCertificate } from '../src/proxy/tls-ask.js';
import { replacedTaskHoldsPort, repositoryOf } from '../src/runtime/swarm/swarm-runtime.js';
import { customHostname } from '../src/domains/hostnames.js';
import { certificateProblem, certificateStanding } from '../src/domains/domains.js';
import { freePort, waitFor } from './harness.js';
import { apiRouteTargets } from '../src/services/routing.js';
import { KeyedLimiter, RateLimits, TokenBucket } from '../src/ratelimit/index.js';
import { repositoryDirectory } from '../src/environments/environments.js';
import type { KeyWithTenantStatus } from '../src/store/index.js';
import { DockerRuntime, RuntimeUnavailableError, SandboxPolicy, connectionDropped, isEngineFault, sandboxedByDefault, workloadLimits, type EngineInfo } from '../src/runtime/index.js';
import { installPublishedPortsGate, publishedPortRules } from '../src/runtime/swarm/published-ports.js';
import { ImageCommands } from '../src/runtime/docker/docker-runtime.js';
import type Docker from 'dockerode';
import { readPortFigures } from '../src/provisioning/published-ports.js';
import { nodeRefusals } from '../src/runtime/swarm/node-firewall.js';
import { KEPT_ANSWER_LOCAL_MAX_AGE_MS, KEPT_ANSWER_MAX_AGE_MS, KeptAnswer, WATCH_RETRY_MS } from '../src/runtime/kept-answer.js';
import { ManualClock } from './manual-clock.js';
import { clientOf, ConnectionCap } from '../src/api/connection-cap.js';
import type { Socket } from 'node:net';
import { BaseImagePrefetch } from '../src/builds/base-image-prefetch.js';
import { KEPT_MAX, RecentPulls } from '../src/builds/recent-pulls.js';
import { EAGER_STATE_EVERY_MS, EAGER_STATE_MS, STATE_EVERY_MS, waitUntilReady } from '../src/runtime/ready-wait.js';
import { applyInOrder, type ApplySteps } from '../src/runtime/apply-sequence.js';
import type { ApplyRequest, WorkloadSpec, WorkloadState } from '../src/runtime/driver.js';
import { setAsideName } from '../src/runtime/port.js';
import { tenantNetworkError } from '../src/runtime/docker/docker-runtime.js';
import { ProbeAnsweredError } from '../src/runtime/index.js';
import { systemClock, systemTimers } from '../src/clock.js';

describe('token bucket', () => {
  test('starts full, refuses when empty with the wait until the next token, refills at the rate', () => {
    const b = new TokenBucket(10, 3, 0);
    assert.deepEqual([b.take(0).allowed, b.take(0).allowed, b.take(0).remaining], [true, true, 0]);
    const refused = b.take(0);
    assert.equal(refused.allowed, false);
    assert.ok(Math.abs(refused.retryAfterSeconds - 0.1) < 1e-9);
    assert.equal(b.take(100).allowed, true, 'one token after 100 ms at 10/s');
    assert.equal(b.take(10_000).remaining, 2, 'never above the burst');
  });
});

describe('keyed limiter', () => {
  test('drops the least recently used bucket past maxKeys', () => {
    const clock = new ManualClock();
    const l = new KeyedLimiter({ perSecond: 1, burst: 1, maxKeys: 2, idleMs: 1e9, sweepEveryMs: 1e9 }, clock, clock);
    l.take('a');
    l.take('b');
    l.take('a');
    l.take('c');
    assert.deepEqual([l.has('a'), l.has('b'), l.has('c')], [true, false, true]);
    l.close();
  });
});

describe('tenant rate limits', () => {
  test('at most 10,000 tenant buckets are kept: the next tenant is served and the least recently used starts again full', () => {
    // Spec 8: 10,000 tenant buckets kept. What happens past it is README's choice: the least
    // recently used bucket is dropped, so a new tenant is never refused for want of a bucket.
    const cap = 10_000;
    const burst = 200;
    const clock = new ManualClock();
    const limits = new RateLimits(SPEC_RATE_LIMITS, clock, clock);
    try {
      const buckets = limits.tenantBuckets;
      // Tenant t0 spends its whole burst first, so losing its bucket is visible: it would be full again.
      for (let i = 0; i < burst; i++) assert.equal(limits.takeTenant('t0').allowed, true);
      assert.equal(limits.takeTenant('t0').allowed, false);
      for (let i = 1; i < cap; i++) limits.takeTenant(`t${i}`);
      assert.equal(buckets.size, cap);
      assert.ok(buckets.has('t0'), 'all 10,000 are kept');

      const next = limits.takeTenant('t-next');
      assert.equal(next.allowed, true, 'the 10,001st tenant is served');
      assert.equal(buckets.size, cap, 'never more than 10,000');
      assert.deepEqual([buckets.has('t0'), buckets.has('t1'), buckets.has('t-next')], [false, true, true], 't0, the least recently used, is dropped');
      // The clock has not moved, so a full bucket can only be a new one.
      assert.deepEqual(limits.takeTenant('t0'), { allowed: true, remaining: burst - 1, retryAfterSeconds: 0 });
      assert.equal(buckets.size, cap);
      assert.ok(!buckets.has('t1'), 'now t1 was the least recently used');
    } finally {
      limits.close();
    }
  });
});

describe('key cache', () => {
  const key = (id: string, tenant: string) => ({ id, tenant_id: tenant }) as KeyWithTenantStatus;
  test('entries live 30 s, at most maxEntries, and a tenant can be dropped at once', () => {
    const clock = new ManualClock();
    const c = new KeyCache(clock, 30_000, 3);
    c.set(key('k1', 't1'));
    c.set(key('k2', 't1'));
    c.set(key('k3', 't2'));
    clock.advance(29_999);
    assert.ok(c.get('k1'));
    c.set(key('k4', 't2'));
    assert.equal(c.size, 3);
    assert.equal(c.get('k2'), undefined, 'least recently used went first');
    c.invalidateTenant('t2');
    assert.deepEqual([!!c.get('k1'), !!c.get('k3'), !!c.get('k4')], [true, false, false]);
    clock.advance(1);
    assert.equal(c.get('k1'), undefined, 'expired at 30 s');
  });
  test('the spec sizes: 30 s and 5000 entries', () => {
    const clock = new ManualClock();
    const c = new KeyCache(clock);
    for (let i = 0; i < 5001; i++) c.set(key(`k${i}`, 't'));
    assert.equal(c.size, 5000);
  });
});

describe('key format', () => {
  test('keys are <keyID>.<secret>, stored as a hash, and parsed back', () => {
    const k = generateKey();
    assert.equal(k.apiKey, `${k.id}.${k.secret}`);
    assert.equal(k.secretHash, hashSecret(k.secret));
    assert.notEqual(k.secretHash, k.secret);
    assert.deepEqual(parseKey(k.apiKey), { id: k.id, secret: k.secret });
    for (const bad of ['', 'nodot', '.secret', 'id.', `${'x'.repeat(65)}.s`]) assert.equal(parseKey(bad), null, bad);
  });
  test('token lists match any member, only exactly', () => {
    assert.equal(tokenInList('b'.repeat(32), ['a'.repeat(32), 'b'.repeat(32)]), true);
    assert.equal(tokenInList('b'.repeat(31), ['b'.repeat(32)]), false);
    assert.equal(tokenInList('x', []), false);
  });
});

describe('operator tokens', () => {
  const boot = 'b'.repeat(32);
  const admin = 'a'.repeat(32);
  test('admin configured: admin in either header ok, bootstrap 403, other 401', () => {
    const o = new OperatorTokens([boot], [admin]);
    assert.equal(o.authorize({ admin }), 'admin');
    assert.equal(o.authorize({ bootstrap: admin }), 'admin');
    assert.throws(() => o.authorize({ bootstrap: boot }), (e: { status?: number }) => e.status === 403);
    assert.throws(() => o.authorize({ admin: 'z'.repeat(32) }), (e: { status?: number }) => e.status === 401);
    assert.throws(() => o.authorize({}), (e: { status?: number }) => e.status === 401);
  });
  test('no admin token: the bootstrap token is accepted', () => {
    const o = new OperatorTokens([boot], []);
    assert.equal(o.authorize({ bootstrap: boot }), 'bootstrap');
    assert.throws(() => o.authorize({ admin: 'z'.repeat(32) }), (e: { status?: number }) => e.status === 401);
  });
});

describe('the free ports of --swarm-ports', () => {
  test("an owner whose first run takes its port while they are read is counted once at least, never not at all", async () => {
    // One port, one service about to take it: whichever read comes first sees it promised, the
    // second sees the port held (the store reads them in separate statements).
    let reads = 0;
    const store = {
      publishedPorts: {
        awaiting: async () => (reads++ === 0 ? 1 : 0),
        taken: async () => (reads++ === 0 ? [] : [23930]),
      },
    };
    assert.deepEqual(await readPortFigures(store, { from: 23930, to: 23930 }, 1_000), { free: 0, total: 1 });
  });
});

describe("the gate of a swarm's published ports", () => {
  const o = { ranges: [{ from: 30000, to: 32767 }, { from: 21000, to: 21999 }], allowFrom: ['10.0.0.1/32', '10.2.0.0/16'] };
  const node = { gatewaySubnets: ['172.18.0.0/16'], ipv6: true };
  test("IPv4: the allowances, then DROP; a jump per range for what peers send to the node itself, and the tasks' own addresses closed to all but their bridge; IPv6: no allowance", () => {
    const v4 = publishedPortRules(o, node, 'iptables');
    assert.deepEqual(v4.allowances.map(([chain, rule]) => [chain, rule.join(' ')]), [
      ['SVC-PUBLISHED', "-t mangle -s 10.0.0.1/32 -m comment --comment svc: --swarm-published-from -j RETURN"],
      ['SVC-PUBLISHED', "-t mangle -s 10.2.0.0/16 -m comment --comment svc: --swarm-published-from -j RETURN"],
    ]);
    assert.deepEqual(v4.drop, ['SVC-PUBLISHED', ['-t', 'mangle', '-j', 'DROP']]);
    assert.deepEqual(v4.jumps.map(([chain, rule]) => `${chain} ${rule.join(' ')}`), [
      'PREROUTING -t mangle ! -i lo -p tcp --dport 30000:32767 -m addrtype --dst-type LOCAL -m conntrack --ctdir ORIGINAL -j SVC-PUBLISHED',
      'PREROUTING -t mangle ! -i lo -p tcp --dport 21000:21999 -m addrtype --dst-type LOCAL -m conntrack --ctdir ORIGINAL -j SVC-PUBLISHED',
      'PREROUTING -t mangle ! -i docker_gwbridge -d 172.18.0.0/16 -m comment --comment svc: tasks only by their published ports -j DROP',
    ]);
    const v6 = publishedPortRules(o, node, 'ip6tables');
    assert.deepEqual([v6.allowances, v6.jumps.length], [[], 2]);
  });
  test('installing adds only what is missing, the chain complete before anything jumps to it, allowances ahead of the DROP', async () => {
    const calls: string[] = [];
    const iptables = (family: string, args: string[]) => {
      calls.push(`${family} ${args.join(' ')}`);
      return Promise.resolve('');
    };
    await installPublishedPortsGate(o, node, iptables, (_family, rules) => Promise.resolve(rules.map(() => false)));
    const v4 = calls.filter((c) => c.startsWith('iptables '));
    assert.deepEqual(v4.map((c) => c.split(' ').slice(1, 5).join(' ')), ['-t mangle -N SVC-PUBLISHED', '-A SVC-PUBLISHED -t mangle', '-I SVC-PUBLISHED 1 -t', '-I SVC-PUBLISHED 1 -t', '-I PREROUTING 1 -t', '-I PREROUTING 1 -t', '-I PREROUTING 1 -t']);
    assert.equal(calls.filter((c) => c.startsWith('ip6tables ') && c.includes('RETURN')).length, 0, 'IPv6 allows no source');
    assert.equal(calls.filter((c) => c.startsWith('ip6tables ') && c.includes('-I PREROUTING')).length, 2);
    calls.length = 0;
    // A node without IPv6: ip6tables is not asked at all (it fails there).
    await installPublishedPortsGate(o, { ...node, ipv6: false }, iptables, (_family, rules) => Promise.resolve(rules.map(() => false)));
    assert.ok(calls.length > 0 && calls.every((c) => c.startsWith('iptables ')), calls.join('\n'));
    calls.length = 0;
    await installPublishedPortsGate(o, node, iptables, (_family, rules) => Promise.resolve(rules.map(() => true)));
    assert.deepEqual(calls, [], 'nothing when all is in place');
    // One allowance missing (a new --swarm-published-from entry): only it, ahead of the DROP.
    await installPublishedPortsGate(o, node, iptables, (family, rules) => Promise.resolve(rules.map(([, rule]) => !(family === 'iptables' && rule.includes('10.2.0.0/16')))));
    assert.deepEqual(calls, ['iptables -I SVC-PUBLISHED 1 -t mangle -s 10.2.0.0/16 -m comment --comment svc: --swarm-published-from -j RETURN']);
  });
});

describe("swarm nodes' addresses, refused to tasks and builds", () => {
  test('one reject per IPv4 node address in both egress chains, whatever the address (public ones too)', () => {
    const rules = nodeRefusals([{ address: '203.0.113.7' }, { address: '10.0.0.2' }, { address: '203.0.113.7' }, { address: 'fd00::1' }]);
    assert.deepEqual(rules.map(([chain, rule]) => `${chain} ${rule.slice(0, 2).join(' ')} ${rule.slice(-3).join(' ')}`), [
      'SVC-GW-EGRESS -d 10.0.0.2/32 REJECT --reject-with icmp-admin-prohibited',
      'SVC-GW-EGRESS -d 203.0.113.7/32 REJECT --reject-with icmp-admin-prohibited',
      'SVC-BUILD-EGRESS -d 10.0.0.2/32 REJECT --reject-with icmp-admin-prohibited',
      'SVC-BUILD-EGRESS -d 203.0.113.7/32 REJECT --reject-with icmp-admin-prohibited',
    ]);
  });
});

describe('swarm nodes that run gVisor', () => {
  test("an engine runs containers under gVisor by default when its default runtime is runsc, by name or by its path", () => {
    assert.equal(sandboxedByDefault({ DefaultRuntime: 'runsc', Runtimes: { runc: { path: 'runc' }, runsc: { path: '/usr/bin/runsc' } } }), true);
    assert.equal(sandboxedByDefault({ DefaultRuntime: 'gvisor', Runtimes: { gvisor: { path: '/usr/local/bin/runsc' } } }), true);
    assert.equal(sandboxedByDefault({ DefaultRuntime: 'runc', Runtimes: { runc: { path: 'runc' }, runsc: { path: '/usr/bin/runsc' } } }), false, 'runsc there, not the default');
    assert.equal(sandboxedByDefault({ Runtimes: { runsc: { path: '/usr/bin/runsc' } } }), false, 'no default named: runc');
    assert.equal(sandboxedByDefault({ DefaultRuntime: 'crun', Runtimes: { crun: { path: '/usr/bin/crun' } } }), false);
  });
});

describe('configuration', () => {
  const raw: RawOptions = { listen: '127.0.0.1:8080', dataDir: '/tmp/x', sandbox: 'auto', dockerHost: 'unix:///var/run/docker.sock', logLevel: 'info' };
  const token = 't'.repeat(32);
  test('--runtime swarm: a build registry, where svcd runs (--swarm-published-from), unix:// or TLS node engines; the sandbox may be required (on nodes that run gVisor)', () => {
    const dev: RawOptions = { ...raw, dev: true, runtime: 'swarm', buildRegistry: '127.0.0.1:5000', swarmNode: 'node1=unix:///run/n1.sock, node2=unix:///run/n2.sock', swarmPublishedFrom: '10.0.0.5, 10.1.0.0/16' };
    const c = buildConfig(dev, {});
    assert.equal(c.runtime, 'swarm');
    assert.deepEqual(c.swarmPublishedFrom, ['10.0.0.5/32', '10.1.0.0/16']);
    assert.throws(() => buildConfig({ ...dev, swarmPublishedFrom: undefined }, {}), /--runtime swarm needs --swarm-published-from/);
    assert.throws(() => buildConfig({ ...dev, swarmPublishedFrom: '10.0.0.0/33' }, {}), /must be IPv4 CIDRs/);
    assert.throws(() => buildConfig({ ...dev, swarmPublishedFrom: 'fd00::1' }, {}), /must be IPv4 CIDRs/);
    assert.throws(() => buildConfig({ ...raw, dev: true, swarmPublishedFrom: '10.0.0.5' }, {}), /--swarm-published-from needs --runtime swarm/);
    assert.deepEqual(c.swarmNodes, { node1: 'unix:///run/n1.sock', node2: 'unix:///run/n2.sock' });
    assert.equal(buildConfig({ ...raw, dev: true }, {}).runtime, 'docker');
    // Outside --dev too, since tenants' isolation holds there (README, Docker Swarm).
    assert.equal(buildConfig({ ...dev, dev: false }, { SVC_BOOTSTRAP_TOKEN: token }).runtime, 'swarm');
    assert.throws(() => buildConfig({ ...dev, buildRegistry: undefined }, {}), /needs --build-registry/);
    assert.throws(() => buildConfig({ ...dev, swarmNode: 'node1=tcp://10.0.0.1:2375' }, {}), /--swarm-node must be NAME=unix:\/\/\/path or NAME=https:\/\/HOST:PORT \(TLS, never plain tcp:\/\/\)/);
    assert.throws(() => buildConfig({ ...dev, swarmNode: 'a b=unix:///x' }, {}), /--swarm-node/);
    assert.equal(buildConfig({ ...dev, sandbox: 'required' }, {}).sandbox, 'required');
    assert.throws(() => buildConfig({ ...raw, dev: true, runtime: 'kubernetes' }, {}), /--runtime must be docker or swarm/);
    assert.throws(() => buildConfig({ ...raw, dev: true, swarmNode: 'node1=unix:///x' }, {}), /--swarm-node needs --runtime swarm/);
  });

  test("--base-image-reuse: a minute by default, 0 to pull on every build, at most an hour", () => {
    assert.equal(buildConfig({ ...raw, dev: true }, {}).baseImageReuseSeconds, 60);
    assert.equal(buildConfig({ ...raw, dev: true, baseImageReuse: '0' }, {}).baseImageReuseSeconds, 0);
    assert.equal(buildConfig({ ...raw, dev: true, baseImageReuse: '3600' }, {}).baseImageReuseSeconds, 3600);
    for (const v of ['3601', '-1', '1.5', 'soon', '']) {
      assert.throws(() => buildConfig({ ...raw, dev: true, baseImageReuse: v }, {}), /--base-image-reuse must be an integer from 0 to 3600/, v);
    }
  });

  test("engines over TLS: https:// takes the CA, client certificate and key from the data dir, checked at start-up (a key only its owner reads, files only it writes, a key that is the certificate's); refused without them", () => {
    const dataDir = mkdtempSync(join(tmpdir(), 'svc-engine-tls-'));
    try {
      const dev: RawOptions = { ...raw, dataDir, dev: true, runtime: 'swarm', buildRegistry: '127.0.0.1:5000', swarmNode: 'node1=unix:///run/n1.sock,node2=https://10.0.0.2:2376', swarmPublishedFrom: '10.0.0.1' };
      const nodeDir = join(dataDir, 'engine-tls', 'nodes', 'node2');
      assert.throws(() => buildConfig(dev, {}), new RegExp(`the engine at https://10\\.0\\.0\\.2:2376 is reached over TLS: put ca\\.pem, cert\\.pem, key\\.pem in ${nodeDir}`));
      mkdirSync(nodeDir, { recursive: true, mode: 0o700 });
      // A CA and a client certificate it signed, and a key of another certificate.
      const ssl = (args: string[]) => execFileSync('openssl', args, { cwd: nodeDir, stdio: 'pipe' });
      const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];
      ssl(['req', '-x509', ...ec, '-keyout', 'ca-key.pem', '-out', 'ca.pem', '-days', '1', '-subj', '/CN=test-ca']);
      ssl(['req', ...ec, '-keyout', 'key.pem', '-out', 'client.csr', '-subj', '/CN=svcd']);
      ssl(['x509', '-req', '-in', 'client.csr', '-CA', 'ca.pem', '-CAkey', 'ca-key.pem', '-CAcreateserial', '-out', 'cert.pem', '-days', '1']);
      ssl(['req', ...ec, '-keyout', 'other-key.pem', '-out', 'other.csr', '-subj', '/CN=other']);
      chmodSync(join(nodeDir, 'ca.pem'), 0o644);
      chmodSync(join(nodeDir, 'cert.pem'), 0o644);
      chmodSync(join(nodeDir, 'key.pem'), 0o644);
      assert.throws(() => buildConfig(dev, {}), /key\.pem must be readable by its owner only \(chmod 600\)/);
      chmodSync(join(nodeDir, 'key.pem'), 0o600);
      chmodSync(join(nodeDir, 'ca.pem'), 0o666);
      assert.throws(() => buildConfig(dev, {}), /ca\.pem must be writable by its owner only/);
      chmodSync(join(nodeDir, 'ca.pem'), 0o644);
      chmodSync(nodeDir, 0o777);
      assert.throws(() => buildConfig(dev, {}), /must not be writable by group or others/);
      chmodSync(nodeDir, 0o700);
      const c = buildConfig(dev, {});
      const read = (f: string) => readFileSync(join(nodeDir, f), 'utf8');
      assert.deepEqual(c.engineTls, { 'https://10.0.0.2:2376': { ca: read('ca.pem'), cert: read('cert.pem'), key: read('key.pem') } });
      assert.deepEqual(c.swarmNodes, { node1: 'unix:///run/n1.sock', node2: 'https://10.0.0.2:2376' });
      // A key that is not the certificate's, or a link in place of a file: refused.
      renameSync(join(nodeDir, 'key.pem'), join(nodeDir, 'right-key.pem'));
      copyFileSync(join(nodeDir, 'other-key.pem'), join(nodeDir, 'key.pem'));
      chmodSync(join(nodeDir, 'key.pem'), 0o600);
      assert.throws(() => buildConfig(dev, {}), /not usable: cert\.pem is not the certificate of key\.pem|not usable: .*key values mismatch/);
      rmSync(join(nodeDir, 'key.pem'));
      symlinkSync(join(nodeDir, 'right-key.pem'), join(nodeDir, 'key.pem'));
      assert.throws(() => buildConfig(dev, {}), /key\.pem cannot be opened \(a symbolic link is refused\)/);
      // The manager (or the one engine) over TLS: its own directory.
      assert.throws(() => buildConfig({ ...raw, dataDir, dev: true, dockerHost: 'https://10.0.0.9:2376' }, {}), /engine-tls\/docker-host/);
      assert.deepEqual(buildConfig({ ...raw, dataDir, dev: true }, {}).engineTls, {}, 'nothing over TLS: nothing read');
    } finally {
      rmSync(dataDir, { recursive: true, force: true });
    }
  });

  test('--workload-lease-seconds: 30 by default, 5 to 300', () => {
    assert.equal(buildConfig({ ...raw, dev: true }, {}).workloadLeaseMs, 30_000);
    assert.equal(buildConfig({ ...raw, dev: true, workloadLeaseSeconds: '8' }, {}).workloadLeaseMs, 8_000);
    for (const bad of ['4', '301', 'x']) assert.throws(() => buildConfig({ ...raw, dev: true, workloadLeaseSeconds: bad }, {}), /--workload-lease-seconds/, bad);
  });

  test('production needs SVC_BOOTSTRAP_TOKEN; tokens are at least 32 characters; lists are comma-separated', () => {
    assert.throws(() => buildConfig(raw, {}), ConfigError);
    assert.throws(() => buildConfig(raw, { SVC_BOOTSTRAP_TOKEN: 'short' }), /at least 32/);
    assert.throws(() => buildConfig(raw, { SVC_BOOTSTRAP_TOKEN: `${token},short` }), /at least 32/);
    assert.throws(() => buildConfig(raw, { SVC_BOOTSTRAP_TOKEN: token, SVC_ADMIN_TOKEN: 'short' }), /SVC_ADMIN_TOKEN/);
    const c = buildConfig(raw, { SVC_BOOTSTRAP_TOKEN: `${token}, ${'u'.repeat(40)}` });
    assert.deepEqual(c.bootstrapTokens, [token, 'u'.repeat(40)]);
    assert.equal(c.dev, false);
  });
  test('--open-registration and --dev-rate-limit only with --dev', () => {
    assert.throws(() => buildConfig({ ...raw, openRegistration: true }, { SVC_BOOTSTRAP_TOKEN: token }), /only with --dev/);
    assert.throws(() => buildConfig({ ...raw, devRateLimit: '1:1,1:1' }, { SVC_BOOTSTRAP_TOKEN: token }), /only with --dev/);
    const dev = buildConfig({ ...raw, dev: true, openRegistration: true, devRateLimit: '100000:200000,100000:200000' }, {});
    assert.deepEqual(dev.rateLimits.global, { perSecond: 100000, burst: 200000 });
    assert.throws(() => buildConfig({ ...raw, dev: true, devRateLimit: 'lots' }, {}), ConfigError);
  });
  test('--stalled-reader-seconds: 60 by default, 1 to 3600', () => {
    assert.equal(buildConfig({ ...raw, dev: true }, {}).stalledReaderMs, 60_000);
    assert.equal(buildConfig({ ...raw, dev: true, stalledReaderSeconds: '5' }, {}).stalledReaderMs, 5_000);
    assert.throws(() => buildConfig({ ...raw, dev: true, stalledReaderSeconds: '0' }, {}), /--stalled-reader-seconds/);
    assert.throws(() => buildConfig({ ...raw, dev: true, stalledReaderSeconds: 'soon' }, {}), /--stalled-reader-seconds/);
  });
  test('--connections-per-client: 256 by default, 1 to 65535', () => {
    assert.equal(buildConfig({ ...raw, dev: true }, {}).connectionsPerClient, 256);
    assert.equal(buildConfig({ ...raw, dev: true, connectionsPerClient: '3' }, {}).connectionsPerClient, 3);
    assert.throws(() => buildConfig({ ...raw, dev: true, connectionsPerClient: '0' }, {}), /--connections-per-client/);
    assert.throws(() => buildConfig({ ...raw, dev: true, connectionsPerClient: 'many' }, {}), /--connections-per-client/);
  });
  test('listen addresses, sandbox modes and database URLs are checked', () => {
    assert.deepEqual(parseListen('[::1]:9000'), { host: '::1', port: 9000 });
    assert.throws(() => parseListen('8080'), ConfigError);
    assert.throws(() => buildConfig({ ...raw, dev: true, sandbox: 'maybe' }, {}), /sandbox/);
    assert.throws(() => buildConfig({ ...raw, dev: true, databaseUrl: 'mysql://x' }, {}), /postgres/);
    assert.throws(() => buildConfig({ ...raw, dev: true }, { SVC_MASTER_KEY: 'not-32-bytes' }), /SVC_MASTER_KEY/);
    assert.equal(buildConfig({ ...raw, dev: true }, { SVC_MASTER_KEY: 'b'.repeat(64) }).masterKey, 'b'.repeat(64));
    assert.throws(() => buildConfig({ ...raw, dev: true, caddyAdmin: 'http://127.0.0.1:2019' }, {}), /needs --proxy-listen/);
    assert.throws(() => buildConfig({ ...raw, dev: true, proxyListen: 'nope' }, {}), ConfigError);
  });
  test('loopback git sources need --dev or --allow-loopback-git; the build registry must be on loopback', () => {
    assert.equal(buildConfig(raw, { SVC_BOOTSTRAP_TOKEN: token }).allowLoopbackGit, false);
    assert.equal(buildConfig({ ...raw, allowLoopbackGit: true }, { SVC_BOOTSTRAP_TOKEN: token }).allowLoopbackGit, true);
    assert.equal(buildConfig({ ...raw, dev: true }, {}).allowLoopbackGit, true);
    assert.equal(buildConfig({ ...raw, dev: true, buildRegistry: '127.0.0.1:5000' }, {}).buildRegistry, '127.0.0.1:5000');
    assert.throws(() => buildConfig({ ...raw, dev: true, buildRegistry: 'registry.example.com:5000' }, {}), /loopback registry/);
  });
  test('database images default to the public ones; the port range is FROM-TO within 1024-65535', () => {
    const c = buildConfig({ ...raw, dev: true }, {});
    assert.deepEqual(c.databaseImages, { postgres: 'postgres:16-alpine', redis: 'redis:7-alpine' });
    assert.deepEqual(c.databasePorts, { from: 21000, to: 21999 });
    assert.deepEqual(buildConfig({ ...raw, dev: true, databasePorts: '30000-30010' }, {}).databasePorts, { from: 30000, to: 30010 });
    for (const bad of ['80-90', '30010-30000', '30000', '30000-70000']) {
      assert.throws(() => buildConfig({ ...raw, dev: true, databasePorts: bad }, {}), /--database-ports/, bad);
    }
  });
  test("a swarm task refused its service's own port within a minute of the service's making is the replaced task stopping, not an exit; nothing else is", () => {
    const made = '2026-01-01T00:00:00.000000000Z';
    const soon = '2026-01-01T00:00:20.5Z';
    const bind = 'driver failed programming external connectivity on endpoint x (abc): Bind for 0.0.0.0:30001 failed: port is already allocated';
    assert.equal(replacedTaskHoldsPort(bind, 30001, soon, made), true);
    assert.equal(replacedTaskHoldsPort('Error starting userland proxy: listen tcp4 0.0.0.0:30001: bind: address already in use', 30001, soon, made), true);
    assert.equal(replacedTaskHoldsPort(bind, 30002, soon, made), false, 'another port');
    assert.equal(replacedTaskHoldsPort(bind, null, soon, made), false, 'no port of svc');
    assert.equal(replacedTaskHoldsPort(bind, 30001, '2026-01-01T00:01:00.5Z', made), false, 'a minute on: an exit');
    assert.equal(replacedTaskHoldsPort(bind, 30001, '', made), false, 'no time');
    // An image's own words are not the engine's.
    assert.equal(replacedTaskHoldsPort('exec: "/address already in use": stat: no such file', 30001, soon, made), false);
  });
  test("a swarm's published ports: 30000-32767 by default, a range of the flag's", () => {
    assert.deepEqual(buildConfig({ ...raw, dev: true }, {}).swarmPorts, { from: 30000, to: 32767 });
    assert.deepEqual(buildConfig({ ...raw, dev: true, swarmPorts: '40000-40009' }, {}).swarmPorts, { from: 40000, to: 40009 });
    for (const bad of ['32767-30000', '30000', '30000-70000']) assert.throws(() => buildConfig({ ...raw, dev: true, swarmPorts: bad }, {}), /--swarm-ports/, bad);
    // On a swarm, databases are published on the nodes too: the two ranges must be apart there.
    const swarm: RawOptions = { ...raw, dev: true, runtime: 'swarm', buildRegistry: '127.0.0.1:5000', swarmPorts: '21500-22500', swarmPublishedFrom: '10.0.0.1' };
    assert.throws(() => buildConfig(swarm, {}), /--swarm-ports and --database-ports must not overlap/);
    assert.deepEqual(buildConfig({ ...swarm, databasePorts: '23000-23099' }, {}).swarmPorts, { from: 21500, to: 22500 });
    assert.throws(() => buildConfig({ ...swarm, swarmPorts: '8000-8100' }, {}), /--swarm-ports and --kanban-ports must not overlap/);
    // Nor may they take a node's own ports, which the nodes' gate would close.
    assert.throws(() => buildConfig({ ...swarm, swarmPorts: '2000-2999' }, {}), /--swarm-ports must not include port 2375/);
    assert.throws(() => buildConfig({ ...swarm, swarmPorts: '30000-30999', databasePorts: '7940-7950', kanbanPorts: '9200-9300' }, {}), /--database-ports must not include port 7946/);
    assert.deepEqual(buildConfig({ ...raw, dev: true, swarmPorts: '21500-22500' }, {}).swarmPorts, { from: 21500, to: 22500 }, 'one engine: the swarm range is not used');
  });
  test("task boards: the public Node base by default, ports 7100-9100 apart from the databases', one address a browser can reach", () => {
    const c = buildConfig({ ...raw, dev: true }, {});
    assert.equal(c.kanbanImage, 'node:24-bookworm-slim');
    assert.deepEqual(c.kanbanPorts, { from: 7100, to: 9100 });
    assert.equal(c.kanbanAddress, '127.0.0.1');
    assert.equal(buildConfig({ ...raw, dev: true, kanbanAddress: '192.0.2.10' }, {}).kanbanAddress, '192.0.2.10');
    assert.throws(() => buildConfig({ ...raw, dev: true, kanbanPorts: '21500-22500' }, {}), /must not overlap/);
    assert.throws(() => buildConfig({ ...raw, dev: true, kanbanPorts: '9000-100' }, {}), /--kanban-ports/);
    for (const bad of ['0.0.0.0', '::', 'board.example.com']) {
      assert.throws(() => buildConfig({ ...raw, dev: true, kanbanAddress: bad }, {}), /--kanban-address/, bad);
    }
  });
  test("the tests' free ports are outside svcd's default ranges (each one is accepted as a board's or a database's only port) and the tests' own", async () => {
    // 400 draws: a draw space of which one in twelve lay in the databases' range failed CI once.
    for (let i = 0; i < 400; i++) {
      const port = await freePort();
      assert.ok(port < 22_000 || port > 24_999, `${port}: a port the tests name themselves (harness.ts)`);
      assert.doesNotThrow(() => buildConfig({ ...raw, dev: true, kanbanPorts: `${port}-${port}` }, {}), `--kanban-ports ${port}-${port}`);
      assert.doesNotThrow(() => buildConfig({ ...raw, dev: true, databasePorts: `${port}-${port}` }, {}), `--database-ports ${port}-${port}`);
    }
  });
});

describe('configuration: HTTPS', () => {
  const raw: RawOptions = { listen: '127.0.0.1:0', dataDir: '/tmp/x', sandbox: 'auto', dockerHost: 'unix:///var/run/docker.sock', logLevel: 'info', dev: true };
  const on = { ...raw, tls: 'on', baseDomain: 'apps.example.com', proxyListen: '0.0.0.0:80', proxyHttpsListen: '0.0.0.0:443' };
  test("off by default; on needs a base domain and both proxy addresses; Let's Encrypt unless told; the question's listener on loopback only", () => {
    assert.equal(buildConfig(raw, {}).tls, null);
    assert.deepEqual(buildConfig(on, {}).tls, {
      httpsListen: '0.0.0.0:443',
      acme: { directory: 'https://acme-v02.api.letsencrypt.org/directory', email: null, caRoot: null },
      askListen: { host: '127.0.0.1', port: 0 },
      storageDir: null,
    });
    assert.equal(buildConfig({ ...on, tlsStorage: 'shared/tls' }, {}).tls?.storageDir, resolve('shared/tls'));
    assert.throws(() => buildConfig({ ...on, baseDomain: undefined }, {}), /--tls on needs --base-domain/);
    assert.throws(() => buildConfig({ ...on, proxyHttpsListen: undefined }, {}), /--proxy-https-listen/);
    assert.throws(() => buildConfig({ ...on, tls: 'yes' }, {}), /--tls must be on or off/);
    assert.throws(() => buildConfig({ ...on, acmeCa: 'http://ca.example/dir' }, {}), /--acme-ca must be an https/);
    for (const bad of ['0.0.0.0:9000', '10.0.0.1:9000']) assert.throws(() => buildConfig({ ...on, tlsAskListen: bad }, {}), /loopback/, bad);
    assert.equal(buildConfig({ ...on, acmeEmail: 'ops@example.com' }, {}).tls?.acme.email, 'ops@example.com');
    assert.throws(() => buildConfig({ ...on, caddyAdmin: 'http://127.0.0.1:2019' }, {}), /not with --caddy-admin/);
    for (const bad of ['0.0.0.0:80', '0.0.0.0:0']) assert.throws(() => buildConfig({ ...on, proxyHttpsListen: bad }, {}), /a port of its own/, bad);
    assert.throws(() => buildConfig({ ...on, acmeCaRoot: '/no/such/root.pem' }, {}), /--acme-ca-root/);
    // The DNS servers of custom domains' TXT lookups: the system's unless named; addresses only.
    assert.equal(buildConfig(raw, {}).dnsServers, null);
    assert.deepEqual(buildConfig({ ...raw, dnsServer: '127.0.0.1:5353, [::1]:53' }, {}).dnsServers, ['127.0.0.1:5353', '[::1]:53']);
    for (const bad of ['dns.example.com', '127.0.0.1:x']) assert.throws(() => buildConfig({ ...raw, dnsServer: bad }, {}), /--dns-server/, bad);
    // The base domain as host names are compared: lower case, no trailing dot, xn-- form.
    assert.equal(buildConfig({ ...raw, baseDomain: 'Apps.Bücher.Example.' }, {}).baseDomain, 'apps.xn--bcher-kva.example');
    for (const bad of ['apps example.com', 'apps.example.com/x', 'apps..example.com', '10.0.0.1', '-apps.example.com']) assert.throws(() => buildConfig({ ...raw, baseDomain: bad }, {}), /--base-domain must be a DNS name/, bad);
    assert.equal(buildConfig({ ...on, baseDomain: 'Apps.Example.COM.' }, {}).baseDomain, 'apps.example.com');
  });
});

describe("HTTPS: Caddy's configuration and the on-demand question", () => {
  const target = (id: string, upstream: string | null): RouteTarget => ({ routeId: `svc-${id}`, label: `Service ${id}`, status: upstream ? 'running' : 'stopped', hosts: [`${id}.localhost`, `${id}.apps.example.com`], upstream, port: 8000 });
  const answers = { resolver: 'udp/127.0.0.1:5300', pages: '127.0.0.1:9000' };
  const tls = { httpsListen: '0.0.0.0:8443', askUrl: 'http://127.0.0.1:9/ask', acme: { directory: 'https://ca.example/dir', email: null, caRoot: null }, storageDir: '/data/caddy-tls', baseDomain: 'apps.example.com' };
  type Server = { routes: Array<{ match?: Array<{ host: string[] }>; handle: Array<{ handler: string; status_code?: number; headers?: { Location: string[] } }> }>; protocols?: string[] };
  const servers = (config: Record<string, unknown>) => (config.apps as { http: { servers: Record<string, Server> } }).http.servers;
  test('plain HTTP redirects the base-domain hosts and still serves <id>.localhost; HTTPS serves only the base-domain hosts, and 404s the rest', () => {
    const { config } = buildCaddyConfig({ adminListen: 'unix//x.sock', answers, listen: '0.0.0.0:8080', targets: [target('a', '10.0.0.2:8000')], tls });
    const plain = servers(config).svc!.routes;
    assert.deepEqual(plain.at(0)?.match, [{ host: ['a.apps.example.com'] }]);
    assert.deepEqual(plain.at(0)?.handle.at(0)?.headers?.Location, ['https://{http.request.host}:8443{http.request.uri}']);
    assert.equal(plain.at(0)?.handle.at(0)?.status_code, 308);
    assert.deepEqual(plain.at(1)?.match, [{ host: ['a.localhost'] }]);
    assert.equal(plain.at(1)?.handle.at(0)?.handler, 'reverse_proxy');
    const secure = servers(config)['svc-tls']!;
    assert.deepEqual(secure.routes.map((r) => r.match?.[0]?.host ?? null), [['a.apps.example.com'], null]);
    assert.equal(secure.routes.at(-1)?.handle.at(0)?.status_code, 404);
    assert.deepEqual(secure.protocols, ['h1', 'h2']);
    assert.deepEqual((config.storage as { root: string }).root, '/data/caddy-tls');
    // On port 443 the redirect names no port; a TLS setting moves the marker (a Caddy with the old one is reloaded).
    const on443 = buildCaddyConfig({ adminListen: 'unix//x.sock', answers, listen: '0.0.0.0:80', targets: [target('a', null)], tls: { ...tls, httpsListen: '0.0.0.0:443' } });
    assert.deepEqual(servers(on443.config).svc!.routes[0]?.handle.at(0)?.headers?.Location, ['https://{http.request.host}{http.request.uri}']);
    const plainOnly = buildCaddyConfig({ adminListen: 'unix//x.sock', answers, listen: '0.0.0.0:80', targets: [target('a', null)] });
    assert.notEqual(on443.marker, plainOnly.marker);
    assert.notEqual(on443.marker, buildCaddyConfig({ adminListen: 'unix//x.sock', answers, listen: '0.0.0.0:80', targets: [target('a', null)], tls: { ...tls, httpsListen: '0.0.0.0:443', acme: { ...tls.acme, directory: 'https://other.example/dir' } } }).marker);
  });
  test('the question says yes only for a routed host served over HTTPS (not <id>.localhost), whatever its case', () => {
    const routed = new Set(['a.localhost', 'a.apps.example.com', 'shop.customer.org']);
    assert.equal(wantsCertificate('a.apps.example.com', routed), true);
    assert.equal(wantsCertificate('A.Apps.Example.COM', routed), true);
    assert.equal(wantsCertificate('shop.customer.org', routed), true);
    for (const no of ['a.localhost', 'b.apps.example.com', 'a.apps.example.com.evil.com', 'apps.example.com', 'evil.com', 'customer.org', '']) {
      assert.equal(wantsCertificate(no, routed), false, no);
    }
  });
  test('a proven custom domain awaiting its first certificate is served on plain HTTP, not redirected; it is served over HTTPS too (where it gets the certificate)', () => {
    const t = { ...target('a', '10.0.0.2:8000'), hosts: ['a.localhost', 'a.apps.example.com', 'shop.customer.org'], awaitingCertificate: ['shop.customer.org'] };
    const { config, marker } = buildCaddyConfig({ adminListen: 'unix//x.sock', answers, listen: '0.0.0.0:8080', targets: [t], tls });
    const plain = servers(config).svc!.routes;
    assert.deepEqual(plain.at(0)?.match, [{ host: ['a.apps.example.com'] }]);
    assert.equal(plain.at(0)?.handle.at(0)?.status_code, 308);
    assert.deepEqual(plain.at(1)?.match, [{ host: ['a.localhost', 'shop.customer.org'] }]);
    assert.equal(plain.at(1)?.handle.at(0)?.handler, 'reverse_proxy');
    assert.deepEqual(servers(config)['svc-tls']!.routes.at(0)?.match, [{ host: ['a.apps.example.com', 'shop.customer.org'] }]);
    // Certified: the configuration changes, so Caddy is given the redirect.
    assert.notEqual(buildCaddyConfig({ adminListen: 'unix//x.sock', answers, listen: '0.0.0.0:8080', targets: [{ ...t, awaitingCertificate: [] }], tls }).marker, marker);
  });
  test("a proven custom domain is redirected and served over HTTPS like the base domain's hosts; every proxied request carries the client's address as X-Real-Ip", () => {
    const t = { ...target('a', '10.0.0.2:8000'), hosts: ['a.localhost', 'a.apps.example.com', 'shop.customer.org'] };
    const { config } = buildCaddyConfig({ adminListen: 'unix//x.sock', answers, listen: '0.0.0.0:8080', targets: [t], tls });
    assert.deepEqual(servers(config).svc!.routes.at(0)?.match, [{ host: ['a.apps.example.com', 'shop.customer.org'] }]);
    const secure = servers(config)['svc-tls']!.routes;
    assert.deepEqual(secure.at(0)?.match, [{ host: ['a.apps.example.com', 'shop.customer.org'] }]);
    assert.deepEqual((secure.at(0)?.handle.at(0) as { headers?: unknown } | undefined)?.headers, { request: { set: { 'X-Real-Ip': ['{http.request.remote.host}'] } } });
  });
});

describe("routes that follow their workloads without a configuration load", () => {
  const answers = { resolver: 'udp/127.0.0.1:5300', pages: '127.0.0.1:9000' };
  const target = (upstream: string | null, over: Partial<RouteTarget> = {}): RouteTarget => ({ routeId: 'svc-a', label: 'Service web', status: upstream ? 'running' : 'stopped', hosts: ['a.localhost'], upstream, port: 8000, ...over });
  const build = (targets: RouteTarget[]) => buildCaddyConfig({ adminListen: 'unix//x.sock', answers, listen: '0.0.0.0:8080', targets });
  type Handler = { handler: string; upstreams?: Array<{ dial: string }>; dynamic_upstreams?: Record<string, unknown>; headers?: { request?: { set?: Record<string, string[]>; delete?: string[] } } };
  const server = (config: Record<string, unknown>) => (config.apps as { http: { servers: { svc: { routes: Array<{ handle: Handler[] }>; errors: { routes: Array<{ handle: Handler[] }> } } } } }).http.servers.svc;
  test('a route names its DNS name at svcd and its port, not the address: deployed, moved, stopped or started, the configuration is the same', () => {
    const running = build([target('10.1.0.5:8000')]);
    const proxied = server(running.config).routes[0]?.handle[0];
    assert.equal(proxied?.upstreams, undefined);
    assert.deepEqual(proxied?.dynamic_upstreams, { source: 'a', name: 'svc-a.svc-upstream.', port: '8000', refresh: '1s', resolver: { addresses: ['udp/127.0.0.1:5300'] } });
    for (const other of [target('10.1.0.9:8000'), target(null), target('10.1.0.9:8000', { status: 'deploying' }), target(null, { label: 'Service renamed' })]) {
      assert.equal(build([other]).marker, running.marker, JSON.stringify(other));
    }
    // What is in the configuration moves the marker: another port, another host, another route.
    assert.notEqual(build([target('10.1.0.5:9000', { port: 9000 })]).marker, running.marker);
    assert.notEqual(build([target('10.1.0.5:8000', { hosts: ['a.localhost', 'b.localhost'] })]).marker, running.marker);
    assert.notEqual(build([target('10.1.0.5:8000'), target(null, { routeId: 'svc-b', hosts: ['b.localhost'] })]).marker, running.marker);
  });
  test('an address no A or AAAA record can carry (a name, another port) is dialed as the configuration names it', () => {
    assert.deepEqual(server(build([target('node-1.example:8000')]).config).routes[0]?.handle[0]?.upstreams, [{ dial: 'node-1.example:8000' }]);
    assert.deepEqual(server(build([target('10.1.0.5:8001')]).config).routes[0]?.handle[0]?.upstreams, [{ dial: '10.1.0.5:8001' }]);
    assert.ok(server(build([target('[fd00::5]:8000')]).config).routes[0]?.handle[0]?.dynamic_upstreams);
  });
  test("a request its route cannot serve is answered by svcd's page server, with the error's status, never upgraded", () => {
    const errors = server(build([target(null)]).config).errors.routes[0]?.handle[0];
    assert.ok(errors);
    assert.deepEqual(errors.upstreams, [{ dial: '127.0.0.1:9000' }]);
    assert.deepEqual(errors.headers?.request?.set, { 'x-svc-proxy-error': ['{http.error.status_code}'] });
    assert.deepEqual(errors.headers.request.delete, ['Upgrade', 'Connection']);
  });
  test("svcd's answers on a real socket: a resolver gets the address, none for a stopped route, no such name for another; the pages say the state; stale routes give no address; a later read wins", async () => {
    const clock = new ManualClock();
    let targets: RouteTarget[] = [
      target('10.1.0.5:8000', { hosts: ['a.localhost'] }),
      target(null, { routeId: 'svc-b', label: 'Service paused', status: 'stopped', hosts: ['b.localhost'] }),
    ];
    // The manual clock as timers too: the routes are read at start and when the test says.
    let storeDown = false;
    const read = () => (storeDown ? Promise.reject(new Error('the store is down')) : Promise.resolve(targets));
    const answers = new RouteAnswers({ listen: { host: '127.0.0.1', port: 0 }, targets: read, clock, timers: clock, log: pino({ level: 'silent' }) });
    const at = await answers.start();
    try {
      const port = Number(at.pages.split(':')[1]);
      assert.equal(at.resolver, `udp/127.0.0.1:${String(port)}`);
      const resolver = new Resolver({ timeout: 2_000, tries: 1 });
      resolver.setServers([`127.0.0.1:${String(port)}`]);
      assert.deepEqual(await resolver.resolve4('svc-a.svc-upstream'), ['10.1.0.5']);
      await assert.rejects(resolver.resolve4('svc-b.svc-upstream'), { code: 'ENODATA' });
      await assert.rejects(resolver.resolve4('svc-zzz.svc-upstream'), { code: 'ENOTFOUND' });
      const page = (host: string, headers: Record<string, string> = {}, method = 'GET') =>
        new Promise<{ status: number; body: string; retry: string | undefined }>((resolve, reject) => {
          const req = httpRequest({ host: '127.0.0.1', port, method, path: '/any', headers: { host, ...headers } }, (res) => {
            let body = '';
            res.on('data', (d: Buffer) => (body += d.toString()));
            res.on('end', () => resolve({ status: res.statusCode ?? 0, body, retry: res.headers['retry-after'] }));
          });
          req.on('error', reject);
          req.end();
        });
      assert.deepEqual(await page('b.localhost:8080'), { status: 503, body: 'Service paused is stopped.\n', retry: '5' });
      assert.equal((await page('B.LOCALHOST.')).status, 503, 'a host is one name whatever its case and trailing dot');
      const silent = await page('a.localhost', { 'x-svc-proxy-error': '504' });
      assert.equal(silent.status, 504);
      assert.match(silent.body, /not answering right now \(504\)/);
      assert.equal((await page('a.localhost', { 'x-svc-proxy-error': '200' })).status, 502, 'only a 5xx is passed on');
      assert.deepEqual(await page('nothing.localhost'), { status: 404, body: 'No service at this address.\n', retry: undefined });
      assert.equal((await page('b.localhost', {}, 'HEAD')).body, '');
      // A later read wins, whichever ends first.
      const earlier = answers.beginRead();
      const later = answers.beginRead();
      answers.update([target('10.1.0.9:8000')], later);
      answers.update(targets, earlier);
      assert.deepEqual(await resolver.resolve4('svc-a.svc-upstream'), ['10.1.0.9']);
      // Routes not read for too long (every read failing): no address at all, rather than one that
      // may be another workload's now.
      storeDown = true;
      clock.advance(STALE_AFTER_MS + 1);
      await assert.rejects(resolver.resolve4('svc-a.svc-upstream'), { code: 'ESERVFAIL' });
      targets = [target('10.1.0.7:8000')];
      answers.update(targets, answers.beginRead());
      assert.deepEqual(await resolver.resolve4('svc-a.svc-upstream'), ['10.1.0.7']);
    } finally {
      await answers.close();
    }
  });
  test('--proxy-answers-listen: loopback 127.0.0.1 only; port 0 by default', () => {
    const raw: RawOptions = { listen: '127.0.0.1:0', dataDir: '/tmp/x', sandbox: 'auto', dockerHost: 'unix:///var/run/docker.sock', logLevel: 'info', dev: true };
    assert.deepEqual(buildConfig(raw, {}).proxyAnswersListen, { host: '127.0.0.1', port: 0 });
    assert.deepEqual(buildConfig({ ...raw, proxyAnswersListen: '127.0.0.1:5353' }, {}).proxyAnswersListen, { host: '127.0.0.1', port: 5353 });
    for (const bad of ['0.0.0.0:5353', '10.0.0.1:53', '[::1]:53', 'localhost:53']) assert.throws(() => buildConfig({ ...raw, proxyAnswersListen: bad }, {}), /--proxy-answers-listen must be 127\.0\.0\.1/, bad);
  });
  test("svcd's DNS answers: the running workload's address, none while it does not run, no such name for a route svc does not have", () => {
    const routes = new Map([
      ['svc-a.svc-upstream.', target('10.1.0.5:8000')],
      ['svc-b.svc-upstream.', target(null, { routeId: 'svc-b' })],
      ['svc-c.svc-upstream.', target('[fd00::5]:8000', { routeId: 'svc-c' })],
    ]);
    const ask = (name: string, type: 'A' | 'AAAA') => {
      const query = dnsPacket.decode(dnsPacket.encode({ type: 'query', id: 4242, flags: dnsPacket.RECURSION_DESIRED, questions: [{ type, name, class: 'IN' }] }));
      return dnsPacket.decode(dnsPacket.encode(answerQuery(query, (n) => routes.get(n))));
    };
    // The response code: the flags' low four bits (dns-packet's typings do not name it).
    const rcode = (p: { flags?: number }) => (p.flags ?? 0) & 0xf;
    const a = ask('svc-a.svc-upstream', 'A');
    assert.equal(a.id, 4242);
    assert.equal(a.flag_aa, true, 'authoritative: an empty answer is not a lame referral');
    assert.equal(rcode(a), 0, 'NOERROR');
    assert.deepEqual(a.answers?.map((x) => [x.type, x.name, 'data' in x ? x.data : null]), [['A', 'svc-a.svc-upstream', '10.1.0.5']]);
    // Names are compared without regard to case, as DNS does.
    assert.equal(ask('SVC-A.svc-upstream', 'A').answers?.length, 1);
    assert.equal(ask('svc-a.svc-upstream', 'AAAA').answers?.length, 0);
    assert.deepEqual(ask('svc-c.svc-upstream', 'AAAA').answers?.map((x) => ('data' in x ? x.data : null)), ['fd00::5']);
    const stopped = ask('svc-b.svc-upstream', 'A');
    assert.equal(rcode(stopped), 0, 'NOERROR');
    assert.equal(stopped.answers?.length, 0);
    assert.equal(rcode(ask('svc-zzz.svc-upstream', 'A')), 3, 'NXDOMAIN');
    // An address on another port than the route's is never answered: Caddy would dial the route's port there.
    routes.set('svc-d.svc-upstream.', target('10.1.0.8:9000', { routeId: 'svc-d' }));
    assert.equal(ask('svc-d.svc-upstream', 'A').answers?.length, 0);
  });
  test("a service's replicas: every one's address in the answer, and Caddy balances them, trying another when one refuses the connection", () => {
    const upstream = joinUpstreams([
      { host: '10.1.0.5', port: 30001 },
      { host: '10.1.0.6', port: 30001 },
      { host: 'fd00::7', port: 30001 },
    ]);
    assert.equal(upstream, '10.1.0.5:30001,10.1.0.6:30001,[fd00::7]:30001');
    assert.deepEqual(splitUpstreams(upstream), [
      { host: '10.1.0.5', port: 30001 },
      { host: '10.1.0.6', port: 30001 },
      { host: 'fd00::7', port: 30001 },
    ]);
    assert.equal(joinUpstreams([]), null);
    const replicated = { ...target(upstream), port: 30001, replicas: 3 };
    const query = (type: 'A' | 'AAAA') => dnsPacket.decode(dnsPacket.encode({ type: 'query', id: 7, questions: [{ type, name: 'svc-a.svc-upstream', class: 'IN' }] }));
    const answered = (type: 'A' | 'AAAA') => (dnsPacket.decode(dnsPacket.encode(answerQuery(query(type), () => replicated))).answers ?? []).map((x) => ('data' in x ? x.data : null));
    assert.deepEqual(answered('A'), ['10.1.0.5', '10.1.0.6']);
    assert.deepEqual(answered('AAAA'), ['fd00::7']);

    type Handler = { handler: string; load_balancing?: { try_duration?: string }; health_checks?: unknown; upstreams?: Array<{ dial: string }>; dynamic_upstreams?: unknown };
    const handlerOf = (t: RouteTarget): Handler => {
      const { config } = buildCaddyConfig({ adminListen: 'unix//x.sock', answers: { resolver: 'udp/127.0.0.1:5300', pages: '127.0.0.1:9000' }, listen: '0.0.0.0:8080', targets: [t] });
      const servers = (config.apps as { http: { servers: Record<string, { routes: Array<{ handle: Handler[] }> }> } }).http.servers;
      const handler = servers.svc?.routes[0]?.handle[0];
      assert.ok(handler);
      return handler;
    };
    const balanced = handlerOf(replicated);
    assert.equal(balanced.load_balancing?.try_duration, '3s');
    assert.equal(balanced.health_checks, undefined, "no passive check: svcd's own checks decide which replicas are routed");
    assert.ok(balanced.dynamic_upstreams, "the addresses are svcd's answers, not the configuration");
    const single = handlerOf({ ...target('10.1.0.5:8000'), replicas: 1 });
    assert.equal(single.load_balancing, undefined, 'one replica: a refused connection fails at once, as before (the page says why)');
    // Addresses no A record can carry are named in the configuration, every one of them.
    assert.deepEqual(handlerOf({ ...target('node-a:30001,node-b:30001'), port: 30001, replicas: 2 }).upstreams, [{ dial: 'node-a:30001' }, { dial: 'node-b:30001' }]);
  });
});

describe("custom domains: Caddy's certificate errors", () => {
  const line = (identifier: string, error: string) => JSON.stringify({ level: 'error', logger: 'tls.obtain', msg: 'could not get certificate from issuer', identifier, error });
  test('an error logged during the probe is the cause; an earlier one is a dated note apart, so a mended cause never reads as current; a served certificate clears it', () => {
    const clock = new ManualClock();
    const errors = new CertificateErrors(clock);
    errors.note(line('shop.example.org', 'urn:ietf:params:acme:error:caa - CAA record prevents issuance'));
    errors.note('{"level":"info","msg":"obtaining certificate"}');
    errors.note('not json {"error" "identifier"');
    assert.deepEqual(errors.explain('other.example.org', clock.now(), 'no certificate was served'), { error: 'no certificate was served', fromIssuer: false });
    // The same moment: logged during the probe.
    const now = errors.explain('shop.example.org', clock.now(), 'no certificate was served');
    assert.match(now.error, /^urn:ietf:params:acme:error:caa/);
    assert.equal(now.fromIssuer, true);
    assert.equal(now.earlier, undefined);
    assert.match(certificateProblem(now.error, null), /CAA record of the name forbids/);
    // A minute on, Caddy backing off: the probe saw a failed handshake, and the CAA error is history.
    clock.advance(60_000);
    const later = errors.explain('shop.example.org', clock.now(), 'no certificate was served (alert internal error)');
    assert.deepEqual([later.error, later.fromIssuer], ['no certificate was served (alert internal error)', false]);
    assert.match(later.earlier ?? '', /^the proxy's last attempt for the name, at 2026-01-01T00:00:00.000Z, failed: urn:ietf:params:acme:error:caa/);
    errors.note(line('shop.example.org', 'urn:ietf:params:acme:error:connection - connection refused'));
    assert.match(errors.explain('shop.example.org', clock.now() - 1, 'x').error, /^urn:ietf:params:acme:error:connection/);
    errors.forget('shop.example.org');
    assert.deepEqual(errors.explain('shop.example.org', 0, 'x'), { error: 'x', fromIssuer: false });
  });
  test('one error per name, 1,000 names at most (the oldest go), each cut to 2,000 characters', () => {
    const clock = new ManualClock();
    const errors = new CertificateErrors(clock);
    for (let i = 0; i < 1_001; i++) errors.note(line(`n${i}.example.org`, 'e'.repeat(5_000)));
    assert.deepEqual(errors.explain('n0.example.org', 0, 'gone'), { error: 'gone', fromIssuer: false });
    assert.equal(errors.explain('n1000.example.org', 0, 'x').error.length, 2_000);
  });
});

describe('custom domains: the names a tenant may add', () => {
  test('lower case, no trailing dot, internationalized names in their xn-- form; apex names allowed', () => {
    assert.equal(customHostname('Shop.Example.COM.', 'apps.example.net'), 'shop.example.com');
    assert.equal(customHostname('example.com', null), 'example.com');
    assert.equal(customHostname('bücher.example', null), 'xn--bcher-kva.example');
    // An ideographic full stop is a dot; at the end, the root.
    assert.equal(customHostname('shop.example.com\u3002', null), 'shop.example.com');
    // 238 characters fit (with _svc-challenge. in front, DNS's 253); 239 do not.
    const longest = `${'a'.repeat(63)}.${'b'.repeat(63)}.${'c'.repeat(63)}.${'d'.repeat(42)}.com`;
    assert.equal(longest.length, 238);
    assert.equal(customHostname(longest, null), longest);
    assert.throws(() => customHostname(`x${longest}`, null), /longer than 238/);
  });
  test("refused with a reason: wildcards, IP addresses, single labels, bad labels, svc's own names", () => {
    const refusals: Array<[string, RegExp]> = [
      ['*.example.com', /wildcard/],
      ['192.0.2.1', /IP address/],
      ['[::1]', /not a valid DNS name|label/],
      ['localhost', /two labels|localhost/],
      ['x.localhost', /localhost/],
      ['com', /two labels/],
      ['-shop.example.com', /label/],
      ['shop_.example.com', /label|valid/],
      ['a'.repeat(64) + '.example.com', /label/],
      [`${'a.'.repeat(127)}com`, /longer than 238/],
      ['web.apps.example.net', /apps\.example\.net/],
      ['apps.example.net', /apps\.example\.net/],
      ['', /valid DNS name|two labels/],
      ['shop.example.com/path', /valid|label/],
      ['shop example.com', /valid|label/],
      ['printer.local', /private to a network/],
      ['db.corp.internal', /private to a network/],
      ['1.0.0.127.in-addr.arpa', /private to a network/],
      ['svc.onion', /private to a network/],
      ['router.private', /private to a network/],
      ['x.alt', /private to a network/],
      ['api.apps.example.net', /apps\.example\.net/],
      ['API.Apps.Example.NET.', /apps\.example\.net/],
      ['shop.example.com:443', /valid DNS name/],
      ['user@shop.example.com', /valid DNS name/],
      ['shop.example.com?x', /valid DNS name/],
    ];
    for (const [name, why] of refusals) {
      assert.throws(() => customHostname(name, 'apps.example.net'), (err: Error) => err instanceof ValidationError && why.test(err.message), name);
    }
  });
  test("Caddy's ACME errors become what the tenant can do about them", () => {
    assert.match(certificateProblem('urn:ietf:params:acme:error:caa - CAA record for shop.example.com prevents issuance', 'apps.example.net'), /CAA record .* forbids/);
    assert.match(certificateProblem('HTTP 429 urn:ietf:params:acme:error:rateLimited - too many certificates', null), /rate limit/);
  });
  test("a domain's standing from its served certificate: active, late renewal noted, failed once expired", () => {
    const cert = { validFrom: 0, validTo: 600 };
    assert.deepEqual(certificateStanding(cert, 300, null), { status: 'active', lastError: null });
    assert.deepEqual(certificateStanding(cert, 300, 'record missing'), { status: 'active', lastError: 'record missing' });
    assert.deepEqual(certificateStanding(cert, 550, null), { status: 'active', lastError: 'the certificate expires at 1970-01-01T00:10:00.000Z and has not been renewed yet (svc keeps trying)' });
    const expired = certificateStanding(cert, 600, 'record missing');
    assert.equal(expired.status, 'failed');
    assert.match(expired.lastError ?? '', /^the certificate expired at 1970-01-01T00:10:00.000Z and was not renewed \(svc keeps trying\); record missing$/);
    assert.match(certificateProblem('urn:ietf:params:acme:error:connection - Fetching http://shop.example.com/.well-known/acme-challenge/x: connection refused', 'apps.example.net'), /point its DNS here .*apps\.example\.net/);
    assert.match(certificateProblem('something else', null), /could not be obtained \(something else\)/);
    assert.ok(certificateProblem('x'.repeat(5000), null).length < 400, 'long errors are cut');
  });
  test('the API has its own route at api.<base-domain>, to where svcd listens; none without a base domain', () => {
    assert.deepEqual(apiRouteTargets('127.0.0.1:8080', 'apps.example.net').map((t) => [t.hosts, t.upstream]), [[['api.apps.example.net'], '127.0.0.1:8080']]);
    assert.deepEqual(apiRouteTargets('127.0.0.1:8080', null), []);
    assert.deepEqual(apiRouteTargets(null, 'apps.example.net'), []);
  });
});

describe('environments: configuration and names', () => {
  const raw: RawOptions = { listen: '127.0.0.1:0', dataDir: '/tmp/x', sandbox: 'auto', dockerHost: 'unix:///var/run/docker.sock', logLevel: 'info', dev: true };
  test('template images default to the public ones; the warm pool is 0-20, kept ones 0-100; the git CA file must exist', () => {
    const c = buildConfig(raw, {});
    assert.deepEqual(c.environmentImages, { default: 'ubuntu:24.04', node: 'node:22-bookworm', python: 'python:3.12-bookworm', go: 'golang:1.23-bookworm' });
    assert.equal(c.environmentWarmPool, 0);
    assert.equal(c.environmentWarmReserve, 10);
    assert.equal(buildConfig({ ...raw, envWarmReserve: '0' }, {}).environmentWarmReserve, 0);
    for (const bad of ['-1', '101', 'ten', '2.5']) assert.throws(() => buildConfig({ ...raw, envWarmReserve: bad }, {}), /--env-warm-reserve must be an integer from 0 to 100/, bad);
    assert.equal(buildConfig({ ...raw, envImageGo: 'golang:1.24', envWarmPool: '3' }, {}).environmentImages.go, 'golang:1.24');
    for (const bad of ['-1', '21', 'two', '1.5']) assert.throws(() => buildConfig({ ...raw, envWarmPool: bad }, {}), /--env-warm-pool/, bad);
    assert.throws(() => buildConfig({ ...raw, gitCaFile: '/no/such/ca.pem' }, {}), /--git-ca-file/);
    // A swarm has no warm pool: an environment there is pinned to its workspace's node, with a port of its own.
    const swarm: RawOptions = { ...raw, runtime: 'swarm', buildRegistry: '127.0.0.1:5000', swarmPublishedFrom: '10.0.0.1' };
    assert.equal(buildConfig({ ...swarm, envWarmPool: '0' }, {}).environmentWarmPool, 0);
    assert.throws(() => buildConfig({ ...swarm, envWarmPool: '1' }, {}), /--env-warm-pool must be 0 with --runtime swarm/);
    assert.equal(buildConfig({ ...raw, gitCaFile: '/etc/hostname' }, {}).gitCaFile, '/etc/hostname');
  });
  test("a preview on a swarm goes to its environment's agent, at the port its node publishes (running or not), naming the preview's port and showing that port's preview token (the one svc-init derives: preview_test.go holds the same value); on one engine, to the container's port", () => {
    assert.equal(previewToken('agent-token', 8000), '1j0vxd4icJrLJj2rKpndZhOytjXDbF6C3ogWiN9ohzw');
    assert.notEqual(previewToken('agent-token', 8000), previewToken('another-token', 8000));
    assert.notEqual(previewToken('agent-token', 8000), previewToken('agent-token', 8001));
    const row = { id: 'p1', environment_id: 'e1', tenant_id: 't1', name: 'site', port: 8000, created_at: 0, env_name: 'web', env_status: 'running', address: '10.77.0.11', agent_port: 30123, agent_token: 'sealed' };
    const open = (sealed: string) => (sealed === 'sealed' ? 'agent-token' : null);
    const routing = { baseDomain: null, proxyListen: '127.0.0.1:8081' };
    const [swarm] = previewRouteTargets([row], routing, open, true);
    assert.equal(swarm?.upstream, '10.77.0.11:30123');
    assert.equal(swarm.port, 30123, "the agent's port, which DNS answers are dialed at");
    assert.deepEqual(swarm.requestHeaders, { [PREVIEW_PORT_HEADER]: '8000', [PREVIEW_TOKEN_HEADER]: previewToken('agent-token', 8000) });
    // Stopped: no address, and still the agent's port (never the preview's own port at a node).
    const [stopped] = previewRouteTargets([{ ...row, env_status: 'stopped', address: null }], routing, open, true);
    assert.deepEqual([stopped?.upstream, stopped?.port], [null, 30123]);
    // A token that does not open: not routed at all.
    assert.equal(previewRouteTargets([{ ...row, agent_token: 'damaged' }], routing, open, true)[0]?.upstream, null);
    // Running on a swarm without its port now (a port moving into a changed range): not routed, never at the preview's own port on the node.
    assert.equal(previewRouteTargets([{ ...row, agent_port: null }], routing, open, true)[0]?.upstream, null);
    // Caddy sets them over the client's own; the configuration is the same running or stopped.
    const config = (t: RouteTarget) => buildCaddyConfig({ adminListen: 'unix//x.sock', answers: { resolver: 'udp/127.0.0.1:5300', pages: '127.0.0.1:9000' }, listen: '0.0.0.0:8080', targets: [t] });
    const handler = ((config(swarm).config.apps as { http: { servers: { svc: { routes: Array<{ handle: Array<{ dynamic_upstreams?: { port: string }; headers: { request: { set: Record<string, string[]> } } }> }> } } } }).http.servers.svc.routes[0]?.handle[0]) ?? assert.fail('no route');
    assert.equal(handler.dynamic_upstreams?.port, '30123');
    assert.deepEqual(handler.headers.request.set[PREVIEW_TOKEN_HEADER], [previewToken('agent-token', 8000)]);
    assert.deepEqual(handler.headers.request.set[PREVIEW_PORT_HEADER], ['8000']);
    assert.equal(config(stopped ?? assert.fail()).marker, config(swarm).marker, 'a start or a stop costs no configuration load');
    const [single] = previewRouteTargets([{ ...row, address: '172.18.0.5', agent_port: null }], routing, open, false);
    assert.deepEqual([single?.upstream, single?.port, single?.requestHeaders], ['172.18.0.5:8000', 8000, undefined]);
  });
  test('sync puts a repository where git clone would: its last path segment without .git', () => {
    assert.equal(repositoryDirectory('https://example.com/org/app.git'), 'app');
    assert.equal(repositoryDirectory('https://example.com/org/app/'), 'app');
    assert.equal(repositoryDirectory('https://example.com/'), 'repository');
    assert.equal(repositoryDirectory('https://example.com/..'), 'repository');
  });
});

describe('client IP', () => {
  const req = (remoteAddress: string, headers: Record<string, string>) => ({ socket: { remoteAddress }, headers }) as unknown as FastifyRequest;
  test('X-Real-Ip only from a loopback peer; X-Forwarded-For never', () => {
    assert.equal(clientIp(req('127.0.0.1', { 'x-real-ip': '203.0.113.7' })), '203.0.113.7');
    assert.equal(clientIp(req('::1', { 'x-real-ip': '203.0.113.8' })), '203.0.113.8');
    assert.equal(clientIp(req('::ffff:127.0.0.1', { 'x-real-ip': '203.0.113.9' })), '203.0.113.9');
    assert.equal(clientIp(req('198.51.100.4', { 'x-real-ip': '203.0.113.7' })), '198.51.100.4');
    assert.equal(clientIp(req('198.51.100.4', { 'x-forwarded-for': '203.0.113.7' })), '198.51.100.4');
    assert.equal(clientIp(req('127.0.0.1', { 'x-forwarded-for': '203.0.113.7' })), '127.0.0.1');
  });
});

describe('idempotent replay storage', () => {
  test('answers below 500 (but not 429) of at most 8 KB are kept; others run again on retry', () => {
    assert.equal(isReplayable(201, 8 * 1024), true);
    assert.equal(isReplayable(404, 10), true);
    assert.equal(isReplayable(201, 8 * 1024 + 1), false);
    assert.equal(isReplayable(429, 10), false);
    assert.equal(isReplayable(500, 10), false);
    assert.equal(isReplayable(503, 10), false);
  });
});

describe("a tenant network the engine cannot make", () => {
  test('full address pools are said with their fix; any other error is left as it is', () => {
    const full = new Error('(HTTP code 404) driver not found - could not find an available, non-overlapping IPv4 address pool among the defaults to assign to the network');
    const said = tenantNetworkError(full);
    assert.ok(said instanceof Error);
    assert.match(said.message, /no address range left for another tenant network .* default-address-pools in the engine's daemon\.json/);
    assert.equal(said.cause, full);
    // Later engines (25 and on) say it so.
    assert.match((tenantNetworkError(new Error('Error response from daemon: all predefined address pools have been fully subnetted')) as Error).message, /no address range left/);
    const other = new Error('connect ECONNREFUSED /var/run/docker.sock');
    assert.equal(tenantNetworkError(other), other);
  });
});

describe('readiness', () => {
  test("a wait that ends unready names the workload's last wrong answer, not a dropped connection after it", async () => {
    const started = Date.now();
    const wait = waitUntilReady({
      ref: 'w1',
      port: 8000,
      ready: {
        timeoutMs: 300,
        everyMs: 20,
        probeTimeoutMs: 100,
        // It answers 404, then (as busybox's httpd now and then) drops the connections near the deadline.
        probe: () => Promise.reject(Date.now() - started < 150 ? new ProbeAnsweredError('health check GET /healthz: answered 404') : new Error('health check GET /healthz: socket hang up')),
      },
      signal: new AbortController().signal,
      clock: systemClock,
      timers: systemTimers,
      inspect: () => Promise.resolve({ id: 'w1', name: 'w1', state: 'running', exitCode: null, labels: {}, address: { host: '10.0.0.2', port: 8000 } }),
      logTail: () => Promise.resolve(''),
    });
    await assert.rejects(wait, /^Error: not ready within 0 s: health check GET \/healthz: answered 404$/);
    // Without a wrong answer, the last failure is what it says.
    const never = waitUntilReady({
      ref: 'w1', port: 8000, ready: { timeoutMs: 100, everyMs: 20, probeTimeoutMs: 100, probe: () => Promise.reject(new Error('connection refused')) },
      signal: new AbortController().signal, clock: systemClock, timers: systemTimers,
      inspect: () => Promise.resolve({ id: 'w1', name: 'w1', state: 'running', exitCode: null, labels: {}, address: { host: '10.0.0.2', port: 8000 } }),
      logTail: () => Promise.resolve(''),
    });
    await assert.rejects(never, /connection refused$/);
  });

  test('a workload not running yet has its state read every 50 ms for its first seconds, then every quarter second', async () => {
    const clock = new ManualClock();
    const began = clock.now();
    const probed: { at: number | null } = { at: null };
    const runningFrom = began + 100;
    const wait = waitUntilReady({
      ref: 'w1', port: 8000, ready: { timeoutMs: 60_000, everyMs: 20, probeTimeoutMs: 1_000, probe: () => { probed.at = clock.now(); return Promise.resolve(); } },
      signal: new AbortController().signal, clock, timers: clock,
      inspect: () => {
        return Promise.resolve({ id: 'w1', name: 'w1', state: clock.now() >= runningFrom ? 'running' : 'created', exitCode: null, labels: {}, address: { host: '10.0.0.2', port: 8000 } });
      },
      logTail: () => Promise.resolve(''),
    });
    const ready = { done: false };
    void wait.then(() => (ready.done = true));
    for (let i = 0; i < 100 && !ready.done; i++) {
      await new Promise((r) => setImmediate(r));
      clock.advance(20);
    }
    assert.ok(ready.done, 'ready');
    // Seen running at the first read after it ran (a quarter second later before), probed then.
    const at = probed.at ?? assert.fail('never probed');
    assert.ok(at >= runningFrom && at <= runningFrom + EAGER_STATE_EVERY_MS + 20, `probed ${String(at - began)} ms in`);
    // One that never runs: read every EAGER_STATE_EVERY_MS for EAGER_STATE_MS, then at STATE_EVERY_MS.
    const never: number[] = [];
    const stop = new AbortController();
    const waiting = waitUntilReady({
      ref: 'w2', port: 8000, ready: { timeoutMs: 60_000, everyMs: 20, probeTimeoutMs: 1_000 },
      signal: stop.signal, clock, timers: clock,
      inspect: () => {
        never.push(clock.now());
        return Promise.resolve({ id: 'w2', name: 'w2', state: 'created', exitCode: null, labels: {}, address: null });
      },
      logTail: () => Promise.resolve(''),
    }).catch(() => undefined);
    const start = clock.now();
    for (let i = 0; i < 500; i++) {
      await new Promise((r) => setImmediate(r));
      clock.advance(20);
    }
    stop.abort();
    await waiting;
    const eagerReads = never.filter((t) => t - start < EAGER_STATE_MS).length;
    const laterReads = never.filter((t) => t - start >= EAGER_STATE_MS).length;
    const eagerExpected = EAGER_STATE_MS / (EAGER_STATE_EVERY_MS + 10);
    assert.ok(eagerReads >= eagerExpected - 1 && eagerReads <= EAGER_STATE_MS / EAGER_STATE_EVERY_MS + 1, `${String(eagerReads)} reads in the first ${String(EAGER_STATE_MS)} ms`);
    assert.ok(laterReads <= Math.ceil((500 * 20 - EAGER_STATE_MS) / STATE_EVERY_MS) + 1, `${String(laterReads)} reads after`);
  });
});

describe("an apply's steps (apply-sequence.ts)", () => {
  const spec: WorkloadSpec = { name: 'svc-s1', image: 'img', env: {}, port: 8000, tenantId: 't1', kind: 'service', resourceId: 's1', limits: { memoryMb: 256, cpus: 0.4, pids: 256 }, sandbox: false };
  /** Steps that log what is asked, each held until the test lets it end. */
  const steppedEngine = () => {
    const asked: string[] = [];
    const held = new Map<string, () => void>();
    const step = (name: string, fail = false) =>
      new Promise<void>((resolve, reject) => {
        asked.push(name);
        held.set(name, () => (fail ? reject(new Error(`${name} failed`)) : resolve()));
      });
    const release = async (name: string) => {
      await waitFor(`${name} to be asked`, () => Promise.resolve(held.has(name) || undefined));
      held.get(name)?.();
    };
    return { asked, held, step, release };
  };

  const ready = { timeoutMs: 1_000, everyMs: 10, probeTimeoutMs: 100, probe: () => Promise.resolve() };
  /** Steps on a stepped engine: the running workload under the name is `old`; what each asked is logged. */
  const stepsOn = (e: ReturnType<typeof steppedEngine>, o: { networkFails?: boolean; pullFails?: boolean } = {}) => {
    const moved = { renamed: false, removed: [] as string[] };
    const steps: ApplySteps = {
      clock: systemClock,
      timers: systemTimers,
      ensureNetwork: () => e.step('network', o.networkFails),
      hasImage: () => (e.asked.push('has-image'), Promise.resolve(false)),
      pullImage: () => e.step('pull', o.pullFails),
      inspect: (ref) => (ref === spec.name ? e.step('inspect').then(() => ({ id: 'old', name: spec.name, state: 'running' as const, exitCode: null, labels: {}, address: null })) : Promise.resolve({ id: ref, name: spec.name, state: 'running' as const, exitCode: null, labels: {}, address: { host: '10.0.0.2', port: 8000 } })),
      rename: () => e.step('rename').then(() => void (moved.renamed = true)),
      remove: (ref) => (moved.removed.push(ref), Promise.resolve()),
      run: () => (e.asked.push('run'), Promise.resolve('new')),
      logTail: () => Promise.resolve(''),
    };
    return { steps, moved };
  };

  test('the network and the name are asked for together, and the run waits for both; a failure waits for the other to end', async () => {
    const e = steppedEngine();
    const { steps } = stepsOn(e);
    const request: ApplyRequest = { spec, setAside: true, pull: 'never', ready, signal: new AbortController().signal };
    const applied = applyInOrder(request, steps);
    await waitFor('both asked', () => Promise.resolve(e.asked.length === 2 || undefined));
    assert.deepEqual([...e.asked].sort(), ['inspect', 'network'], 'side by side: neither waited for the other');
    await e.release('network');
    await e.release('inspect');
    await e.release('rename');
    assert.equal((await applied).ref, 'new');
    assert.deepEqual(e.asked.slice(2), ['rename', 'run'], 'run once the name was free');

    // The network fails while the running one is being renamed aside: the apply fails once the
    // rename ended, so that the caller's clean-up finds it where it went.
    const f = steppedEngine();
    const failing = stepsOn(f, { networkFails: true });
    let settled = false;
    const outcome = applyInOrder(request, failing.steps).finally(() => void (settled = true));
    outcome.catch(() => {});
    await f.release('network');
    await f.release('inspect');
    await new Promise((r) => setTimeout(r, 20));
    assert.equal(settled, false, 'still renaming');
    await f.release('rename');
    await assert.rejects(outcome, /network failed/);
    assert.equal(failing.moved.renamed, true);
    assert.ok(!f.asked.includes('run'));
  });

  test('an image to pull comes before the name is cleared (beside the network): what runs keeps running through the pull, and through a failed one', async () => {
    const e = steppedEngine();
    const { steps, moved } = stepsOn(e);
    const request: ApplyRequest = { spec, replaces: 'svc-s1-old', pull: 'missing', ready, signal: new AbortController().signal };
    const applied = applyInOrder(request, steps);
    await waitFor('the pull asked', () => Promise.resolve(e.asked.includes('pull') || undefined));
    assert.deepEqual(e.asked, ['has-image', 'network', 'pull']);
    await e.release('network');
    await new Promise((r) => setTimeout(r, 20));
    assert.deepEqual(moved.removed, [], 'nothing removed while the image is pulled');
    await e.release('pull');
    assert.equal((await applied).ref, 'new');
    assert.deepEqual(moved.removed, ['svc-s1-old', spec.name]);

    const f = steppedEngine();
    const failing = stepsOn(f, { pullFails: true });
    const outcome = applyInOrder(request, failing.steps);
    outcome.catch(() => {});
    await f.release('network');
    await f.release('pull');
    await assert.rejects(outcome, /pull failed/);
    assert.deepEqual(failing.moved.removed, [], 'a failed pull leaves what runs alone');
  });
});

describe("an apply's clearing of the name, rolling (apply-sequence.ts)", () => {
  const spec: WorkloadSpec = { name: 'svc-s1', image: 'img', env: {}, port: 8000, tenantId: 't1', kind: 'service', resourceId: 's1', limits: { memoryMb: 256, cpus: 0.4, pids: 256 }, sandbox: false };
  const ready = { timeoutMs: 1_000, everyMs: 10, probeTimeoutMs: 100, probe: () => Promise.resolve() };
  /** What an apply asks of an engine whose workload under the name is `under` (null: none), in order. */
  const askedWith = async (under: WorkloadState | null): Promise<string[]> => {
    const asked: string[] = [];
    const steps: ApplySteps = {
      clock: systemClock,
      timers: systemTimers,
      ensureNetwork: () => Promise.resolve(),
      hasImage: () => Promise.resolve(true),
      pullImage: () => Promise.resolve(),
      inspect: (ref) => {
        if (ref !== spec.name) return Promise.resolve({ id: ref, name: spec.name, state: 'running', exitCode: null, labels: {}, address: { host: '10.0.0.2', port: 8000 } });
        asked.push('inspect');
        return Promise.resolve(under === null ? null : { id: 'old', name: spec.name, state: under, exitCode: null, labels: {}, address: null });
      },
      rename: (ref, name) => (asked.push(`rename ${ref} ${name}`), Promise.resolve()),
      remove: (ref) => (asked.push(`remove ${ref}`), Promise.resolve()),
      run: () => (asked.push('run'), Promise.resolve('new')),
      logTail: () => Promise.resolve(''),
    };
    await applyInOrder({ spec, setAside: true, pull: 'never', ready, signal: new AbortController().signal }, steps);
    return asked;
  };

  test('nothing under the name: nothing removed; a running one renamed aside (and the name cleared of any other); any other removed', async () => {
    assert.deepEqual(await askedWith(null), ['inspect', 'run']);
    assert.deepEqual(await askedWith('running'), ['inspect', `rename old ${setAsideName(spec.name, 'old')}`, `remove ${spec.name}`, 'run']);
    for (const state of ['exited', 'created', 'dead'] as const) assert.deepEqual(await askedWith(state), ['inspect', `remove ${spec.name}`, 'run'], state);
  });
});

describe('readiness: eager probes', () => {
  test('a workload is probed at the eager pause for its first moments after it is seen running (not after the wait began), then at the usual one', async () => {
    const clock = new ManualClock();
    const began = clock.now();
    // Created, not running, for its first 200 ms: the eager moments begin when it runs.
    const runningFrom = began + 200;
    const probes: number[] = [];
    const stop = new AbortController();
    const waiting = waitUntilReady({
      ref: 'w1', port: 8000, ready: { timeoutMs: 60_000, everyMs: 25, eager: { everyMs: 5, forMs: 100 }, probeTimeoutMs: 1_000, probe: () => { probes.push(clock.now()); return Promise.reject(new Error('connection refused')); } },
      signal: stop.signal, clock, timers: clock,
      inspect: () => Promise.resolve({ id: 'w1', name: 'w1', state: clock.now() >= runningFrom ? 'running' : 'created', exitCode: null, labels: {}, address: { host: '10.0.0.2', port: 8000 } }),
      logTail: () => Promise.resolve(''),
    }).catch(() => undefined);
    for (let i = 0; i < 140; i++) {
      for (let j = 0; j < 5; j++) await new Promise((r) => setImmediate(r));
      clock.advance(5);
    }
    stop.abort();
    await waiting;
    const first = probes[0] ?? assert.fail('never probed');
    assert.ok(first >= runningFrom, `probed ${String(first - began)} ms in, before it ran`);
    const gaps = probes.slice(1).map((t, i) => ({ at: (probes[i] ?? 0) - first, gap: t - (probes[i] ?? 0) }));
    assert.deepEqual([...new Set(gaps.filter((g) => g.at < 100).map((g) => g.gap))], [5], JSON.stringify(gaps));
    assert.deepEqual([...new Set(gaps.filter((g) => g.at >= 100).map((g) => g.gap))], [25], JSON.stringify(gaps));
  });
});

describe('crash bookkeeping', () => {
  test('crashes count within a 10-minute window; the fifth opens the circuit; backoff doubles to 30 s', () => {
    let s = { crash_count: 0, crash_window_start: null as number | null };
    const states = [];
    for (const at of [1000, 1010, 1100, 1500, 1599]) {
      const next = afterCrash(s, at);
      states.push([next.crash_count, next.circuitOpen]);
      s = next;
    }
    assert.deepEqual(states, [[1, false], [2, false], [3, false], [4, false], [5, true]]);
    assert.deepEqual(afterCrash({ crash_count: 4, crash_window_start: 1000 }, 1600), { crash_count: 1, crash_window_start: 1600, last_crash_at: 1600, circuitOpen: false }, 'a crash after the window starts a new one');
    assert.deepEqual([1, 2, 3, 5, 6, 10].map((n) => restartDelayMs(n)), [1000, 2000, 4000, 16000, 30000, 30000]);
    assert.equal(restartDelayMs(3, 10), 40, 'scaled base for tests');
  });
});

describe('image references and DNS labels', () => {
  test('Docker Hub and loopback registries are accepted; anything else is refused with a reason', () => {
    for (const ok of ['nginx', 'nginx:1.27', 'library/nginx:latest', 'docker.io/acme/app:v2', 'acme/app@sha256:' + 'a'.repeat(64), '127.0.0.1:5000/app:1', 'localhost:5000/team/app', '[::1]:5000/app']) {
      assert.equal(imageRefusal(ok), null, ok);
    }
    assert.match(imageRefusal('ghcr.io/acme/app') ?? '', /not ghcr\.io/);
    assert.match(imageRefusal('10.0.0.5:5000/app') ?? '', /loopback/);
    assert.match(imageRefusal('localhost/app') ?? '', /loopback/, 'a loopback registry needs its port');
    assert.match(imageRefusal('UPPER/case') ?? '', /invalid/);
    assert.match(imageRefusal('app:') ?? '', /invalid/);
  });
  test('labels: lower-case, hyphens for the rest, at most 63 characters', () => {
    assert.equal(dnsLabelFor('My Web_App.v2'), 'my-web-app-v2');
    assert.equal(dnsLabelFor('---'), 'service');
    assert.equal(dnsLabelFor('x'.repeat(70)).length, 63);
  });
});

describe('workload policy', () => {
  test("a workload's limits are the tenant's quota shared by its service quota, never under 64 MB", () => {
    assert.deepEqual(workloadLimits({ max_services: 5, max_memory_mb: 2560, max_cpu_cores: 2 }), { memoryMb: 512, cpus: 0.4, pids: 256 });
    assert.deepEqual(workloadLimits({ max_services: 3, max_memory_mb: 100, max_cpu_cores: 1 }), { memoryMb: 64, cpus: 0.333, pids: 256 });
    // A quota of no services still gives the one workload (a build, a board) the whole quota.
    assert.deepEqual(workloadLimits({ max_services: 0, max_memory_mb: 1024, max_cpu_cores: 1 }), { memoryMb: 1024, cpus: 1, pids: 256 });
  });

  test('--sandbox: off never, required always, auto when the engine has runsc, asked again after a minute', async () => {
    const clock = new ManualClock();
    let runtimes = ['runc'];
    let asked = 0;
    // The Docker driver's own answer from the engine's runtimes: the policy asks the driver.
    const docker = new DockerRuntime({ host: 'unix:///nonexistent.sock', installation: 'unit' });
    docker.info = (): Promise<EngineInfo> => {
      asked++;
      return Promise.resolve({ version: '26', runtimes, defaultRuntime: 'runc', dataRoot: '/var/lib/docker', cgroupDriver: 'cgroupfs' });
    };
    const engine = { capabilities: () => docker.capabilities() };
    assert.equal(await new SandboxPolicy('off', engine, clock).use(), false);
    assert.equal(await new SandboxPolicy('required', engine, clock).use(), true);
    assert.equal(asked, 0, 'off and required do not ask the engine');
    const auto = new SandboxPolicy('auto', engine, clock);
    assert.equal(await auto.use(), false);
    runtimes = ['runc', 'runsc'];
    assert.equal(await auto.use(), false, 'the answer is kept for a minute');
    assert.equal(asked, 1);
    clock.advance(60_001);
    assert.equal(await auto.use(), true);
    assert.equal(asked, 2);
  });
});

describe("the engine's fault or the tenant's", () => {
  const withProps = (message: string, props: Record<string, unknown>) => Object.assign(new Error(message), props);

  test('no engine answering is the engine fault, also when wrapped', () => {
    assert.equal(isEngineFault(new RuntimeUnavailableError('container engine unavailable')), true);
    assert.equal(isEngineFault(withProps('connect ENOENT /var/run/docker.sock', { code: 'ENOENT', syscall: 'connect' })), true);
    assert.equal(isEngineFault(withProps('connect ECONNREFUSED', { code: 'ECONNREFUSED', syscall: 'connect' })), true);
    const wrapped = new Error('starting the workload failed', { cause: withProps('connect ENOENT /var/run/docker.sock', { code: 'ENOENT', syscall: 'connect' }) });
    assert.equal(isEngineFault(wrapped), true);
  });

  test('a connection dropped mid-request is neither the engine\'s absence nor (for sure) the tenant\'s fault', () => {
    // An engine restarting under the request, or the client's idle timeout on a slow answer.
    assert.equal(isEngineFault(withProps('socket hang up', { code: 'ECONNRESET' })), false);
    assert.equal(connectionDropped(withProps('socket hang up', { code: 'ECONNRESET' })), true);
    assert.equal(connectionDropped(new Error('creating the container failed', { cause: withProps('write EPIPE', { code: 'EPIPE', syscall: 'write' }) })), true);
    assert.equal(connectionDropped(withProps('connect ECONNREFUSED', { code: 'ECONNREFUSED', syscall: 'connect' })), false);
    // A probe's reset is its message, not its cause: the workload did not get ready.
    assert.equal(connectionDropped(new Error('not ready within 60 s: socket hang up')), false);
  });

  test("an engine's answer (4xx, 5xx), or svc's own error, is not", () => {
    // This engine answers 500 to an image whose command does not exist under gVisor.
    assert.equal(isEngineFault(withProps('(HTTP code 500) OCI runtime create failed', { statusCode: 500 })), false);
    assert.equal(isEngineFault(withProps('(HTTP code 404) no such image', { statusCode: 404 })), false);
    assert.equal(isEngineFault(withProps('(HTTP code 400) invalid port', { statusCode: 400 })), false);
    assert.equal(isEngineFault(new Error('container exited with code 1 during the deploy')), false);
    // A file of svc's own.
    assert.equal(isEngineFault(withProps("ENOENT: no such file or directory, open 'x'", { code: 'ENOENT', syscall: 'open' })), false);
    assert.equal(isEngineFault('not an error'), false);
  });
});

test("the swarm driver matches an image name to the repository the engine's RepoDigests name", () => {
  assert.equal(repositoryOf('docker.io/library/busybox:latest'), 'busybox');
  assert.equal(repositoryOf('docker.io/someone/app:1'), 'someone/app');
  assert.equal(repositoryOf('127.0.0.1:5055/svc-test/busybox-httpd:5'), '127.0.0.1:5055/svc-test/busybox-httpd');
  assert.equal(repositoryOf('127.0.0.1:5055/svc/t1/s1'), '127.0.0.1:5055/svc/t1/s1');
  assert.equal(repositoryOf(`localhost:5000/a/b@sha256:${'a'.repeat(64)}`), 'localhost:5000/a/b');
});

describe("an engine's answer kept while the engine reports no change", () => {
  /** Watches the test drives: each opens, is refused, or opens when the test says; changes and ends sent by hand. */
  function fakeWatch(mode: 'opens' | 'refused' | 'on demand' = 'opens') {
    const w = { opened: 0, change: () => {}, end: () => {}, signals: [] as AbortSignal[], endAtOnce: false, letOpen: () => {} };
    const watch = (onChange: () => void, onEnd: () => void, signal: AbortSignal) => {
      w.opened++;
      w.change = onChange;
      w.end = onEnd;
      w.signals.push(signal);
      if (w.endAtOnce) onEnd();
      if (mode === 'on demand') return new Promise<void>((r) => (w.letOpen = r));
      return mode === 'opens' ? Promise.resolve() : Promise.reject(new Error('no events'));
    };
    return { w, watch };
  }
  function counted(answers: (() => Promise<string>)[] = []) {
    const c = { asks: 0 };
    const ask = () => {
      c.asks++;
      return answers.shift()?.() ?? Promise.resolve(`answer ${c.asks}`);
    };
    return { c, ask };
  }
  const clockAt = (ms = 1_000_000) => {
    const clock = { ms, now: () => clock.ms };
    return clock;
  };
  const aDay = (clock = clockAt()) => ({ clock, maxAgeMs: 24 * 3_600_000 });
  /** Lets a watch that opens at once be seen open (its promise settles in a later turn). */
  const settle = () => new Promise((r) => setImmediate(r));

  test('asked at once while the watch opens (not kept), then once while it is open; a change, or its end, has it asked again', async () => {
    const { w, watch } = fakeWatch();
    const { c, ask } = counted();
    const kept = new KeptAnswer(ask, watch, aDay());
    assert.equal(await kept.get(), 'answer 1');
    await settle();
    assert.equal(await kept.get(), 'answer 2');
    assert.equal(await kept.get(), 'answer 2');
    assert.equal(c.asks, 2);
    w.change();
    assert.equal(await kept.get(), 'answer 3');
    assert.equal(await kept.get(), 'answer 3');
    assert.equal(w.opened, 1);
    w.end();
    assert.equal(await kept.get(), 'answer 4', 'the watch ended: asked, and a new watch opens');
    assert.equal(w.opened, 2);
    await settle();
    assert.equal(await kept.get(), 'answer 5');
    assert.equal(await kept.get(), 'answer 5');
    assert.equal(c.asks, 5);
  });

  test('past its age (a watch that went silent) or with the clock set back, asked again under a new watch', async () => {
    const clock = clockAt();
    const { w, watch } = fakeWatch();
    const { ask, c } = counted();
    const kept = new KeptAnswer(ask, watch, { clock, maxAgeMs: KEPT_ANSWER_MAX_AGE_MS });
    await kept.get();
    await settle();
    await kept.get();
    clock.ms += KEPT_ANSWER_MAX_AGE_MS - 1;
    assert.equal(await kept.get(), 'answer 2');
    clock.ms += 1;
    assert.equal(await kept.get(), 'answer 3');
    assert.equal(w.opened, 2, 'a new watch');
    assert.equal(w.signals[0]?.aborted, true, 'the old one stopped');
    await settle();
    assert.equal(await kept.get(), 'answer 4');
    clock.ms -= 1_000;
    assert.equal(await kept.get(), 'answer 5');
    assert.equal(c.asks, 5);
  });

  test('a change while the engine answers: that answer is given to its question, not kept', async () => {
    const { w, watch } = fakeWatch();
    let answer!: (v: string) => void;
    const { c, ask } = counted([() => Promise.resolve('while opening'), () => new Promise<string>((r) => (answer = r))]);
    const kept = new KeptAnswer(ask, watch, aDay());
    await kept.get();
    await settle();
    const second = kept.get();
    w.change();
    answer('before the change');
    assert.equal(await second, 'before the change');
    assert.equal(await kept.get(), 'answer 3');
    assert.equal(c.asks, 3);
  });

  test('a failed answer is not kept; nor one asked under a watch that ended as it opened', async () => {
    const { watch } = fakeWatch();
    const { c, ask } = counted([() => Promise.resolve('while opening'), () => Promise.reject(new Error('engine down'))]);
    const kept = new KeptAnswer(ask, watch, aDay());
    await kept.get();
    await settle();
    await assert.rejects(kept.get(), /engine down/);
    assert.equal(await kept.get(), 'answer 3');
    assert.equal(await kept.get(), 'answer 3');
    assert.equal(c.asks, 3);

    const brief = fakeWatch();
    brief.w.endAtOnce = true;
    const once = counted();
    const unkept = new KeptAnswer(once.ask, brief.watch, aDay());
    for (let i = 1; i <= 3; i++) {
      assert.equal(await unkept.get(), `answer ${i}`);
      await settle();
    }
  });

  test('a watch that cannot open keeps nothing, and none is tried again for a minute', async () => {
    const clock = clockAt();
    const refused = fakeWatch('refused');
    const { c, ask } = counted();
    const kept = new KeptAnswer(ask, refused.watch, aDay(clock));
    for (let i = 1; i <= 3; i++) {
      assert.equal(await kept.get(), `answer ${i}`);
      await settle();
    }
    assert.equal(refused.w.opened, 1, 'not tried again at once');
    clock.ms += WATCH_RETRY_MS;
    await kept.get();
    assert.equal(refused.w.opened, 2);
    assert.equal(c.asks, 4);
  });

  test('a watch slow to open holds no question up; close ends it, and what it opens after is not used', async () => {
    const slow = fakeWatch('on demand');
    const { c, ask } = counted();
    const kept = new KeptAnswer(ask, slow.watch, aDay());
    assert.equal(await kept.get(), 'answer 1');
    assert.equal(await kept.get(), 'answer 2', 'asked while it opens');
    slow.w.letOpen();
    await settle();
    assert.equal(await kept.get(), 'answer 3');
    assert.equal(await kept.get(), 'answer 3', 'kept once open');
    // Read through a function: assert.equal narrows what it checked for the type checker.
    const stopped = () => slow.w.signals[0]?.aborted;
    assert.equal(stopped(), false);
    kept.close();
    assert.equal(stopped(), true);
    assert.equal(await kept.get(), 'answer 4');
    await settle();
    assert.equal(await kept.get(), 'answer 5', 'nothing kept after the close');
    assert.equal(slow.w.opened, 1);
    assert.equal(c.asks, 5);
  });
});

describe("a watch of the engine's events (DockerRuntime.watchEngine), against a stand-in engine", () => {
  /**
   * An HTTP server (a unix socket, or TCP on loopback) that answers /info with runsc and /events
   * as told: never, headers then silence, headers then a reload, or headers then the end.
   */
  async function standIn(events: 'never' | 'silent' | 'reload' | 'end', on: 'unix' | 'tcp' = 'unix') {
    const dir = mkdtempSync(join(tmpdir(), 'svc-events-'));
    const socketPath = join(dir, 'engine.sock');
    const asked: string[] = [];
    const server = createServer((req, res) => {
      const url = req.url ?? '';
      asked.push(url.replace(/\?.*/, '').replace(/^\/v[\d.]+/, ''));
      if (!url.includes('/events')) {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ DefaultRuntime: 'runsc' }));
        return;
      }
      if (events === 'never') return;
      assert.match(url, /since=1\b/);
      res.writeHead(200, { 'content-type': 'application/json' });
      res.flushHeaders();
      if (events === 'reload') res.write('{"Type":"daemon","Action":"reload"}\n');
      if (events === 'end') res.end();
    });
    if (on === 'unix') await new Promise<void>((r) => server.listen(socketPath, r));
    else await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const address = server.address();
    return {
      host: on === 'unix' ? `unix://${socketPath}` : `tcp://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}`,
      count: (path: string) => asked.filter((p) => p === path).length,
      close: async () => {
        server.closeAllConnections();
        await new Promise((r) => server.close(r));
        rmSync(dir, { recursive: true, force: true });
      },
    };
  }

  test('an engine that opens no stream in time fails the watch; one that opens it keeps it open past that time, until stopped', async () => {
    const silent = await standIn('never');
    try {
      const runtime = new DockerRuntime({ host: silent.host, installation: 'x', timeoutMs: 1_000 });
      const stop = new AbortController();
      const began = Date.now();
      await assert.rejects(runtime.watchEngine(() => {}, () => {}, stop.signal));
      assert.ok(Date.now() - began < 10_000, 'within the engine calls time, not forever');
      assert.equal(getEventListeners(stop.signal, 'abort').length, 0, 'nothing left listening');
    } finally {
      await silent.close();
    }

    const open = await standIn('silent');
    try {
      const runtime = new DockerRuntime({ host: open.host, installation: 'x', timeoutMs: 1_000 });
      const stop = new AbortController();
      let ended = 0;
      await runtime.watchEngine(() => {}, () => ended++, stop.signal);
      await new Promise((r) => setTimeout(r, 2_000));
      assert.equal(ended, 0, 'open past the timeout of the engine calls');
      stop.abort();
      await waitFor('the watch to end', () => Promise.resolve(ended === 1 || undefined));
      assert.equal(getEventListeners(stop.signal, 'abort').length, 0);
    } finally {
      await open.close();
    }
  });

  test("an event is a change, and the stream's end is the watch's end", async () => {
    for (const [events, expect] of [['reload', { changes: 1, ends: 0 }], ['end', { changes: 0, ends: 1 }]] as const) {
      const engine = await standIn(events);
      try {
        const runtime = new DockerRuntime({ host: engine.host, installation: 'x' });
        const seen = { changes: 0, ends: 0 };
        const stop = new AbortController();
        await runtime.watchEngine(() => seen.changes++, () => seen.ends++, stop.signal);
        await waitFor(`the ${events}`, () => Promise.resolve(seen.changes + seen.ends > 0 || undefined));
        await new Promise((r) => setTimeout(r, 100));
        assert.deepEqual(seen, expect, events);
        stop.abort();
      } finally {
        await engine.close();
      }
    }
  });

  test("the step runtime is asked of the engine again after ten minutes over a unix socket, after one over TCP", async () => {
    for (const [on, ageMs] of [['unix', KEPT_ANSWER_LOCAL_MAX_AGE_MS], ['tcp', KEPT_ANSWER_MAX_AGE_MS]] as const) {
      const engine = await standIn('silent', on);
      const clock = new ManualClock();
      const runtime = new DockerRuntime({ host: engine.host, installation: 'x', clock });
      try {
        assert.equal(await runtime.stepRuntime(), 'runsc');
        await waitFor('the watch to open', async () => (engine.count('/events') === 1 ? true : undefined));
        await new Promise((r) => setTimeout(r, 50));
        await runtime.stepRuntime();
        const asked = engine.count('/info');
        await runtime.stepRuntime();
        clock.advance(ageMs - 1);
        await runtime.stepRuntime();
        assert.equal(engine.count('/info'), asked, `${on}: kept for ${ageMs} ms`);
        clock.advance(1);
        await runtime.stepRuntime();
        assert.equal(engine.count('/info'), asked + 1, `${on}: asked again past its age`);
        await waitFor('a new watch', async () => (engine.count('/events') === 2 ? true : undefined));
      } finally {
        await runtime.close();
        await engine.close();
      }
    }
  });
});

describe("base images pulled ahead of a build (an upload's warm-up)", () => {
  const IMAGE = '127.0.0.1:5999/memory/base:1';
  /** A puller whose pulls end when the test says, each with the signal it was given. */
  const puller = () => {
    const pulls: { image: string; signal: AbortSignal; done: () => void }[] = [];
    return {
      pulls,
      pullImage: (image: string, signal: AbortSignal) =>
        new Promise<void>((resolve, reject) => {
          pulls.push({ image, signal, done: resolve });
          signal.addEventListener('abort', () => reject(new Error('aborted')), { once: true });
        }),
      baseImage: (image: string) => Promise.resolve({ id: `sha256:${image.length}` }),
    };
  };
  const store = (images: string[]) => ({ builds: { lastBaseImages: () => Promise.resolve(JSON.stringify(images)) } }) as never;
  const prefetchOf = (images: string[], engine: ReturnType<typeof puller>, clock: ManualClock, buildRegistry: string | null = null) =>
    new BaseImagePrefetch({ store: store(images), runtime: engine, clock, timers: clock, buildRegistry, recent: new RecentPulls(clock, 0) });

  test("a tenant's recent pulls: its own only, for the window from the pull, with the time left asked for; forgotten, bounded, none at 0; a clock gone back drops it", () => {
    const clock = new ManualClock();
    const recent = new RecentPulls(clock, 60_000);
    recent.pulled('t1', IMAGE, 'sha256:a', clock.now());
    assert.deepEqual(recent.recent('t1', IMAGE), { id: 'sha256:a', ageMs: 0 });
    assert.equal(recent.recent('t2', IMAGE), null, "another tenant's");
    clock.advance(50_000);
    assert.deepEqual(recent.recent('t1', IMAGE, 10_000), { id: 'sha256:a', ageMs: 50_000 }, '10 s left');
    clock.advance(1);
    assert.equal(recent.recent('t1', IMAGE, 10_000), null, 'less than 10 s left');
    assert.notEqual(recent.recent('t1', IMAGE), null);
    clock.advance(9_999);
    assert.equal(recent.recent('t1', IMAGE), null, 'the window ended');
    // Recorded with the time the pull ended, which may be before now.
    recent.pulled('t1', IMAGE, 'sha256:b', clock.now() - 59_000);
    assert.equal(recent.recent('t1', IMAGE)?.ageMs, 59_000);
    recent.forget('t1', IMAGE);
    assert.equal(recent.recent('t1', IMAGE), null, 'forgotten');
    recent.pulled('t1', IMAGE, 'sha256:c', clock.now() + 1_000);
    assert.equal(recent.recent('t1', IMAGE), null, 'a pull after now: the clock went back');
    // Bounded: past KEPT_MAX the oldest goes.
    for (let i = 0; i <= KEPT_MAX; i++) recent.pulled(`t${i}`, IMAGE, 'sha256:d', clock.now());
    assert.equal(recent.recent('t0', IMAGE), null, 'the oldest went');
    assert.notEqual(recent.recent('t1', IMAGE), null);
    assert.notEqual(recent.recent(`t${KEPT_MAX}`, IMAGE), null);
    // 0: nothing is kept.
    const off = new RecentPulls(clock, 0);
    off.pulled('t1', IMAGE, 'sha256:a', clock.now());
    assert.equal(off.recent('t1', IMAGE), null);
  });

  test("a build takes the pull its upload began (no second pull), and it then ends with the build's signal, not at the warm-up's 10 s", async () => {
    const engine = puller();
    const clock = new ManualClock();
    const prefetch = prefetchOf([IMAGE], engine, clock);
    await prefetch.warm('t1', 's1');
    assert.deepEqual(engine.pulls.map((p) => p.image), [IMAGE], 'the upload began the pull');
    await prefetch.warm('t1', 's1');
    assert.equal(engine.pulls.length, 1, 'a second upload does not pull it again while the first pull is kept');
    const build = new AbortController();
    const pulls = await prefetch.forBuild('t1', 's1', build.signal);
    assert.equal(engine.pulls.length, 1, 'the build took it');
    const taken = engine.pulls[0];
    assert.ok(taken);
    clock.advance(10_000);
    assert.equal(taken.signal.aborted, false, 'taken: no longer stopped at the 10 s');
    taken.done();
    // What the pull left, read right after it, and when it ended.
    assert.deepEqual(await pulls.get(IMAGE), { name: IMAGE, id: `sha256:${IMAGE.length}`, at: clock.now() });
    // Another tenant's build pulls for itself: what one tenant warmed is not another's.
    await prefetch.warm('t1', 's1');
    await prefetch.forBuild('t2', 's2', new AbortController().signal);
    assert.deepEqual(engine.pulls.map((p) => p.image), [IMAGE, IMAGE, IMAGE]);
    build.abort(new Error('the build ended'));
    assert.equal(taken.signal.aborted, true, "a taken pull ends with the build's signal");
    prefetch.close();
  });

  test('a warmed pull no build took is stopped after 10 s and not warmed again for a minute; a build pulls for itself meanwhile', async () => {
    const engine = puller();
    const clock = new ManualClock();
    const prefetch = prefetchOf([IMAGE], engine, clock);
    await prefetch.warm('t1', 's1');
    const warmed = engine.pulls[0];
    assert.ok(warmed);
    clock.advance(9_999);
    assert.equal(warmed.signal.aborted, false);
    clock.advance(1);
    assert.equal(warmed.signal.aborted, true, 'stopped once kept 10 s');
    await prefetch.warm('t1', 's1');
    assert.equal(engine.pulls.length, 1, 'resting: an upload now warms nothing');
    await prefetch.forBuild('t1', 's1', new AbortController().signal);
    assert.equal(engine.pulls.length, 2, 'the build pulled anew');
    assert.equal(engine.pulls[1]?.signal.aborted, false);
    clock.advance(60_000);
    await prefetch.warm('t1', 's1');
    assert.equal(engine.pulls.length, 3, 'warmed again after its minute');
    prefetch.close();
  });

  test("what the tenant may not pull is not warmed, nor more than 3 of a tenant's at once; close stops them and warms nothing more", async () => {
    const engine = puller();
    const clock = new ManualClock();
    // Another tenant's built image in the build registry: refused to this tenant, so never pulled for it.
    const foreign = '127.0.0.1:5999/svc/t2/app:1';
    const prefetch = prefetchOf([foreign, IMAGE], engine, clock, '127.0.0.1:5999');
    await prefetch.warm('t1', 's1');
    assert.deepEqual(engine.pulls.map((p) => p.image), [IMAGE], "not an image of another tenant's builds");

    // One svcd's count: the tenant's three warmed, a fourth image of it waits for its build.
    const images: Record<string, string[]> = { s1: ['127.0.0.1:5999/memory/a:1', '127.0.0.1:5999/memory/b:1', '127.0.0.1:5999/memory/c:1'], s2: ['127.0.0.1:5999/memory/d:1'] };
    const shared = new BaseImagePrefetch({ store: { builds: { lastBaseImages: (_t: string, s: string) => Promise.resolve(JSON.stringify(images[s])) } } as never, runtime: engine, clock, timers: clock, buildRegistry: null, recent: new RecentPulls(clock, 0) });
    await shared.warm('t1', 's1');
    assert.equal(engine.pulls.length, 4, 'three of the tenant');
    await shared.warm('t1', 's2');
    assert.equal(engine.pulls.length, 4, 'the tenant has three warmed already');
    await shared.warm('t2', 's2');
    assert.equal(engine.pulls.length, 5, "another tenant's are its own");

    shared.close();
    assert.ok(engine.pulls.slice(1).every((p) => p.signal.aborted), 'close stops what was warmed');
    await shared.warm('t3', 's2');
    assert.equal(engine.pulls.length, 5, 'closed: nothing more is warmed');
    prefetch.close();
  });
});

describe('connections per client', () => {
  /** A socket as the cap sees one: its peer's address, and its close. */
  const socket = (remoteAddress: string) => Object.assign(new EventEmitter(), { remoteAddress, destroyed: false, destroy() { this.destroyed = true; } }) as unknown as Socket & { destroyed: boolean };

  test('a client is an IPv4 address (also written IPv4-mapped) or an IPv6 /64', () => {
    assert.equal(clientOf('203.0.113.7'), '203.0.113.7');
    assert.equal(clientOf('::ffff:203.0.113.7'), '203.0.113.7');
    assert.equal(clientOf('2001:db8:1:2:aaaa::1'), '2001:db8:1:2::/64');
    assert.equal(clientOf('2001:0db8:0001:0002:ffff:ffff:ffff:ffff'), '2001:db8:1:2::/64', 'another address of the same /64');
    assert.equal(clientOf('2001:db8::1'), '2001:db8:0:0::/64');
    assert.notEqual(clientOf('2001:db8:1:3::1'), clientOf('2001:db8:1:2::1'));
  });

  test('past the cap a connection is refused (and closed within a second); a closed one frees its place; loopback peers are not counted', () => {
    const clock = new ManualClock();
    const cap = new ConnectionCap(2, clock);
    const [a, b, c] = ['2001:db8:1:2::1', '2001:db8:1:2::2', '2001:db8:1:2::3'].map(socket);
    for (const s of [a, b, c]) cap.track(s!);
    assert.equal(cap.refusal(a!), null);
    assert.equal(cap.refusal(b!), null);
    assert.match(cap.refusal(c!)?.message ?? '', /too many open connections from this address \(at most 2\)/, 'the third of one /64');
    assert.equal(c!.destroyed, false);
    clock.advance(1_000);
    assert.equal(c!.destroyed, true, 'closed a second after it came, whatever its client does');
    c!.emit('close');
    const refusedAgain = socket('2001:db8:1:2::5');
    cap.track(refusedAgain);
    assert.notEqual(cap.refusal(refusedAgain), null, "a refused one's close frees no place");
    a!.emit('close');
    const d = socket('2001:db8:1:2::4');
    cap.track(d);
    assert.equal(cap.refusal(d), null, "a closed one's place is free again");
    const ipv4 = ['203.0.113.7', '::ffff:203.0.113.7', '203.0.113.7'].map(socket);
    for (const s of ipv4) cap.track(s);
    assert.deepEqual(ipv4.map((s) => cap.refusal(s) !== null), [false, false, true], 'an IPv4 client, whichever way its address is written');
    for (const address of ['127.0.0.1', '127.0.0.2', '::1', '::ffff:127.0.0.1']) {
      const local = [socket(address), socket(address), socket(address)];
      for (const s of local) cap.track(s);
      assert.ok(local.every((s) => cap.refusal(s) === null), `${address}: a local proxy's connections are not counted`);
    }
  });
});

describe('what images say to run, kept by image ID (ImageCommands)', () => {
  // A stand-in engine: each inspect answered and counted. An image's ID is its content's digest, so
  // the stand-in gives each name an ID of its own.
  const asked: string[] = [];
  const engine = {
    getImage: (name: string) => ({
      inspect: () => {
        asked.push(name);
        const id = name.startsWith('sha256:') ? name : `sha256:${name.replace(/\W/g, '')}`;
        return Promise.resolve({ Id: id, Config: { Entrypoint: null, Cmd: ['serve', id], StopSignal: 'SIGQUIT' } });
      },
    }),
  } as unknown as Docker;

  test("an ID answered is not asked again; a name always is; past the bound the oldest is asked again", async () => {
    asked.length = 0;
    const kept = new ImageCommands(2);
    const a = kept.keep(await engine.getImage('app:1').inspect());
    assert.deepEqual(a, { entrypoint: null, cmd: ['serve', 'sha256:app1'], stopSignal: 'SIGQUIT' });
    assert.deepEqual(await kept.of(engine, 'sha256:app1'), a);
    assert.deepEqual(asked, ['app:1'], 'the ID came from the first answer');
    // A name may move to another image: asked each time.
    await kept.of(engine, 'app:1');
    await kept.of(engine, 'app:1');
    assert.deepEqual(asked, ['app:1', 'app:1', 'app:1']);
    // Two more IDs: the bound is 2, so the first goes.
    await kept.of(engine, 'sha256:b');
    await kept.of(engine, 'sha256:c');
    asked.length = 0;
    await kept.of(engine, 'sha256:c');
    await kept.of(engine, 'sha256:app1');
    assert.deepEqual(asked, ['sha256:app1'], 'the newest kept, the oldest asked again');
  });

  test('a command larger than 16 K (characters, one more a word, and the stop signal) is not kept: asked again each time', async () => {
    const answers: string[] = [];
    const engineOf = (config: { Cmd: string[]; StopSignal?: string }) =>
      ({ getImage: (name: string) => ({ inspect: () => (answers.push(name), Promise.resolve({ Id: name, Config: config })) }) }) as unknown as Docker;
    const kept = new ImageCommands(10);
    // At the bound, kept; one past it (a longer word, an empty word more, a stop signal), asked again.
    const cases: [string, { Cmd: string[]; StopSignal?: string }, number][] = [
      ['sha256:at', { Cmd: ['x'.repeat(16 * 1024 - 1)] }, 1],
      ['sha256:longer', { Cmd: ['x'.repeat(16 * 1024)] }, 2],
      ['sha256:words', { Cmd: Array<string>(16 * 1024 + 1).fill('') }, 2],
      ['sha256:stop', { Cmd: ['x'.repeat(16 * 1024 - 1)], StopSignal: 'Q' }, 2],
    ];
    for (const [id, config, times] of cases) {
      answers.length = 0;
      await kept.of(engineOf(config), id);
      assert.deepEqual((await kept.of(engineOf(config), id)).cmd, config.Cmd);
      assert.equal(answers.length, times, id);
    }
  });
});
