// Starts a real svcd (in-process, on a loopback port) for HTTP tests, on either store. Each
// server gets its own data dir or PostgreSQL database, its own clock and its own limiters, so
// test files run in parallel without sharing anything.
import { copyFileSync, existsSync, mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createHash, randomBytes, randomInt } from 'node:crypto';
import { request } from 'node:http';
import { createServer, type AddressInfo } from 'node:net';
import { test } from 'node:test';
import pg from 'pg';
import pino from 'pino';
import { SvcClient, type RequestOptions } from '@svc/client';
import { buildServer, closeDeps, createDeps, startBackground, DEFAULT_DASHBOARD_DIR, DEFAULT_DATABASE_PORTS, DEFAULT_KANBAN_PORTS, DEFAULT_SWARM_PORTS, parsePortRange, DEFAULT_STALLED_READER_S, DEFAULT_CONNECTIONS_PER_CLIENT, DEFAULT_WORKLOAD_LEASE_S, SPEC_RATE_LIMITS, systemClock, systemTimers, type Config, type Deps, type DepsOverrides, type SvcServer } from '../src/index.js';
import { BASE_IMAGE_REUSE_S } from '../src/builds/recent-pulls.js';
import { ManualClock } from './manual-clock.js';
import { SchemaCompilers } from '../src/api/schema-compilers.js';
import { fakeIptables } from './fake-iptables.js';
import { responseValidator, type OpenApiDocument } from './openapi-validator.js';
import { DEFAULT_QUOTAS } from '../src/tenants/tenants.js';
import { DEFAULT_RETENTION } from '../src/retention/rules.js';
import { DEFAULT_LOG_RATE, DEFAULT_TENANT_CPU_WEIGHT, HostFirewall, builtTenantInit } from '../src/runtime/index.js';
import { openStore, type NewTenantRow } from '../src/store/index.js';

export type StoreKind = 'sqlite' | 'postgres';

/** Admin URL of the test PostgreSQL server; `make test` sets it after starting one. */
export const PG_ADMIN_URL = process.env.SVC_TEST_PG_URL;

if (!PG_ADMIN_URL) process.stderr.write('# SVC_TEST_PG_URL is not set: PostgreSQL variants are skipped (make test sets it)\n');

/**
 * Defines a suite's cases once per store: SQLite always, PostgreSQL whenever a server is
 * configured. Without one, PostgreSQL's variant is a skipped test that says why, so that the
 * run's closing counts show it (node:test does not count a skipped describe).
 */
export function eachStore(define: (kind: StoreKind) => void): void {
  define('sqlite');
  if (PG_ADMIN_URL) define('postgres');
  else test('the PostgreSQL variant', { skip: 'SVC_TEST_PG_URL is not set (make test starts a server)' }, () => {});
}

export const DOCKER_HOST = process.env.SVC_TEST_DOCKER_HOST ?? 'unix:///var/run/docker.sock';
export const BOOTSTRAP_TOKEN = 'bootstrap-token-for-tests-0123456789abcdef';
export const ADMIN_TOKEN = 'admin-token-for-tests-0123456789abcdef-xyz';

/** The URL of database `name` on the tests' PostgreSQL server. */
function pgUrl(name: string): string {
  const url = new URL(PG_ADMIN_URL ?? '');
  url.pathname = `/${name}`;
  return url.toString();
}

/**
 * A PostgreSQL database with every migration applied, kept on the tests' server under a name
 * from the migrations' own text, and cloned for each server's store (CREATE DATABASE ...
 * TEMPLATE): migrating took about half of a server's start. Made by the first test process that
 * needs it, under an advisory lock (the lanes of make test start files at once), and published
 * by a rename once migrated; the templates of older migrations are dropped then.
 */
