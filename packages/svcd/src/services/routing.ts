// Where a service is reached: <serviceID>.localhost always, and <dns_label>.<base-domain> when a
// base domain is set. Its url is the base-domain host when there is one.
import { parseListen } from '../config.js';
import { routeId, splitUpstream, type RouteTarget } from '../proxy/caddy.js';
import type { ServiceRow } from '../store/index.js';

export interface RoutingOptions {
  baseDomain: string | null;
  /** --proxy-listen; null: services are not routed, and have no url. */
  proxyListen: string | null;
  /** --proxy-https-listen with --tls on: urls are https:// there. */
  httpsListen?: string | null;
}

export function serviceHosts(s: Pick<ServiceRow, 'id' | 'dns_label'>, o: RoutingOptions): string[] {
  const hosts = [`${s.id}.localhost`];
  if (o.baseDomain) hosts.push(`${s.dns_label}.${o.baseDomain}`);
  return hosts;
}

export function serviceUrl(s: Pick<ServiceRow, 'id' | 'dns_label'>, o: RoutingOptions): string | null {
  return proxyUrl(o.baseDomain ? `${s.dns_label}.${o.baseDomain}` : `${s.id}.localhost`, o);
}

/** http://<host>[:port] on the public proxy (https:// with --tls on); null when svcd runs without one. */
export function proxyUrl(host: string, o: RoutingOptions): string | null {
  if (!o.proxyListen) return null;
  if (o.httpsListen) {
    const { port } = parseListen(o.httpsListen);
    return `https://${host}${port === 443 ? '' : `:${port}`}`;
  }
  const { port } = parseListen(o.proxyListen);
  return `http://${host}${port === 80 ? '' : `:${port}`}`;
}

/** A proven custom domain of a service, and whether its first certificate is still to come. */
export interface RoutedDomain {
  service_id: string;
  hostname: string;
  awaitingCertificate: boolean;
}

/** The services' routes, with the proven custom domains of each. */
export function routeTargets(rows: ServiceRow[], o: RoutingOptions, domains: readonly RoutedDomain[] = []): RouteTarget[] {
  const byService = new Map<string, RoutedDomain[]>();
  for (const d of domains) byService.set(d.service_id, [...(byService.get(d.service_id) ?? []), d]);
  return rows.map((s) => {
    const own = byService.get(s.id) ?? [];
    return {
      routeId: routeId(s.id),
      label: `Service ${s.name}`,
      status: s.status,
      hosts: [...serviceHosts(s, o), ...own.map((d) => d.hostname)],
      awaitingCertificate: own.filter((d) => d.awaitingCertificate).map((d) => d.hostname),
      // Where its workload was last seen serving: running, or deploying while the container a
      // rolling redeploy replaces serves on (deployer.ts); null once it stopped, failed or crashed.
      // Between a swarm's redeploy removing the old task and the new one running it leads
      // nowhere: the request fails and the page says the service is deploying.
      upstream: s.upstream,
      replicas: s.replicas,
      // A swarm publishes it on its allocated port on every node; the engine's at the service's own.
      port: s.published_port ?? s.port,
    };
  });
}

/**
 * The API's own route: api.<base-domain> to svcd's listener (over HTTPS with --tls on, where
 * Caddy's X-Forwarded-Proto satisfies the spec's HTTPS rule). "api" is a reserved label, so no
 * service can take the host.
 */
export function apiRouteTargets(upstream: string | null, baseDomain: string | null): RouteTarget[] {
  if (!upstream || !baseDomain) return [];
  return [{ routeId: 'svc-api', label: 'The svc API', status: 'running', hosts: [`api.${baseDomain}`], upstream, port: splitUpstream(upstream).port }];
}
