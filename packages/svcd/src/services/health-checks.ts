// A service's health check (beyond the spec): how its deploys tell that it is ready. The default
// is the driver's own probe, a TCP connect to the service's port; an HTTP check asks a path on
// that port. Stored as JSON on the service and on its snapshots (null: the default).
import { request } from 'node:http';
import type { HealthCheck } from '@svc/contract';
import type { Readiness } from '../runtime/index.js';

/** A connect is cheap: a long pause is time the first request waits for nothing. */
const TCP_EVERY_MS = 25;
/** A connect that hangs is tried again after this long. */
const TCP_PROBE_TIMEOUT_MS = 2_000;
/** A health route is the tenant's code: asked four times a second at most while a deploy waits. */
const HTTP_EVERY_MS = 250;
/** A health route may be slow on a cold start (a first database connection). */
const HTTP_PROBE_TIMEOUT_MS = 5_000;

export const DEFAULT_HEALTH_CHECK: HealthCheck = { type: 'tcp' };

/** What the store keeps: null for the default. */
export function storedHealthCheck(check: HealthCheck | undefined): string | null {
  return check === undefined || check.type === 'tcp' ? null : JSON.stringify({ type: 'http', path: check.path });
}

/** The stored form read back; only svcd writes it, after the API's schema checked it. */
export function healthCheckOf(stored: string | null): HealthCheck {
  if (stored === null) return DEFAULT_HEALTH_CHECK;
  const parsed = JSON.parse(stored) as { type?: unknown; path?: unknown };
  return parsed.type === 'http' && typeof parsed.path === 'string' ? { type: 'http', path: parsed.path } : DEFAULT_HEALTH_CHECK;
}

/** A deploy's readiness: running, then its check passing, until `timeoutMs`. */
export function readinessOf(check: HealthCheck, timeoutMs: number): Readiness {
  if (check.type === 'tcp') return { timeoutMs, everyMs: TCP_EVERY_MS, probeTimeoutMs: TCP_PROBE_TIMEOUT_MS };
  const path = check.path;
  return {
    timeoutMs,
    everyMs: HTTP_EVERY_MS,
    // The ready wait gives up on a try after this long; the request is destroyed a moment before.
    probeTimeoutMs: HTTP_PROBE_TIMEOUT_MS + 100,
    probe: (endpoint) =>
      new Promise<void>((resolve, reject) => {
        if (endpoint.port === null) {
          resolve();
          return;
        }
        const failed = (why: string) => reject(new Error(`health check GET ${path}: ${why}`));
        // A connection of its own, closed after the status line and headers: the body is never read.
        const req = request({ host: endpoint.host, port: endpoint.port, path, method: 'GET', agent: false, headers: { 'user-agent': 'svc-health-check', connection: 'close' } }, (res) => {
          const status = res.statusCode ?? 0;
          req.destroy();
          if (status >= 200 && status < 400) resolve();
          else failed(`answered ${String(status)}`);
        });
        req.setTimeout(HTTP_PROBE_TIMEOUT_MS, () => req.destroy(new Error(`no answer within ${String(HTTP_PROBE_TIMEOUT_MS / 1000)} s`)));
        req.on('error', (err) => failed(err.message));
        req.end();
      }),
  };
}
