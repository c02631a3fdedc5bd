// A service's health check (beyond the spec): how its deploys tell that it is ready. The default
// is the driver's own probe, a TCP connect to the service's port; an HTTP check asks a path on
// that port. Stored as JSON on the service and on its snapshots (null: the default).
import { request } from 'node:http';
import type { HealthCheck } from '@svc/contract';
import { ValidationError } from '../errors.js';
import { ProbeAnsweredError, type Readiness } from '../runtime/index.js';

/** A connect is cheap: a long pause is time the first request waits for nothing. */
const TCP_EVERY_MS = 25;
/**
 * For the first second after the container runs, every 5 ms (a refused connect costs svcd and
 * the container next to nothing): a small server under gVisor listens 50-100 ms after its start,
 * and with probes 25 ms apart a deploy waited half that pause, 12 ms, after it listened (bench/deploy, README).
 */
const TCP_EAGER = { everyMs: 5, forMs: 1_000 };
/** The ready wait's bound on one try of the default probe (which gives up on its own after 1 s). */
const TCP_PROBE_TIMEOUT_MS = 2_000;
/** A health route is the tenant's code: asked again a quarter second after each answer at most. */
const HTTP_EVERY_MS = 250;
/** One try's whole time, connect to headers: a health route may be slow on a cold start (a first database connection). */
const HTTP_PROBE_TIMEOUT_MS = 5_000;
/** The status line and headers read of the tenant's answer at most (Node's default, fixed here). */
const HTTP_HEADERS_MAX_BYTES = 16 * 1024;

export const DEFAULT_HEALTH_CHECK: HealthCheck = { type: 'tcp' };

/**
 * The check as the store keeps it (null for the default), once its fields agree: the schema
 * checked each field, not that an http check has a path and a tcp one none.
 */
export function storedHealthCheck(check: HealthCheck | undefined): string | null {
  if (check === undefined) return null;
  if (check.type === 'tcp') {
    if (check.path !== undefined) throw new ValidationError('body: health_check: a tcp check takes no path');
    return null;
  }
  if (check.path === undefined) throw new ValidationError('body: health_check: an http check needs a path, such as "/healthz"');
  return JSON.stringify({ type: 'http', path: check.path });
}

/**
 * The stored form read back. Only svcd writes it; a shape this svcd does not know (a newer
 * svcd's, during an upgrade) is an error, not a quiet fall back to a weaker check.
 */
export function healthCheckOf(stored: string | null): HealthCheck {
  if (stored === null) return DEFAULT_HEALTH_CHECK;
  const parsed = JSON.parse(stored) as { type?: unknown; path?: unknown };
  if (parsed.type === 'http' && typeof parsed.path === 'string') return { type: 'http', path: parsed.path };
  throw new Error(`a health check this svcd does not know: ${stored.slice(0, 300)}`);
}

/** A deploy's readiness: running, then its check passing, until `timeoutMs`. */
export function readinessOf(check: HealthCheck, timeoutMs: number): Readiness {
  if (check.type === 'tcp' || check.path === undefined) return { timeoutMs, everyMs: TCP_EVERY_MS, eager: TCP_EAGER, probeTimeoutMs: TCP_PROBE_TIMEOUT_MS };
  const path = check.path;
  return {
    timeoutMs,
    everyMs: HTTP_EVERY_MS,
    // The try ends itself at HTTP_PROBE_TIMEOUT_MS (its socket destroyed); the wait's own bound comes after.
    probeTimeoutMs: HTTP_PROBE_TIMEOUT_MS + 500,
    probe: (endpoint, timers) =>
      new Promise<void>((resolve, reject) => {
        const fail = (why: string) => reject(new Error(`health check GET ${path}: ${why}`));
        if (endpoint.port === null) {
          fail('the service has no port');
          return;
        }
        // A connection of its own, closed at the status line and headers: the body is never read.
        const req = request(
          { host: endpoint.host, port: endpoint.port, path, method: 'GET', agent: false, maxHeaderSize: HTTP_HEADERS_MAX_BYTES, insecureHTTPParser: false, headers: { 'user-agent': 'svc-health-check', connection: 'close' } },
          (res) => {
            const status = res.statusCode ?? 0;
            req.destroy();
            if (status >= 200 && status < 400) resolve();
            else reject(new ProbeAnsweredError(`health check GET ${path}: answered ${String(status)}`));
          },
        );
        // The whole try, not an idle time: a server trickling its headers, or sending 1xx
        // answers without end, would hold an idle timer off for as long as it runs.
        const deadline = timers.setTimeout(() => req.destroy(new Error(`no answer within ${String(HTTP_PROBE_TIMEOUT_MS / 1000)} s`)), HTTP_PROBE_TIMEOUT_MS);
        req.on('close', () => deadline.cancel());
        req.on('error', (err) => fail(err.message));
        req.end();
      }),
  };
}
