// Which host names a tenant may add to a service. Pure: tested without a store.
import { domainToASCII } from 'node:url';
import { HOSTNAME_MAX } from '@svc/contract';
import { ValidationError } from '../errors.js';

const LABEL = /^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$/;

/**
 * The name as svc keeps it (lower case, ASCII, no trailing dot), or a ValidationError that says
 * what is wrong. Apex names (example.com) are allowed: the tenant points them here with A/AAAA
 * records (or its DNS provider's ALIAS). Wildcards are not: a certificate for *.example.com needs
 * a DNS-01 challenge at the tenant's DNS provider, which svc does not hold keys for.
 */
export function customHostname(raw: string, baseDomain: string | null): string {
  const trimmed = raw.trim().replace(/\.$/, '');
  if (trimmed.startsWith('*.')) throw new ValidationError('wildcard names are not offered: add each name (a certificate for a wildcard needs a DNS-01 challenge at your DNS provider)');
  // Internationalized names become their xn-- form (what DNS and certificates carry); '' is a name
  // that has none. It parses a URL's host, so what would end one (a path, a port, a user) is
  // refused first: it would otherwise be cut off silently.
  const name = /[\s/?#@:[\]\\%]/.test(trimmed) ? '' : domainToASCII(trimmed.toLowerCase());
  if (name === '' || name.length > HOSTNAME_MAX) throw new ValidationError(`hostname ${JSON.stringify(raw)} is not a valid DNS name`);
  const labels = name.split('.');
  if (labels.length < 2) throw new ValidationError('hostname needs at least two labels (example.com, shop.example.com)');
  if (!labels.every((l) => LABEL.test(l))) throw new ValidationError(`hostname ${JSON.stringify(raw)}: each label is 1-63 letters, digits and inner hyphens`);
  // 192.0.2.1 passes the label rule; no top-level domain is all digits.
  if (/^[0-9]+$/.test(labels.at(-1) ?? '')) throw new ValidationError('an IP address is not a host name');
  if (name === 'localhost' || name.endsWith('.localhost')) throw new ValidationError('names under localhost are svc\'s own (<id>.localhost)');
  if (baseDomain && (name === baseDomain || name.endsWith(`.${baseDomain}`))) {
    throw new ValidationError(`names under ${baseDomain} are svc's own: the service already answers at its <dns_label>.${baseDomain}`);
  }
  return name;
}
