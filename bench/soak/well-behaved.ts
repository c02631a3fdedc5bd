// The well-behaved tenants of the soak run: their workloads (made once, at setup) and their load,
// open-loop at a fixed rate per tenant, so that slow answers do not lower what is asked of svcd:
// each latency is measured from the moment the request was due.
import { setTimeout as sleep } from 'node:timers/promises';
import { ApiError, type SvcClient } from '../../packages/client/src/index.js';
import { existsSync } from 'node:fs';
import { TEST_REGISTRY, buildImage, docker, finished, httpdImageFiles, imagePresent } from '../../packages/svcd/test/images.js';
import type { Observations, Slice } from './observations.js';

/** Past this a request counts as unanswered (status 0), with this long as its latency. */
const REQUEST_TIMEOUT_MS = 30_000;
/** The command's own limit: below REQUEST_TIMEOUT_MS, so a slow exec is svcd's answer, not our abort. */
const EXEC_TIMEOUT_S = 20;
/** The scheduler's tick: due requests are sent within this of their time. */
const TICK_MS = 5;
/** Services and environments made at once during setup: 2 cores start gVisor sandboxes slowly. */
const SETUP_CONCURRENCY = 4;
/** Environments outlive any run: the lease reaper must not stop them mid-run. */
const ENVIRONMENT_LEASE_S = 6 * 3600;

/**
 * The well-behaved tenants' service: the tests' BUSYBOX_IMAGE without its crash watch. That
 * image's PID 1 checks for /tmp/crash ten times a second (`sleep 0.1` in a loop), which under
 * gVisor costs about a tenth of a core per container: 16 of them took most of this machine's two
 * cores before svcd had any. This one is busybox httpd alone (PID 1, idle until asked), with the
 * same /cgi-bin/log that prints its query string to the container's output.
 */
export const SERVICE_IMAGE = `${TEST_REGISTRY}/svc-test/soak-httpd:1`;

/** Builds SERVICE_IMAGE once per machine and pushes it to the tests' registry (svc pulls what it runs). */
export async function ensureServiceImage(): Promise<void> {
  if (!(await imagePresent(SERVICE_IMAGE))) {
    if (!existsSync('/bin/busybox')) throw new Error("/bin/busybox is missing: install Debian's busybox-static (make bench-soak does)");
    await buildImage(
      SERVICE_IMAGE,
      httpdImageFiles({
        index: 'soak\n',
        files: {
          // CRLF after the CGI header, as Node's HTTP parser insists.
          'www/cgi-bin/log': {
            body: ['#!/bin/sh', "printf 'Content-Type: text/plain\\r\\n\\r\\n'", 'echo "log: $QUERY_STRING" > /proc/1/fd/1', 'echo logged', ''].join('\n'),
            mode: 0o755,
          },
        },
      }),
    );
  }
  // Every run: cheap when the registry has the layers, and right when it was wiped.
  await finished(await docker.getImage(SERVICE_IMAGE).push({ authconfig: {} }));
}

export interface WellBehavedTenant {
  name: string;
  tenantId: string;
  client: SvcClient;
  /** Its one running service (SERVICE_IMAGE); null for a tenant without workloads. */
  serviceId: string | null;
  /** The environment it runs `echo ok` in, for the exec tenants. */
  environmentId: string | null;
  /** Whether it keeps a followed log open with a slow reader. */
  follows: boolean;
}

export interface Roles {
  /** Tenants with a running service (the first ones); the rest have no workload. */
  withService: number;
  /** Of those, how many also run `echo ok` in an environment every few seconds. */
  exec: number;
  /** Of those, how many keep a followed log open with a slow reader (others than the exec ones when there are enough). */
  followers: number;
}

/** What a request kind does; `one` and `write` differ between tenants with a service and without. */
type RequestKind = 'list' | 'one' | 'usage' | 'activity' | 'write';
/** 20 requests a tenant cycles through: mostly reads, a tenth writes (the mix of a dashboard and a CI job). */
const MIX: RequestKind[] = [
  'list', 'one', 'usage', 'list', 'activity', 'one', 'list', 'usage', 'one', 'write',
  'list', 'activity', 'usage', 'one', 'list', 'activity', 'usage', 'one', 'list', 'write',
];

async function inBatches<T>(items: T[], size: number, fn: (item: T) => Promise<void>): Promise<void> {
  for (let i = 0; i < items.length; i += size) await Promise.all(items.slice(i, i + size).map(fn));
}

