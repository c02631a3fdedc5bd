// The whole Caddy configuration, built from the store's view of services. Pure: tested without
// Caddy, and hashed so that svcd can tell whether a (restarted) Caddy still has it.
import { createHash } from 'node:crypto';
import { isIP } from 'node:net';
import { parseListen } from '../config.js';

/** The zone of the names Caddy asks for: `<routeId>.svc-upstream.` (no such top-level domain exists). */
export const UPSTREAM_ZONE = 'svc-upstream';
/** The name Caddy asks for the route's workload. Rooted (a trailing dot): the resolver tries no search domains. */
export function upstreamName(routeId: string): string {
  return `${routeId}.${UPSTREAM_ZONE}.`;
}
/** How often Caddy asks again for a route with traffic (its dynamic upstreams' refresh). */
export const UPSTREAM_REFRESH_S = 1;
/** The header Caddy's error route sets on the failed request it forwards here: the error's status. */
export const ERROR_STATUS_HEADER = 'x-svc-proxy-error';

/** Where svcd answers Caddy's questions (route-answers.ts). */
export interface RouteAnswerAddresses {
  /** The DNS server, as Caddy's resolver takes it: `udp/127.0.0.1:PORT`. */
  resolver: string;
  /** The page server: `127.0.0.1:PORT`. */
  pages: string;
}

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
  /**
   * host:port where its workload answers (a container on its tenant network, a node's published
   * port), when it runs; several, comma-separated, for a service's replicas (joinUpstreams).
   */
  upstream: string | null;
  /** More than one: the route balances its replicas, and a request that finds one gone is tried on another. */
  replicas?: number;
  /**
   * Headers set on each request it forwards (a preview on a swarm: the port and the token its
   * environment's agent forwards it on with), over any of the client's of the same name.
   */
  requestHeaders?: Record<string, string>;
  /**
   * The port it answers on when it runs. The configuration names this port and the route's DNS
   * name, not the address: a workload that moves is an answer of svcd's, not a load.
   */
  port: number;
}

