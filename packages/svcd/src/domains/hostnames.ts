// Which host names a tenant may add to a service. Pure: tested without a store.
import { domainToASCII } from 'node:url';
import { HOSTNAME_MAX } from '@svc/contract';
import { ValidationError } from '../errors.js';

const LABEL = /^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$/;
/**
 * Special-use names (RFC 6761, 6762 and its appendix G, 7686, 8375, 9476, ICANN's .internal):
 * private to a site, so no public CA certifies them, and proving one through svc's resolver would
 * prove a name of the operator's network. (.test and .example stay allowed: test setups with a
 * private CA use them.)
 */
const SPECIAL_USE = ['local', 'localdomain', 'internal', 'arpa', 'onion', 'invalid', 'alt', 'lan', 'intranet', 'corp', 'home', 'private'];

/** Whether every label is 1-63 letters, digits and inner hyphens, and the last is not all digits (an IPv4 address). */
export function isDnsName(name: string): boolean {
  const labels = name.split('.');
  return labels.every((l) => LABEL.test(l)) && !/^[0-9]+$/.test(labels.at(-1) ?? '');
}

/**
 * A host name as svc compares and keeps names: lower case, ASCII (an internationalized name in its
 * xn-- form, what DNS and certificates carry), no trailing dot; '' when it is no name. The mapping
 * parses a URL's host, so what would end one (a path, a port, a user) is refused first: it would
 * otherwise be cut off silently. The trailing dot (the root, the same host) is dropped after the
 * mapping, which turns an ideographic full stop into one.
 */
export function asciiHostname(trimmed: string): string {
  return (/[\s/?#@:[\]\\%]/.test(trimmed) ? '' : domainToASCII(trimmed.toLowerCase())).replace(/\.$/, '');
}

/**
 * The name as svc keeps it (asciiHostname), or a ValidationError that says
 * what is wrong. Apex names (example.com) are allowed: the tenant points them here with A/AAAA
 * records (or its DNS provider's ALIAS). Wildcards are not: a certificate for *.example.com needs
 * a DNS-01 challenge at the tenant's DNS provider, which svc does not hold keys for.
 */
export function customHostname(raw: string, baseDomain: string | null): string {
  const trimmed = raw.trim();
  if (trimmed.startsWith('*.')) throw new ValidationError('wildcard names are not offered: add each name (a certificate for a wildcard needs a DNS-01 challenge at your DNS provider)');
  const name = asciiHostname(trimmed);
  if (name === '') throw new ValidationError(`hostname ${JSON.stringify(raw)} is not a valid DNS name`);
  if (name.length > HOSTNAME_MAX) throw new ValidationError(`hostname is longer than ${HOSTNAME_MAX} characters (its record _svc-challenge.<hostname> must fit DNS's 253)`);
  const labels = name.split('.');
  if (labels.length < 2) throw new ValidationError('hostname needs at least two labels (example.com, shop.example.com)');
  if (!labels.every((l) => LABEL.test(l))) throw new ValidationError(`hostname ${JSON.stringify(raw)}: each label is 1-63 letters, digits and inner hyphens`);
  // 192.0.2.1 passes the label rule; no top-level domain is all digits.
  if (/^[0-9]+$/.test(labels.at(-1) ?? '')) throw new ValidationError('an IP address is not a host name');
  if (name === 'localhost' || name.endsWith('.localhost')) throw new ValidationError('names under localhost are svc\'s own (<id>.localhost)');
  const tld = labels.at(-1) ?? '';
  if (SPECIAL_USE.includes(tld)) throw new ValidationError(`.${tld} names are private to a network: no public certificate authority certifies them`);
  if (baseDomain && (name === baseDomain || name.endsWith(`.${baseDomain}`))) {
    throw new ValidationError(`names under ${baseDomain} are svc's own: the service already answers at its <dns_label>.${baseDomain}`);
  }
  return name;
}