let migratedPg: Promise<string> | null = null;
function migratedPgTemplate(): Promise<string> {
  migratedPg ??= (async () => {
    const dir = new URL('../src/store/migrations/', import.meta.url);
    const hash = createHash('sha256');
    for (const f of readdirSync(dir).sort()) hash.update(f).update(readFileSync(new URL(f, dir)));
    const name = `svc_test_migrated_${hash.digest('hex').slice(0, 16)}`;
    const admin = new pg.Client({ connectionString: PG_ADMIN_URL });
    await admin.connect();
    try {
      await admin.query("SELECT pg_advisory_lock(hashtext('svc_test_migrated'))");
      const exists = await admin.query('SELECT 1 FROM pg_database WHERE datname = $1', [name]);
      if (exists.rowCount === 0) {
        // Older migrations' templates go, unless in use (another checkout's tests at once clone
        // theirs: its drop waits for a clone under way, and one after it makes the template again).
        const stale = await admin.query<{ datname: string }>("SELECT datname FROM pg_database WHERE datname LIKE 'svc\\_test\\_migrated\\_%'");
        for (const { datname } of stale.rows) await admin.query(`DROP DATABASE IF EXISTS "${datname}"`).catch(() => {});
        const building = `${name}_building`;
        await admin.query(`CREATE DATABASE ${building}`);
        const dataDir = mkdtempSync(join(tmpdir(), 'svc-test-pg-'));
        const store = await openStore({ dataDir, databaseUrl: pgUrl(building) });
        await store.close();
        rmSync(dataDir, { recursive: true, force: true });
        await admin.query(`ALTER DATABASE ${building} RENAME TO ${name}`);
      }
    } finally {
      // Ends the session, and its advisory lock with it.
      await admin.end();
    }
    return name;
  })();
  // A failure is not kept: the next server's start tries again.
  migratedPg.catch(() => (migratedPg = null));
  return migratedPg;
}

/** A fresh PostgreSQL database, empty or (`migrated`) a clone of the migrated template; drop() removes it. */
export async function freshPgDatabase(o: { migrated?: boolean } = {}): Promise<{ url: string; drop: () => Promise<void> }> {
  if (!PG_ADMIN_URL) throw new Error('SVC_TEST_PG_URL is not set');
  const name = `svc_test_${randomBytes(6).toString('hex')}`;
  const admin = new pg.Client({ connectionString: PG_ADMIN_URL });
  await admin.connect();
  const clone = async () => admin.query(`CREATE DATABASE ${name} TEMPLATE ${await migratedPgTemplate()}`);
  try {
    if (!o.migrated) await admin.query(`CREATE DATABASE ${name}`);
    else {
      await clone().catch(async (err: unknown) => {
        // The template was dropped since (another checkout's tests, of other migrations): made again.
        if ((err as { code?: string }).code !== '3D000') throw err;
        migratedPg = null;
        await clone();
      });
    }
  } finally {
    await admin.end();
  }
  return {
    url: pgUrl(name),
    drop: async () => {
      const a = new pg.Client({ connectionString: PG_ADMIN_URL });
      await a.connect();
      try {
        for (let attempt = 1; ; attempt++) {
          try {
            await a.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
            return;
          } catch (err) {
            // FORCE may not end an autovacuum worker on the database (42501: it belongs to no
            // role of ours); the worker is gone in a moment, after a suite's mass deletes.
            if ((err as { code?: string }).code !== '42501' || attempt >= 20) throw err;
            await new Promise((r) => setTimeout(r, 250));
          }
        }
      } finally {
        // Always: a client left open keeps the test process from ever exiting.
        await a.end();
      }
    },
  };
}

/**
 * A SQLite store with every migration applied, made once per test process and copied into each
 * server's data dir (migrating took about a tenth of a second of a server's quarter-second start).
 * The migrations themselves run on fresh stores (store.test.ts, and this template's own).
 */
let migratedSqlite: Promise<string> | null = null;
function migratedSqliteFile(): Promise<string> {
  migratedSqlite ??= (async () => {
    const dir = mkdtempSync(join(tmpdir(), 'svc-test-migrated-'));
    process.once('exit', () => rmSync(dir, { recursive: true, force: true }));
    const store = await openStore({ dataDir: dir, databaseUrl: null });
    await store.close();
    return join(dir, 'svc.db');
  })();
  return migratedSqlite;
}

