// Hosts under the base domain: a service answers at <dns_label>.<base-domain>, a preview at
// <name>-<environmentID>.<base-domain>. Both kinds share one namespace, reserved in the store
// (host_names) with a unique key, so that no host can ever name two things. Service labels are
// claimed only under a base domain (without one they name no host, and a refusal would reveal
// other tenants' service names); previews always claim theirs (unique by their environment ID).
import { ConflictError } from '../errors.js';
import { isUniqueViolation, type HostNameKind, type Repositories } from '../store/index.js';

export const DNS_LABEL_MAX = 63;

/** Labels a tenant may not take: they name the platform's own hosts. */
export const RESERVED_LABELS = new Set([
  'api', 'www', 'admin', 'app', 'dashboard', 'console', 'status', 'mail', 'smtp', 'ftp', 'ns1', 'ns2',
  'proxy', 'registry', 'auth', 'login', 'static', 'cdn', 'docs', 'svc', 'kanban', 'preview', 'metrics',
]);

/** Lower-case letters, digits and single hyphens, from the service name; "service" when nothing is left. */
export function dnsLabelFor(name: string): string {
  const label = name
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, '-')
    .replace(/^-+|-+$/g, '')
    .slice(0, DNS_LABEL_MAX)
    .replace(/-+$/g, '');
  return label === '' ? 'service' : label;
}

/** A preview's host before the base domain. */
export function previewHostLabel(name: string, environmentId: string): string {
  return `${name.toLowerCase()}-${environmentId}`;
}

export interface HostClaim {
  /** The host before the base domain. */
  hostname: string;
  tenantId: string;
  kind: HostNameKind;
  resourceId: string;
  now: number;
}

/**
 * Reserves a host in the caller's transaction (the one that creates its service or preview), so
 * that the two stand or fall together. The store's unique key decides between claims, whatever
 * their tenant or kind and however close together: a taken host is 409 with `takenMessage`.
 */
export async function claimHostName(tx: Repositories, claim: HostClaim, takenMessage: string): Promise<void> {
  if (RESERVED_LABELS.has(claim.hostname)) {
    throw new ConflictError(`the DNS label ${JSON.stringify(claim.hostname)} is reserved; choose another name`);
  }
  try {
    await tx.hostNames.claim({ hostname: claim.hostname, tenant_id: claim.tenantId, kind: claim.kind, resource_id: claim.resourceId, created_at: claim.now });
  } catch (err) {
    if (isUniqueViolation(err)) throw new ConflictError(takenMessage);
    throw err;
  }
}