export interface CaddyConfigInput {
  /** Where Caddy's admin API listens (it must stay there after a load). */
  adminListen: string;
  /** Where the public proxy listens (with tls: plain HTTP, which redirects). */
  listen: string;
  targets: RouteTarget[];
  /** Where svcd answers for the routes' addresses and pages. */
  answers: RouteAnswerAddresses;
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

/**
 * Where Caddy finds the route's workload: asked of svcd by DNS (route-answers.ts) and refreshed
 * every UPSTREAM_REFRESH_S, so that a workload that moved or stopped costs no configuration load.
 * An address that is not an IP literal (no A or AAAA record can carry it), or a workload on a port
 * other than the route's, is named in the configuration instead.
 */
function upstreamsOf(t: RouteTarget, answers: RouteAnswerAddresses): Record<string, unknown> {
  if (t.upstream !== null) {
    const list = splitUpstreams(t.upstream);
    if (list.some(({ host, port }) => isIP(host) === 0 || port !== t.port)) return { upstreams: list.map((a) => ({ dial: joinUpstreams([a]) })) };
  }
  return {
    dynamic_upstreams: {
      source: 'a',
      name: upstreamName(t.routeId),
      port: String(t.port),
      refresh: `${String(UPSTREAM_REFRESH_S)}s`,
      // "udp/": without it Caddy's resolver asks over TCP.
      resolver: { addresses: [answers.resolver] },
    },
  };
}

/**
 * Balancing of a route's replicas (Caddy picks one at random for each request): a request whose
 * replica does not take the connection (stopped, moved, its node gone, before svcd's next look
 * at the tasks) is tried again, on one picked anew, every quarter second for up to 3 s. A
 * connection refused is safe to try again: nothing of the request reached the workload. No
 * passive health check: it would leave a replica out for seconds after a few failures, and with
 * one replica routed (the others starting) that is seconds of refusals; svcd's own checks decide
 * which replicas are routed (deployer.ts).
 */
const REPLICA_BALANCING = {
  load_balancing: { selection_policy: { policy: 'random' }, try_duration: '3s', try_interval: '250ms' },
};

/** Several workloads in one upstream (a service's replicas): `host:port,host:port`, IPv6 hosts in brackets; null for none. */
export function joinUpstreams(list: ReadonlyArray<{ host: string; port: number }>): string | null {
  if (list.length === 0) return null;
  return list.map(({ host, port }) => `${isIP(host) === 6 ? `[${host}]` : host}:${String(port)}`).join(',');
}

/** The workloads of an upstream (joinUpstreams), in its order. */
export function splitUpstreams(upstream: string): Array<{ host: string; port: number }> {
  return upstream.split(',').map(splitUpstream);
}

/** The parts of an upstream's `host:port` (an IPv6 literal in brackets loses them). */
export function splitUpstream(upstream: string): { host: string; port: number } {
  const colon = upstream.lastIndexOf(':');
  const host = upstream.slice(0, colon);
  return { host: host.startsWith('[') && host.endsWith(']') ? host.slice(1, -1) : host, port: Number(upstream.slice(colon + 1)) };
}

export function routeId(serviceId: string): string {
  return `svc-${serviceId}`;
}

export function buildCaddyConfig(input: CaddyConfigInput): { config: Record<string, unknown>; marker: string } {
  const route = (t: RouteTarget, hosts: string[], id: boolean) => ({
    ...(id ? { '@id': t.routeId } : {}),
    match: [{ host: hosts }],
    handle: [
      {
        handler: 'reverse_proxy',
        ...upstreamsOf(t, input.answers),
        ...((t.replicas ?? 1) > 1 ? REPLICA_BALANCING : {}),
        // The client's address, for the upstream's logs and for svcd's own per-client limits
        // (api.<base-domain>: svcd takes X-Real-Ip from a loopback peer only, api/client-ip.ts).
        headers: { request: { set: { 'X-Real-Ip': ['{http.request.remote.host}'], ...Object.fromEntries(Object.entries(t.requestHeaders ?? {}).map(([k, v]) => [k, [v]])) } } },
        // Caddy sets X-Forwarded-For/-Proto/-Host and passes WebSocket upgrades by itself,
        // and flushes streamed responses (server-sent events, any response without a
        // length) as they come. Not `flush_interval: -1`: with it, Caddy 2.6.2 panics and
        // exits when it loads a configuration while a request is still dialing an upstream
        // that does not answer (a node cut off, a service not accepting), so one tenant's
        // silent service and any route change stopped every tenant's traffic (proxy.test.ts).
      },
    ],
    terminal: true,
  });
  // A request its route could not serve (no workload running, none answering) gets its page from
  // svcd, which knows the route's state ("Service web is stopped."): the state is not in the
  // configuration, so that it changing costs no load. Forwarded as a plain request, never upgraded.
  const errors = {
    routes: [
      {
        handle: [
          {
            handler: 'reverse_proxy',
            upstreams: [{ dial: input.answers.pages }],
            headers: { request: { set: { [ERROR_STATUS_HEADER]: ['{http.error.status_code}'] }, delete: ['Upgrade', 'Connection'] } },
          },
        ],
      },
    ],
  };
  const config = input.tls ? withTls(input, input.tls, route, errors) : plainOnly(input, route, errors);
  // The marker route: GET /id/<marker> tells whether Caddy runs exactly this configuration.
  const marker = `svc-config-${createHash('sha256').update(JSON.stringify(config)).digest('hex').slice(0, 16)}`;
  const servers = (config.apps as { http: { servers: { svc: { routes: unknown[] } } } }).http.servers;
  servers.svc.routes.push({ '@id': marker, handle: [NOT_FOUND], terminal: true });
  return { config, marker };
}

type RouteOf = (t: RouteTarget, hosts: string[], id: boolean) => unknown;

function plainOnly(input: CaddyConfigInput, route: RouteOf, errors: unknown): Record<string, unknown> {
  const routes = input.targets.map((t) => route(t, t.hosts, true));
  return {
    admin: { listen: input.adminListen, config: { persist: false } },
    apps: { http: { servers: { svc: { listen: [input.listen], automatic_https: { disable: true }, routes, errors } } } },
  };
}

function withTls(input: CaddyConfigInput, tls: CaddyTls, route: RouteOf, errors: unknown): Record<string, unknown> {
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
    admin: { listen: input.adminListen, config: { persist: false } },
    storage: { module: 'file_system', root: tls.storageDir },
    apps: {
      http: {
        // The ports ACME validation reaches (Caddy otherwise assumes 80 and 443).
        http_port: parseListen(input.listen).port,
        https_port: httpsPort,
        servers: {
          svc: { listen: [input.listen], automatic_https: { disable: true }, routes: plainRoutes, errors },
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
  };
}