/** Where a store lives: a temp data dir, and for PostgreSQL a fresh database; `migrated`: a copy of one already migrated. */
export async function storeLocation(kind: StoreKind, o: { migrated?: boolean } = {}): Promise<{ dataDir: string; databaseUrl: string | null; cleanup: () => Promise<void> }> {
  const dataDir = mkdtempSync(join(tmpdir(), 'svc-test-'));
  const db = kind === 'postgres' ? await freshPgDatabase(o) : null;
  if (kind === 'sqlite' && o.migrated) {
    const file = await migratedSqliteFile();
    copyFileSync(file, join(dataDir, 'svc.db'));
    if (existsSync(`${file}-wal`)) copyFileSync(`${file}-wal`, join(dataDir, 'svc.db-wal'));
  }
  return {
    dataDir,
    databaseUrl: db?.url ?? null,
    cleanup: async () => {
      await db?.drop();
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

export function testConfig(over: Partial<Config> = {}): Config {
  return {
    listen: { host: '127.0.0.1', port: 0 },
    stalledReaderMs: DEFAULT_STALLED_READER_S * 1000,
    connectionsPerClient: DEFAULT_CONNECTIONS_PER_CLIENT,
    workloadLeaseMs: DEFAULT_WORKLOAD_LEASE_S * 1000,
    dataDir: '',
    databaseUrl: null,
    baseDomain: null,
    proxyListen: null,
    caddyAdmin: null,
    proxyAnswersListen: { host: '127.0.0.1', port: 0 },
    tls: null,
    dnsServers: null,
    dev: true,
    openRegistration: true,
    sandbox: 'auto',
    dockerHost: DOCKER_HOST,
    runtime: 'docker',
    swarmNodes: {},
    engineTls: {},
    swarmPorts: { from: 30000, to: 32767 },
    swarmHelperImage: 'busybox:1.36',
    swarmPublishedFrom: [],
    bootstrapTokens: [],
    adminTokens: [],
    masterKey: null,
    logLevel: 'silent',
    allowLoopbackGit: true,
    buildRegistry: null,
    baseImageReuseSeconds: BASE_IMAGE_REUSE_S,
    databaseImages: { postgres: 'svc-test/postgres:15', redis: 'svc-test/redis:7' },
    databasePorts: { from: 22000, to: 22999 },
    kanbanImage: 'svc-test/node:18',
    dashboardDir: DEFAULT_DASHBOARD_DIR,
    kanbanPorts: { from: 7100, to: 9100 },
    kanbanAddress: '127.0.0.1',
    environmentImages: { default: 'svc-test/env-default:1', node: 'svc-test/env-node:1', python: 'svc-test/env-python:1', go: 'svc-test/env-go:1' },
    environmentWarmPool: 0,
    environmentWarmReserve: 10,
    gitCaFile: null,
    metricsListen: null,
    egressAllow: [],
    tenantCpuWeight: DEFAULT_TENANT_CPU_WEIGHT,
    tenantInit: { binary: builtTenantInit(), rate: DEFAULT_LOG_RATE },
    meteringDatabaseUrl: null,
    meteringIntervalMs: 30_000,
    meteringRetentionDays: 90,
    retention: DEFAULT_RETENTION,
    scratch: { dir: '/var/tmp/svc-scratch-tests', budgetBytes: 8 * 1024 ** 3 },
    rateLimits: SPEC_RATE_LIMITS,
    ...over,
  };
}

export interface TestServer {
  url: string;
  /** A client without credentials (register with it, or use .withKey). */
  client: SvcClient;
  deps: Deps;
  clock: ManualClock;
  server: SvcServer;
  close(): Promise<void>;
}

export interface StartOptions {
  store?: StoreKind;
  config?: Partial<Config>;
  overrides?: DepsOverrides;
  /** Where svcd's log lines go (an array for audit assertions; anything with push to watch them as they come). */
  logLines?: { push(line: string): unknown };
  /**
   * Real clock and timers, for tests that wait on the engine (deploys poll it). The manual clock
   * still exists, but moving it changes nothing.
   */
  realTime?: boolean;
  /** Where the API listens (default 127.0.0.1). */
  listenHost?: string;
}

/** Every server of a test file compiles its route schemas once (schema-compilers.ts). */
const schemaCompilers = new SchemaCompilers();

export async function startServer(o: StartOptions = {}): Promise<TestServer> {
  const loc = await storeLocation(o.store ?? 'sqlite', { migrated: true });
  const clock = new ManualClock();
  // A svcd on a stand-in runtime starts no container: the machine's iptables rules and tenant CPU
  // groups are the engine tests' (isolation.test.ts takes a rule away and expects health to
  // miss it), and make test runs the stand-in files beside them. Its rules go to iptables in
  // memory, and it places nothing in groups; a test may still give it either.
  const standIn = o.overrides?.runtime !== undefined;
  const config = testConfig({ dataDir: loc.dataDir, databaseUrl: loc.databaseUrl, ...(standIn ? { tenantCpuWeight: null } : {}), ...o.config });
  const lines = o.logLines;
  const log = lines
    ? pino({ level: 'info' }, { write: (s: string) => void lines.push(s) })
    : pino({ level: 'silent' });
  const time = o.realTime ? { clock: systemClock, timers: systemTimers } : { clock, timers: clock };
  const standInFirewall = standIn ? { hostFirewall: new HostFirewall({ allow: config.egressAllow, owner: '0000000000000000', iptables: fakeIptables().fake }) } : {};
  // With no proxy on the store, a rolling redeploy has no route to wait out (and the manual clock
  // would hold the wait until a test moved it); a test of two svcd on one store passes its own.
  const followNothing = config.proxyListen === null ? { routeFollowMs: 0 } : {};
  const deps = await createDeps(config, { ...time, log, ...standInFirewall, ...followNothing, ...o.overrides }).catch(async (err: unknown) => {
    await loc.cleanup();
    throw err;
  });
  const server = await buildServer(deps, { schemaCompilers });
  const listenHost = o.listenHost ?? '127.0.0.1';
  let port = 0;
  try {
    await server.listen({ host: listenHost, port: 0 });
    port = (server.server.address() as AddressInfo).port;
    await startBackground(deps, { address: listenHost, port });
  } catch (err) {
    // A start that failed half-way closes what it opened (its listener, the store's pool, Caddy):
    // left open they would keep the test file's process alive after its tests.
    await server.close().catch(() => {});
    await closeDeps(deps).catch(() => {});
    await loc.cleanup().catch(() => {});
    throw err;
  }
  const address = `http://127.0.0.1:${port}`;
  return {
    url: address,
    // Every answer its clients see is checked against the OpenAPI document.
    client: new SvcClient({ baseUrl: address, observe: responseValidator(server.swagger() as OpenApiDocument) }),
    deps,
    clock,
    server,
    close: async () => {
      await server.close();
      await closeDeps(deps);
      await loc.cleanup();
    },
  };
}

let counter = 0;

/**
 * POST /v1/tenants/register without tripping the registration limiter (20 an hour overall,
 * 5 per client IP): the clock moves on by one refill interval (3 min) and each call comes from
 * its own X-Real-Ip. Tests of the limiter itself call the route directly instead.
 */
export async function registerRaw<T = unknown>(t: TestServer, body: unknown, headers: Record<string, string> = {}) {
  return limitedRaw<T>(t, 'POST', '/v1/tenants/register', { body, headers });
}

/** Any registration-limited route (register, recover, reactivate, quota patch, validate), the same way. */
export async function limitedRaw<T = unknown>(t: TestServer, method: string, path: string, o: RequestOptions = {}) {
  counter += 1;
  t.clock.advance(180_000);
  return t.client.raw<T>(method, path, {
    ...o,
    auth: false,
    headers: { 'x-real-ip': `10.99.${(counter >> 8) & 255}.${counter & 255}`, ...o.headers },
  });
}

/** A registered tenant and a client holding its key. */
export async function newTenant(t: TestServer, name?: string): Promise<{ id: string; key: string; client: SvcClient }> {
  const n = name ?? `tenant-${counter}-${randomBytes(3).toString('hex')}`;
  const headers: Record<string, string> = t.client.bootstrapToken ? { 'x-bootstrap-token': t.client.bootstrapToken } : {};
  const r = await registerRaw<{ tenant_id: string; api_key: string; error?: string }>(t, { name: n, email: `${n}@example.com` }, headers);
  if (r.status !== 201) throw new Error(`register failed: ${r.status} ${r.text}`);
  return { id: r.body.tenant_id, key: r.body.api_key, client: t.client.withKey(r.body.api_key) };
}

/**
 * The plan of a tenant whose workloads start PostgreSQL: one service. Each workload's CPU is the
 * tenant's quota divided by max_services (workloadLimits), so the default plan's five give a
 * database 0.4 cores, and PostgreSQL's initdb under gVisor (ptrace, CPU-bound) took 23 s at 0.4
 * here against 7 s at the whole two. These tests are about databases, not CPU shares (those are
 * cpu-fairness.test.ts's); the wait was the largest part of their time in CI.
 */
export const DATABASE_TEST_PLAN = { max_services: 1 } as const;

/**
 * DATABASE_TEST_PLAN for a tenant of an in-process svcd (through the domain: its cache follows);
 * `services` for a test that also runs services (two: a core each).
 */
export async function databaseTestPlan(t: TestServer, tenantId: string, services: number = DATABASE_TEST_PLAN.max_services): Promise<void> {
  await t.deps.tenants.patchQuotas(tenantId, { max_services: services });
}

/**
 * A tenant row with the default quotas, for seeding a store directly. Without the quota columns
 * later migrations added with a default (max_domains_per_service): the migration tests seed
 * stores migrated only that far.
 */
export function tenantRow(id: string, name: string, over: Partial<NewTenantRow> = {}): NewTenantRow {
  // eslint-disable-next-line @typescript-eslint/no-unused-vars -- left out (above)
  const { max_domains_per_service, ...quotas } = DEFAULT_QUOTAS;
  return {
    id,
    name,
    name_key: name.toLowerCase(),
    email: `${name}@x.io`,
    email_key: `${name.toLowerCase()}@x.io`,
    status: 'active',
    created_at: 1_800_000_000,
    updated_at: 1_800_000_000,
    ...quotas,
    ...over,
  };
}

/**
 * A port free on loopback now, for a listener the test names itself (a proxy's, a front's).
 * Taken from below the kernel's ephemeral range: a port the kernel gave out for `listen(0)` and
 * took back would be given out again, and a svcd started next (its API on port 0) once got the
 * very port its test had picked for Caddy, which then could not listen. Never the same port twice
 * in one process; the ephemeral way where that range leaves too little room below it. Never in
 * svcd's own default ranges either: a test's `--kanban-ports P-P` inside the databases' range is
 * refused at start (CI once failed on it), and a port given to a test's listener there could be
 * the one svcd picks next for a database. Nor in the ranges tests name themselves (the two lanes
 * of make test run at once, each with its own set of ports handed out).
 */
export async function freePort(): Promise<number> {
  const [low] = readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/).map(Number);
  const top = (low ?? 0) - 1;
  const bottom = Math.max(10_000, top - 12_000);
  for (let tries = 0; top - bottom >= 1_000 && tries < 200; tries++) {
    const port = bottom + randomInt(top - bottom + 1);
    if (portsHandedOut.has(port) || reserved(port) || !(await bindable(port))) continue;
    portsHandedOut.add(port);
    return port;
  }
  // The kernel's pick, under the same rules (its range may reach into svcd's).
  for (let tries = 0; ; tries++) {
    const port = await new Promise<number>((res) => {
      const srv = createServer().listen(0, '127.0.0.1', () => {
        const picked = (srv.address() as { port: number }).port;
        srv.close(() => res(picked));
      });
    });
    if ((!portsHandedOut.has(port) && !reserved(port)) || tries >= 200) {
      portsHandedOut.add(port);
      return port;
    }
  }
}

const portsHandedOut = new Set<number>();

/**
 * Where the tests name ports of their own: testConfig's databases (22000-22999), databases.test
 * (23000-23099), two-svcd.test (23100-23199), the memory driver's published ports in
 * deploys-memory and environments-memory (23900-23999, bound for real, in the lane beside the
 * engine's), bench/db (24000-24099).
 */
const TESTS_OWN_PORTS = '22000-24999';

const RESERVED_PORT_RANGES = [DEFAULT_DATABASE_PORTS, DEFAULT_KANBAN_PORTS, DEFAULT_SWARM_PORTS, TESTS_OWN_PORTS].map((range) => parsePortRange('', range));

function reserved(port: number): boolean {
  return RESERVED_PORT_RANGES.some((range) => port >= range.from && port <= range.to);
}

function bindable(port: number): Promise<boolean> {
  return new Promise((res) => {
    const srv = createServer();
    srv.once('error', () => res(false));
    srv.listen(port, '127.0.0.1', () => srv.close(() => res(true)));
  });
}

/** Polls until fn gives a value (errors count as not yet), or fails after ms, with what the last try met. */
export async function waitFor<T>(what: string, fn: () => Promise<T | undefined | false>, ms = 30_000): Promise<T> {
  const until = Date.now() + ms;
  let last = 'its last try answered not yet';
  // Tries soon at first (in-memory work ends in milliseconds), then every 100 ms at most (work on
  // the engine takes seconds, and a try is a request to svcd or the engine).
  for (let pauseMs = 2; ; pauseMs = Math.min(pauseMs * 2, 100)) {
    const v = await fn().catch((err: unknown) => {
      last = `its last try failed: ${err instanceof Error ? err.message : String(err)}`;
      return undefined;
    });
    if (v !== undefined && v !== false) return v;
    if (Date.now() > until) throw new Error(`timed out waiting for ${what} (${last})`);
    last = 'its last try answered not yet';
    await new Promise((r) => setTimeout(r, pauseMs));
  }
}

/** A request through the public proxy with the given Host (what a browser sends for the url). */
export function viaProxy(port: number, host: string, path = '/'): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, path, headers: { host }, agent: false, timeout: 10_000 }, (res) => {
      let body = '';
      res.on('data', (d: Buffer) => (body += d.toString()));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on('timeout', () => req.destroy(new Error('proxy timed out')));
    req.on('error', reject);
    req.end();
  });
}
