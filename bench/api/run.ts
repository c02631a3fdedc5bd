// bench/api: authenticated GET /v1/tenant and key create+revoke against one svcd process, on
// SQLite and on PostgreSQL. svcd runs pinned to core 0, this load generator (autocannon) to
// core 1. Each figure is the median of several rounds; the unauthenticated liveness route is
// measured in the same run as the baseline (the cost of the HTTP stack alone), so the ratio says
// what authentication, limits and the store add.
//
// The rate limits stay in the product; the benchmark raises them with --dev-rate-limit, which
// exists only with --dev. Run: make bench-api (needs SVC_TEST_PG_URL for the PostgreSQL half).
// --smoke: one round of 1 s per figure on both stores, PostgreSQL required (bench/smoke.ts).
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, readlinkSync, rmSync, writeFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freshPgDatabase } from '../../packages/svcd/test/harness.js';
import { sampleProblems, smokeRequested, smokeVerdict } from '../smoke.js';
import { ROOT, median, spawnSvcd } from '../svcd.js';
import { openLoop, type OpenLoopResult } from './open-loop.js';

interface AutocannonResult {
  requests: { average: number; total: number };
  latency: { p50: number; p99: number; average: number };
  non2xx: number;
  errors: number;
}
type Autocannon = (opts: Record<string, unknown>) => Promise<AutocannonResult>;
// autocannon is CommonJS without type declarations.
const autocannon = createRequire(import.meta.url)('autocannon') as Autocannon;

const SMOKE = smokeRequested();
const ROUNDS = SMOKE ? 1 : Number(process.env.BENCH_ROUNDS ?? 5);
const SECONDS = SMOKE ? 1 : Number(process.env.BENCH_SECONDS ?? 5);
const WARMUP_SECONDS = SMOKE ? 1 : 2;
const CONNECTIONS = 32;
const IDLE_SETTLE_MS = SMOKE ? 1_000 : 3_000;
const PORT = 18_900 + Math.floor(Math.random() * 50);