/** Until the service runs (or `signal` gives up); a deploy that fails throws. */
export async function serviceRunning(client: SvcClient, serviceId: string, timeoutMs = 120_000, signal?: AbortSignal): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const s = await client.service(serviceId);
    if (s.status === 'running') return;
    if (s.status === 'failed' || s.status === 'crashed') throw new Error(`service ${serviceId} is ${s.status}: ${s.last_error ?? ''}`);
    if (Date.now() > deadline) throw new Error(`service ${serviceId} still ${s.status} after ${timeoutMs / 1000} s`);
    await sleep(250, undefined, { signal });
  }
}

/** Gives the tenants their roles and workloads: one running service each for the first ones, an environment for the exec ones. */
export async function provisionWorkloads(tenants: WellBehavedTenant[], roles: Roles): Promise<void> {
  const withService = tenants.slice(0, roles.withService);
  withService.slice(0, roles.exec).forEach((t) => (t.environmentId = ''));
  const followerPool = withService.length - roles.exec >= roles.followers ? withService.slice(roles.exec) : withService;
  followerPool.slice(0, roles.followers).forEach((t) => (t.follows = true));
  await inBatches(withService, SETUP_CONCURRENCY, async (t) => {
    const s = await t.client.createService({ name: 'web', image: SERVICE_IMAGE, port: 8000 });
    await serviceRunning(t.client, s.id);
    t.serviceId = s.id;
  });
  await inBatches(withService.filter((t) => t.environmentId !== null), SETUP_CONCURRENCY, async (t) => {
    const env = await t.client.createEnvironment({ name: 'work', template_id: 'default', lease_duration_seconds: ENVIRONMENT_LEASE_S });
    t.environmentId = env.id;
  });
}

export interface LoadReport {
  /** Bytes the slow readers took from their followed logs, and how many streams they opened. */
  followedBytes: number;
  followStreams: number;
  /** Requests to the followed services that made them print a line (null: the services were not reachable from here). */
  pokes: { ok: number; failed: number } | null;
}

interface TenantSchedule {
  tenant: WellBehavedTenant;
  nextDue: number;
  nextExec: number;
  position: number;
  writes: number;
}

/**
 * Starts the load: every tenant asks `requestsPerSecond` from MIX, the exec tenants run `echo ok`
 * every `execEveryMs`, the followers hold a followed log (re-opened every `followHoldMs`) and read
 * a little of it each second. `stop` ends it and waits for what is in flight.
 */
export function startWellBehavedLoad(
  tenants: WellBehavedTenant[],
  obs: Observations,
  opts: { requestsPerSecond: number; execEveryMs: number; followHoldMs: number },
): { stop(): Promise<LoadReport> } {
  const inFlight = new Set<Promise<void>>();
  const track = (work: Promise<void>) => {
    inFlight.add(work);
    void work.finally(() => inFlight.delete(work));
  };
  const intervalMs = 1000 / opts.requestsPerSecond;
  const start = performance.now();
  // Random phases spread the tenants' requests evenly over each interval.
  const schedules: TenantSchedule[] = tenants.map((tenant) => ({
    tenant,
    nextDue: start + Math.random() * intervalMs,
    nextExec: tenant.environmentId ? start + Math.random() * opts.execEveryMs : Infinity,
    position: Math.floor(Math.random() * MIX.length),
    writes: 0,
  }));
  const tick = setInterval(() => {
    const now = performance.now();
    for (const s of schedules) {
      while (s.nextDue <= now) {
        track(request(s, s.nextDue, obs.current, obs));
        s.nextDue += intervalMs;
      }
      while (s.nextExec <= now) {
        track(execEcho(s.tenant, s.nextExec, obs.current, obs));
        s.nextExec += opts.execEveryMs;
      }
    }
  }, TICK_MS);

  const stopFollowing = new AbortController();
  const report: LoadReport = { followedBytes: 0, followStreams: 0, pokes: null };
  const followers = tenants
    .filter((t) => t.follows)
    .map((t) =>
      followSlowly(t, obs, opts.followHoldMs, stopFollowing.signal, report).catch((err: unknown) =>
        obs.answer('well-behaved', 'GET /v1/services/{id}/logs?follow=true', 0, `${t.name}: the slow reader stopped: ${failure(err)}`, null, null, false),
      ),
    );

  return {
    async stop() {
      clearInterval(tick);
      stopFollowing.abort();
      await Promise.allSettled([...inFlight, ...followers]);
      return report;
    },
  };
}

