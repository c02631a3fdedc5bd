// The whole Caddy configuration, built from the store's view of services. Pure: tested without
// Caddy, and hashed so that svcd can tell whether a (restarted) Caddy still has it.
import { createHash } from 'node:crypto';

/** One route: a service, or a preview of an environment's port. */
export interface RouteTarget {
  /** The route's @id in Caddy's configuration. */
  routeId: string;
  /** What it is, for the page shown while it does not run ("Service web"). */
  label: string;
  status: string;
  /** Hosts that reach it. */
  hosts: string[];
  /** host:port of the container on its tenant network, when it is running. */
  upstream: string | null;
}

export interface CaddyConfigInput {
  /** Where Caddy's admin API listens (it must stay there after a load). */
  adminListen: string;
  /** Where the public proxy listens. */
  listen: string;
  targets: RouteTarget[];
}

const ERROR_PAGE = 'The service is not answering right now ({http.error.status_code}). If it was just deployed, try again in a moment.\n';

export function routeId(serviceId: string): string {
  return `svc-${serviceId}`;
}

export function buildCaddyConfig(input: CaddyConfigInput): { config: Record<string, unknown>; marker: string } {
  const routes: unknown[] = input.targets.map((t) => ({
    '@id': t.routeId,
    match: [{ host: t.hosts }],
    handle: t.upstream
      ? [
          {
            handler: 'reverse_proxy',
            upstreams: [{ dial: t.upstream }],
            // Streamed responses pass through at once (logs, server-sent events); Caddy sets
            // X-Forwarded-For/-Proto/-Host and passes WebSocket upgrades by itself.
            flush_interval: -1,
          },
        ]
      : [
          {
            handler: 'static_response',
            status_code: 503,
            headers: { 'Content-Type': ['text/plain; charset=utf-8'], 'Retry-After': ['5'] },
            body: `${t.label} is ${t.status}.\n`,
          },
        ],
    terminal: true,
  }));
  const body = JSON.stringify({ listen: input.listen, routes });
  const marker = `svc-config-${createHash('sha256').update(body).digest('hex').slice(0, 16)}`;
  routes.push({
    // The marker route: GET /id/<marker> tells whether Caddy runs exactly this configuration.
    '@id': marker,
    handle: [{ handler: 'static_response', status_code: 404, body: 'No service at this address.\n' }],
    terminal: true,
  });
  return {
    marker,
    config: {
      admin: { listen: input.adminListen, config: { persist: false } },
      apps: {
        http: {
          servers: {
            svc: {
              listen: [input.listen],
              automatic_https: { disable: true },
              routes,
              errors: {
                routes: [{ handle: [{ handler: 'static_response', status_code: '{http.error.status_code}', body: ERROR_PAGE }] }],
              },
            },
          },
        },
      },
    },
  };
}
