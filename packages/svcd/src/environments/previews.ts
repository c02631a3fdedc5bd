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
  openToken: (sealed: string) => string | null,
  /** On a swarm: every preview goes through its environment's agent (none while it has no port). */
  throughAgents: boolean,
): RouteTarget[] {
  return rows.map((p) => {
    const route = { routeId: `preview-${p.id}`, label: `Preview ${p.name} of environment ${p.env_name}`, status: p.env_status, hosts: previewHosts(p, o) };
    const address = p.env_status === 'running' ? p.address : null;
    // On one engine: the port of the container's address on the tenant network.
    if (!throughAgents) return { ...route, upstream: address === null ? null : `${address}:${String(p.port)}`, port: p.port };
    // Not given its port yet (a first run to come, a port moving into a changed range): not routed.
    if (p.agent_port === null) return { ...route, upstream: null, port: p.port };
    // On a swarm (its agent published on its node): through the agent, always at the agent's
    // port (also while it does not run: the route never names the preview's own port at the
    // node), which forwards to the port inside the environment with the preview's token. No
    // token to show (an environment without an agent, a token that does not open): not routed.
    const agentToken = p.agent_token === null ? null : openToken(p.agent_token);
    return {
      ...route,
      upstream: address === null || agentToken === null ? null : `${address}:${String(p.agent_port)}`,
      port: p.agent_port,
      ...(agentToken === null ? {} : { requestHeaders: { [PREVIEW_PORT_HEADER]: String(p.port), [PREVIEW_TOKEN_HEADER]: previewToken(agentToken, p.port) } }),
    };
  });
}
