// Where a preview is reached through svc's proxy: <previewID>.localhost always, and
// <name>-<environmentID>.<base-domain> when a base domain is set. It forwards to the port of the
// environment's container on its tenant network while the environment runs (on a swarm, through
// the environment's agent on the port its node publishes), and answers 503 while it does not.
import type { RouteTarget } from '../proxy/caddy.js';
import { PREVIEW_PORT_HEADER, PREVIEW_TOKEN_HEADER, previewToken } from './agent.js';
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
  rows: Array<PreviewRow & { env_name: string; env_status: string; address: string | null; agent_port: number | null; agent_token: string | null }>,
  o: PreviewRouting,
  openToken: (sealed: string) => string,
): RouteTarget[] {
  return rows.map((p) => {
    const running = p.env_status === 'running' && p.address !== null;
    // On a swarm (its agent published on its node): through the agent, which forwards to the
    // port inside the environment; it takes the request only with the preview token.
    const viaAgent = p.agent_port !== null && p.agent_token !== null ? { port: p.agent_port, token: previewToken(openToken(p.agent_token)) } : null;
    return {
      routeId: `preview-${p.id}`,
      label: `Preview ${p.name} of environment ${p.env_name}`,
      status: p.env_status,
      hosts: previewHosts(p, o),
      upstream: running ? `${p.address ?? ''}:${String(viaAgent?.port ?? p.port)}` : null,
      port: p.port,
      ...(viaAgent ? { requestHeaders: { [PREVIEW_PORT_HEADER]: String(p.port), [PREVIEW_TOKEN_HEADER]: viaAgent.token } } : {}),
    };
  });
}