/** fetch's "fetch failed" says nothing: the cause (ECONNRESET, a timeout, ...) does. */
export function failure(err: unknown): string {
  const e = err as Error & { cause?: { code?: string; message?: string } };
  return e.cause ? `${e.message}: ${e.cause.code ?? e.cause.message ?? ''}` : e.message;
}

/** One request, recorded; never rejects. `expected` says which answers are right for it. */
async function timed(
  obs: Observations,
  t: WellBehavedTenant,
  route: string,
  dueAt: number,
  slice: Slice | null,
  send: (signal: AbortSignal) => Promise<{ status: number; text: string; body: unknown }>,
  expected: (status: number, body: unknown) => boolean = (status) => status >= 200 && status < 300,
): Promise<{ status: number; body: unknown } | null> {
  try {
    const r = await send(AbortSignal.timeout(REQUEST_TIMEOUT_MS));
    obs.answer('well-behaved', route, r.status, r.text, performance.now() - dueAt, slice, expected(r.status, r.body));
    return r;
  } catch (err) {
    obs.answer('well-behaved', route, 0, `${t.name}: ${failure(err)}`, performance.now() - dueAt, slice, false);
    return null;
  }
}

async function request(s: TenantSchedule, dueAt: number, slice: Slice | null, obs: Observations): Promise<void> {
  const t = s.tenant;
  const kind = MIX[s.position++ % MIX.length]!;
  const c = t.client;
  const get = (route: string, path: string) => timed(obs, t, route, dueAt, slice, (signal) => c.raw('GET', path, { signal }));
  switch (kind) {
    case 'list':
      await get('GET /v1/services', '/v1/services');
      return;
    case 'one':
      if (t.serviceId) await get('GET /v1/services/{id}', `/v1/services/${t.serviceId}`);
      else await get('GET /v1/tenant', '/v1/tenant');
      return;
    case 'usage':
      await get('GET /v1/tenant/usage', '/v1/tenant/usage');
      return;
    case 'activity':
      await get('GET /v1/activity', '/v1/activity');
      return;
    case 'write':
      await write(s, dueAt, slice, obs);
      return;
  }
}

/**
 * A pair of writes, the second sent as soon as the first is answered (its latency counts from
 * then): a tenant with a service sets an env var and removes it, or every third time saves a
 * snapshot and deletes it; one without a service creates an API key and revokes it.
 */
async function write(s: TenantSchedule, dueAt: number, slice: Slice | null, obs: Observations): Promise<void> {
  const t = s.tenant;
  const c = t.client;
  const snapshot = s.writes++ % 3 === 2;
  if (!t.serviceId) {
    const created = await timed(obs, t, 'POST /v1/auth/keys', dueAt, slice, (signal) => c.raw('POST', '/v1/auth/keys', { body: { name: 'soak' }, signal }));
    const id = (created?.body as { id?: string } | undefined)?.id;
    if (created?.status === 201 && id) await timed(obs, t, 'DELETE /v1/auth/keys/{id}', performance.now(), slice, (signal) => c.raw('DELETE', `/v1/auth/keys/${id}`, { signal }));
  } else if (!snapshot) {
    // A name of its own per pair: after a stall two pairs of a tenant may be in flight at once.
    const key = `SOAK_VAR_${s.writes}`;
    const set = await timed(obs, t, 'POST /v1/services/{id}/env', dueAt, slice, (signal) => c.raw('POST', `/v1/services/${t.serviceId}/env`, { body: { [key]: 'on' }, signal }));
    if (set?.status === 200) await timed(obs, t, 'DELETE /v1/services/{id}/env/{key}', performance.now(), slice, (signal) => c.raw('DELETE', `/v1/services/${t.serviceId}/env/${key}`, { signal }));
  } else {
    const created = await timed(obs, t, 'POST /v1/services/{id}/snapshots', dueAt, slice, (signal) =>
      c.raw('POST', `/v1/services/${t.serviceId}/snapshots`, { body: { name: `soak-${s.writes}` }, signal }),
    );
    const id = (created?.body as { id?: string } | undefined)?.id;
    if (created?.status === 201 && id) await timed(obs, t, 'DELETE /v1/snapshots/{id}', performance.now(), slice, (signal) => c.raw('DELETE', `/v1/snapshots/${id}`, { signal }));
  }
}

async function execEcho(t: WellBehavedTenant, dueAt: number, slice: Slice | null, obs: Observations): Promise<void> {
  await timed(
    obs,
    t,
    'POST /v1/environments/{id}/exec',
    dueAt,
    slice,
    (signal) => t.client.raw('POST', `/v1/environments/${t.environmentId}/exec`, { body: { command: ['echo', 'ok'], timeout: EXEC_TIMEOUT_S }, signal }),
    (status, body) => status === 200 && (body as { exit_code?: number; stdout?: string }).exit_code === 0 && (body as { stdout?: string }).stdout === 'ok\n',
  );
}

