// A service's DNS label: its host under --base-domain is <dns_label>.<base-domain>.

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