/** One API call; any status outside 2xx and `alsoOk` aborts the benchmark. */
async function call(method: string, path: string, key?: string, body?: unknown, alsoOk: number[] = []): Promise<Response> {
  const res = await fetch(`http://127.0.0.1:${PORT}${path}`, {
    method,
    headers: { 'content-type': 'application/json', ...(key ? { authorization: `Bearer ${key}` } : {}) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (!res.ok && !alsoOk.includes(res.status)) throw new Error(`${method} ${path}: ${res.status} ${await res.text()}`);
  return res;
}

async function json<T>(method: string, path: string, key?: string, body?: unknown): Promise<T> {
  return (await (await call(method, path, key, body)).json()) as T;
}

interface Figures {
  rps: number;
  p50: number;
  p99: number;
}

async function rounds(opts: Record<string, unknown>, beforeEach?: () => Promise<void>): Promise<Figures> {
  const rps: number[] = [];
  const p50: number[] = [];
  const p99: number[] = [];
  for (let i = 0; i < ROUNDS; i++) {
    await beforeEach?.();
    const { path = '', ...rest } = opts as { path?: string };
    const r = await autocannon({ url: `http://127.0.0.1:${PORT}${path}`, duration: SECONDS, connections: CONNECTIONS, ...rest });
    if (r.non2xx > 0 || r.errors > 0) throw new Error(`round had ${r.non2xx} non-2xx answers and ${r.errors} errors`);
    rps.push(r.requests.average);
    p50.push(r.latency.p50);
    p99.push(r.latency.p99);
  }
  return { rps: median(rps), p50: median(p50), p99: median(p99) };
}

/**
 * Latency at a fixed 1,000 req/s (open loop), median over the rounds, for several routes whose
 * rounds alternate: a pause of the process (a major GC after the saturation rounds, a periodic
 * job) then lands on either route alike instead of on whichever happened to run first.
 */
async function fixedRates(targets: Array<{ path: string; headers: Record<string, string> }>): Promise<Figures[]> {
  const runs: OpenLoopResult[][] = targets.map(() => []);
  for (let i = 0; i < ROUNDS; i++) {
    for (const [k, t] of targets.entries()) {
      const r = await openLoop(`http://127.0.0.1:${PORT}${t.path}`, 1000, SECONDS, t.headers);
      if (r.non2xx > 0) throw new Error(`${t.path}: ${r.non2xx} non-2xx answers at a fixed rate`);
      runs[k]!.push(r);
    }
  }
  return runs.map((rs) => ({ rps: median(rs.map((r) => r.rps)), p50: median(rs.map((r) => r.p50)), p99: median(rs.map((r) => r.p99)) }));
}

/** Resident memory of a process, in MB (bin/svcd execs node: its pid is node's). */
function rssMb(pid: number): number {
  return Math.round(Number(/VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1]) / 1024);
}

async function benchStore(store: 'sqlite' | 'postgres'): Promise<Record<string, Figures | number | string>> {
  const dataDir = mkdtempSync(join(tmpdir(), 'svc-bench-'));
  const pgdb = store === 'postgres' ? await freshPgDatabase() : null; // a throwaway database, as in the tests
  const svcd = await spawnSvcd([
    '--dev', '--open-registration', '--data-dir', dataDir, '--listen', `127.0.0.1:${PORT}`,
    '--log-level', 'warn', '--dev-rate-limit', '1000000:1000000,1000000:1000000',
    ...(pgdb ? ['--database-url', pgdb.url] : []),
  ], 0);
  try {
    const reg = await json<{ api_key: string }>('POST', '/v1/tenants/register', undefined, { name: `bench-${store}`, email: `bench-${store}@x.io` });
    const auth = { authorization: `Bearer ${reg.api_key}` };
    // Memory of the idle process (started, one tenant, no load yet): what a runtime change moves.
    await sleep(IDLE_SETTLE_MS);
    const idleRssMb = rssMb(svcd.proc.pid!);
    // Warm-up: JIT, statement caches, the key cache.
    await autocannon({ url: `http://127.0.0.1:${PORT}/v1/tenant`, duration: WARMUP_SECONDS, connections: CONNECTIONS, headers: auth });

    const baseline = await rounds({ path: '/v1/system/health' });
    const get = await rounds({ path: '/v1/tenant', headers: auth });
    const [fixed, fixedBaseline] = (await fixedRates([
      { path: '/v1/tenant', headers: auth },
      { path: '/v1/system/health', headers: {} },
    ])) as [Figures, Figures];
    // A round ends with up to one created-but-not-revoked key per connection: revoke them before
    // the next round, so the 20-key quota is never reached. A 404 is fine: the round's last
    // revoke of that key was still in flight when autocannon returned and has landed since.
    const mainKeyId = reg.api_key.split('.')[0];
    const revokeLeftovers = async () => {
      const keys = await json<Array<{ id: string }>>('GET', '/v1/auth/keys', reg.api_key);
      for (const k of keys) {
        if (k.id !== mainKeyId) await call('DELETE', `/v1/auth/keys/${k.id}`, reg.api_key, undefined, [404]);
      }
    };
    const keys = await rounds({
      connections: 8,
      headers: { ...auth, 'content-type': 'application/json' },
      requests: [
        {
          method: 'POST',
          path: '/v1/auth/keys',
          body: '{"name":"bench"}',
          onResponse: (_s: number, body: string, ctx: { id?: string }) => {
            ctx.id = (JSON.parse(body) as { id: string }).id;
          },
        },
        {
          method: 'DELETE',
          setupRequest: (req: Record<string, unknown>, ctx: { id?: string }) => ({ ...req, path: `/v1/auth/keys/${ctx.id}` }),
        },
      ],
    }, revokeLeftovers);
    return {
      svcd_node: execFileSync(readlinkSync(`/proc/${svcd.proc.pid!}/exe`), ['-v'], { encoding: 'utf8' }).trim(),
      idle_rss_mb: idleRssMb,
      rss_after_load_mb: rssMb(svcd.proc.pid!),
      baseline_health: baseline,
      get_tenant: get,
      get_tenant_ratio_to_baseline: Math.round((get.rps / baseline.rps) * 100) / 100,
      get_tenant_at_1000_rps: fixed,
      baseline_health_at_1000_rps: fixedBaseline,
      // Each create+revoke pair is two requests.
      key_create_revoke: { ...keys, rps: keys.rps / 2 },
    };
  } finally {
    await svcd.stop();
    await pgdb?.drop();
    rmSync(dataDir, { recursive: true, force: true });
  }
}

const results: Record<string, unknown> = { rounds: ROUNDS, seconds: SECONDS, connections: CONNECTIONS, date: new Date().toISOString() };
// BENCH_STORES=sqlite runs one store only.
const stores = (process.env.BENCH_STORES ?? 'sqlite,postgres').split(',');
const smokeProblems: string[] = [];
for (const store of ['sqlite', 'postgres'] as const) {
  if (!stores.includes(store)) continue;
  if (store === 'postgres' && !process.env.SVC_TEST_PG_URL) {
    process.stderr.write('bench-api: SVC_TEST_PG_URL not set, PostgreSQL skipped\n');
    smokeProblems.push('PostgreSQL skipped: SVC_TEST_PG_URL not set');
    continue;
  }
  process.stderr.write(`bench-api: ${store}...\n`);
  results[store] = await benchStore(store);
}

const fmt = (f: Figures) => `${Math.round(f.rps)} req/s, p50 ${f.p50} ms, p99 ${f.p99} ms`;
for (const store of ['sqlite', 'postgres']) {
  const r = results[store] as Record<string, Figures | number | string> | undefined;
  if (!r) continue;
  console.log(`\n## ${store} (svcd on Node ${r.svcd_node as string}; RSS ${r.idle_rss_mb as number} MB idle, ${r.rss_after_load_mb as number} MB after the load)`);
  console.log(`| measure | median of ${ROUNDS} x ${SECONDS}s |\n|---|---|`);
  console.log(`| GET /v1/system/health (baseline: HTTP stack, no auth, no store) | ${fmt(r.baseline_health as Figures)} |`);
  console.log(`| GET /v1/tenant, ${CONNECTIONS} connections | ${fmt(r.get_tenant as Figures)} (${r.get_tenant_ratio_to_baseline as number} of baseline) |`);
  console.log(`| GET /v1/tenant at a fixed 1,000 req/s (open loop) | ${fmt(r.get_tenant_at_1000_rps as Figures)} |`);
  console.log(`| GET /v1/system/health at a fixed 1,000 req/s (baseline) | ${fmt(r.baseline_health_at_1000_rps as Figures)} |`);
  const k = r.key_create_revoke as Figures;
  console.log(`| key create + revoke, 8 connections | ${Math.round(k.rps)} pairs/s, p50 ${k.p50} ms, p99 ${k.p99} ms per request |`);
}
mkdirSync(join(ROOT, 'bench/results'), { recursive: true });
const out = join(ROOT, 'bench/results', `api-${Date.now()}.json`);
writeFileSync(out, JSON.stringify(results, null, 2));
process.stderr.write(`bench-api: raw figures in ${out}\n`);

if (SMOKE) {
  for (const store of ['sqlite', 'postgres']) {
    const r = results[store] as Record<string, Figures> | undefined;
    if (!r) continue;
    for (const figure of ['baseline_health', 'get_tenant', 'get_tenant_at_1000_rps', 'baseline_health_at_1000_rps', 'key_create_revoke']) {
      smokeProblems.push(...sampleProblems(`${store} ${figure} req/s`, [r[figure]?.rps ?? NaN]));
    }
  }
  smokeVerdict('bench-api', smokeProblems);
}