/**
 * Where a request makes the tenant's busybox service print a line (its /cgi-bin/log writes to
 * PID 1's stdout), so that the slow reader has something to read; null when the container's
 * address does not answer from here.
 */
async function pokeTarget(t: WellBehavedTenant): Promise<string | null> {
  for (let attempt = 0; attempt < 3; attempt++) {
    try {
      // The engine's answer, with the networks optional as it may leave them out (dockerode's types do not).
      const info: { NetworkSettings: { Networks?: Record<string, { IPAddress?: string }> | null } } = await docker.getContainer(`svc-${t.serviceId}`).inspect();
      const ip = Object.values(info.NetworkSettings.Networks ?? {}).map((n) => n.IPAddress).find((a) => a);
      if (!ip) return null;
      const res = await fetch(`http://${ip}:8000/cgi-bin/log?soak-probe`, { signal: AbortSignal.timeout(5_000) });
      await res.text();
      if (res.ok) return `http://${ip}:8000/cgi-bin/log?soak-`;
    } catch {
      // tried again below
    }
    await sleep(1_000);
  }
  return null;
}

/**
 * A followed log read slowly: opened (its latency is the time to the answer's headers), then one
 * read a second while the service is made to print a line a second, for `holdMs`; then closed and
 * opened again, so the open and the release of the tenant's slot are exercised all run long.
 */
async function followSlowly(t: WellBehavedTenant, obs: Observations, holdMs: number, stop: AbortSignal, report: LoadReport): Promise<void> {
  const target = await pokeTarget(t);
  if (target) report.pokes ??= { ok: 0, failed: 0 };
  let line = 0;
  // Read anew at each use: `stop` fires during the awaits, which TypeScript's narrowing of
  // `stop.aborted` (false after the first check) does not see.
  const aborted = () => stop.aborted;
  while (!aborted()) {
    const dueAt = performance.now();
    const slice = obs.current;
    const stream = new AbortController();
    const abortStream = () => stream.abort();
    stop.addEventListener('abort', abortStream);
    try {
      let body: ReadableStream<Uint8Array>;
      // The timeout is for the answer's headers only: the body is meant to stay open.
      const late = setTimeout(() => stream.abort(new Error(`no answer in ${REQUEST_TIMEOUT_MS / 1000} s`)), REQUEST_TIMEOUT_MS);
      try {
        body = await t.client.followServiceLogs(t.serviceId!, 10, stream.signal);
      } catch (err) {
        if (aborted()) return;
        const status = err instanceof ApiError ? err.status : 0;
        obs.answer('well-behaved', 'GET /v1/services/{id}/logs?follow=true', status, `${t.name}: ${failure(err)}`, performance.now() - dueAt, slice, false);
        await sleep(1_000, undefined, { signal: stop }).catch(() => {});
        continue;
      } finally {
        clearTimeout(late);
      }
      obs.answer('well-behaved', 'GET /v1/services/{id}/logs?follow=true', 200, '', performance.now() - dueAt, slice);
      report.followStreams++;
      const reader = body.getReader();
      // One read outstanding at a time; each second takes what it gave, if anything.
      // A read cut by the stream's abort counts as the end (and must not reject unhandled).
      let pending: { done: boolean; bytes: number } | null = null;
      const readNext = () =>
        reader.read().then(
          (r) => void (pending = { done: r.done, bytes: r.value?.length ?? 0 }),
          () => void (pending = { done: true, bytes: 0 }),
        );
      let reading = readNext();
      const until = performance.now() + holdMs;
      while (!aborted() && performance.now() < until) {
        await sleep(1_000, undefined, { signal: stop }).catch(() => {});
        if (target && report.pokes) {
          const ok = await fetch(`${target}${t.name}-${++line}`, { signal: AbortSignal.timeout(2_000) })
            .then((r) => r.text().then(() => r.ok))
            .catch(() => false);
          if (ok) report.pokes.ok++;
          else report.pokes.failed++;
        }
        const got = pending as { done: boolean; bytes: number } | null;
        if (!got) continue;
        if (got.done) break;
        report.followedBytes += got.bytes;
        pending = null;
        reading = readNext();
      }
      stream.abort();
      await reading;
    } finally {
      stop.removeEventListener('abort', abortStream);
    }
  }
}
