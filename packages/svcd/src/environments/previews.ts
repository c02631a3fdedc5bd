// Where a preview is reached through svc's proxy: <previewID>.localhost always, and
// <name>-<environmentID>.<base-domain> when a base domain is set. It forwards to the port of the
// environment's container on its tenant network while the environment runs, and answers 503
// while it does not.
import type { RouteTarget } from '../proxy/caddy.js';
import { previewHostLabel } from '../services/dns-labels.js';
import { proxyUrl, type RoutingOptions } from '../services/routing.js';
import type { PreviewRow } from '../store/index.js';

export type PreviewRouting = RoutingOptions;

export function previewHosts(p: Pick<PreviewRow, 'id' | 'name' | 'environment_id'>, o: PreviewRouting): string[] {
  const hosts = [`${p.id}.localhost`];
  if (o.baseDomain) hosts.push(`${previewHostLabel(p.name, p.environment_id)}.${o.baseDomain}`);
  return hosts;
}

export function previewUrl(p: Pick<PreviewRow, 'id' | 'name' | 'environment_id'>, o: PreviewRouting): string | null {
  const host = previewHosts(p, o).at(-1);
  if (host === undefined) throw new Error('a preview has no host name');
  return proxyUrl(host, o);
}

export function previewRouteTargets(
  rows: Array<PreviewRow & { env_name: string; env_status: string; address: string | null }>,
  o: PreviewRouting,
): RouteTarget[] {
  return rows.map((p) => ({
    routeId: `preview-${p.id}`,
    label: `Preview ${p.name} of environment ${p.env_name}`,
    status: p.env_status,
    hosts: previewHosts(p, o),
    upstream: p.env_status === 'running' && p.address ? `${p.address}:${p.port}` : null,
    port: p.port,
  }));
}
