// The whole Caddy configuration, built from the store's view of services. Pure: tested without
// Caddy, and hashed so that svcd can tell whether a (restarted) Caddy still has it.
import { createHash } from 'node:crypto';
import { parseListen } from '../config.js';

/** One route: a service, or a preview of an environment's port. */
export interface RouteTarget {
  /** The route's @id in Caddy's configuration. */
  routeId: string;
  /** What it is, for the page shown while it does not run ("Service web"). */
  label: string;
  status: string;
  /** Hosts that reach it. */
  hosts: string[];
  /**
   * Certified hosts of `hosts` whose first certificate is still to come (a custom domain just
   * proven): plain HTTP serves them instead of redirecting, so the name works from its proof on
   * and moves to HTTPS once HTTPS can answer.
   */
  awaitingCertificate?: string[];
  /** host:port of the container on its tenant network, when it is running. */
  upstream: string | null;
}

export interface CaddyConfigInput {
  /** Where Caddy's admin API listens (it must stay there after a load). */
  adminListen: string;
  /** Where the public proxy listens (with tls: plain HTTP, which redirects). */
  listen: string;
  targets: RouteTarget[];
  tls?: CaddyTls;
}

/** HTTPS: certificates obtained on demand from an ACME server, for hosts svcd says yes to. */
export interface CaddyTls {
  /** Where the HTTPS server listens. */
  httpsListen: string;
  /** Caddy's on-demand question: GET ?domain=<host>, 200 for a host svc routes. */
  askUrl: string;
  /** The ACME directory, the account's contact, and a root to trust for the directory's own HTTPS. */
  acme: { directory: string; email: string | null; caRoot: string | null };
  /** Where certificates and the ACME account live (they survive restarts). */
  storageDir: string;
}

/**
 * Whether a routed host is served over HTTPS (and certified): those under the base domain and
 * tenants' proven custom domains. The <id>.localhost hosts stay on plain HTTP: no public CA
 * certifies them.
 */
export function isCertified(host: string): boolean {
  const name = host.toLowerCase();
  return name !== 'localhost' && !name.endsWith('.localhost');
}

/** What answers a request no route takes. */
const NOT_FOUND = { handler: 'static_response', status_code: 404, body: 'No service at this address.\n' };
const ERROR_PAGE = 'The service is not answering right now ({http.error.status_code}). If it was just deployed, try again in a moment.\n';

export function routeId(serviceId: string): string {
  return `svc-${serviceId}`;
}

export function buildCaddyConfig(input: CaddyConfigInput): { config: Record<string, unknown>; marker: string } {
  const route = (t: RouteTarget, hosts: string[], id: boolean) => ({
    ...(id ? { '@id': t.routeId } : {}),
    match: [{ host: hosts }],
    handle: t.upstream
      ? [
          {
            handler: 'reverse_proxy',
            upstreams: [{ dial: t.upstream }],
            // The client's address, for the upstream's logs and for svcd's own per-client limits
            // (api.<base-domain>: svcd takes X-Real-Ip from a loopback peer only, api/client-ip.ts).
            headers: { request: { set: { 'X-Real-Ip': ['{http.request.remote.host}'] } } },
            // Caddy sets X-Forwarded-For/-Proto/-Host and passes WebSocket upgrades by itself,
            // and flushes streamed responses (server-sent events, any response without a
            // length) as they come. Not `flush_interval: -1`: with it, Caddy 2.6.2 panics and
            // exits when it loads a configuration while a request is still dialing an upstream
            // that does not answer (a node cut off, a service not accepting), so one tenant's
            // silent service and any route change stopped every tenant's traffic (proxy.test.ts).
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
  });
  const routes: unknown[] = input.targets.map((t) => route(t, t.hosts, true));
  // The targets too: what plain HTTP redirects is not in `routes`.
  const body = JSON.stringify({ listen: input.listen, routes, targets: input.targets, tls: input.tls ?? null });
  const marker = `svc-config-${createHash('sha256').update(body).digest('hex').slice(0, 16)}`;
  // The marker route: GET /id/<marker> tells whether Caddy runs exactly this configuration.
  const markerRoute = { '@id': marker, handle: [NOT_FOUND], terminal: true };
  const errors = { routes: [{ handle: [{ handler: 'static_response', status_code: '{http.error.status_code}', body: ERROR_PAGE }] }] };
  if (!input.tls) {
    return {
      marker,
      config: {
        admin: { listen: input.adminListen, config: { persist: false } },
        apps: { http: { servers: { svc: { listen: [input.listen], automatic_https: { disable: true }, routes: [...routes, markerRoute], errors } } } },
      },
    };
  }
  const tls = input.tls;
  const httpsPort = parseListen(tls.httpsListen).port;
  const certified = isCertified;
  // Plain HTTP redirects the certified hosts that have a certificate (Caddy answers the ACME
  // HTTP-01 challenges on this port itself, before any route) and serves the others.
  const plainRoutes = input.targets.flatMap((t) => {
    const awaiting = new Set(t.awaitingCertificate ?? []);
    const redirected = t.hosts.filter((h) => certified(h) && !awaiting.has(h));
    const served = t.hosts.filter((h) => !redirected.includes(h));
    return [
      ...(redirected.length
        ? [{ match: [{ host: redirected }], handle: [{ handler: 'static_response', status_code: 308, headers: { Location: [`https://{http.request.host}${httpsPort === 443 ? '' : `:${httpsPort}`}{http.request.uri}`] } }], terminal: true }]
        : []),
      ...(served.length ? [route(t, served, true)] : []),
    ];
  });
  const tlsRoutes = input.targets.flatMap((t) => {
    const hosts = t.hosts.filter(certified);
    return hosts.length ? [route(t, hosts, false)] : [];
  });
  // What no route matches (a Host other than the handshake's name, a service just deleted) is
  // 404, as on plain HTTP (Caddy's own answer would be an empty 200).
  const notFound = { handle: [NOT_FOUND], terminal: true };
  return {
    marker,
    config: {
      admin: { listen: input.adminListen, config: { persist: false } },
      storage: { module: 'file_system', root: tls.storageDir },
      apps: {
        http: {
          // The ports ACME validation reaches (Caddy otherwise assumes 80 and 443).
          http_port: parseListen(input.listen).port,
          https_port: httpsPort,
          servers: {
            svc: { listen: [input.listen], automatic_https: { disable: true }, routes: [...plainRoutes, markerRoute], errors },
            'svc-tls': {
              listen: [tls.httpsListen],
              // Certificates come from the on-demand policy below; without a connection policy
              // Caddy would serve this port as plain HTTP.
              automatic_https: { disable: true },
              tls_connection_policies: [{}],
              // HTTP/1.1 and HTTP/2 over TCP only: Caddy 2.6 would also take UDP for HTTP/3.
              protocols: ['h1', 'h2'],
              routes: [...tlsRoutes, notFound],
              errors,
            },
          },
        },
        tls: {
          automation: {
            // A handshake for a name without a certificate asks svcd first: nobody can make svc
            // order certificates for names it does not route.
            on_demand: { ask: tls.askUrl },
            policies: [
              {
                on_demand: true,
                issuers: [
                  {
                    module: 'acme',
                    ca: tls.acme.directory,
                    ...(tls.acme.email ? { email: tls.acme.email } : {}),
                    ...(tls.acme.caRoot ? { trusted_roots_pem_files: [tls.acme.caRoot] } : {}),
                  },
                ],
              },
            ],
          },
        },
      },
    },
  };
}

