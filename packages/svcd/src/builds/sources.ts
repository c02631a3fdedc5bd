// Which git sources a build may clone (builds issue, item 1). A build makes svcd's host open a
// connection to an address the tenant chose, so the address is checked like any server-side
// request forgery target: https:// or git:// only, no credentials in the URL, and no private,
// loopback, link-local or otherwise non-public address, for names as well as literals (every
// address a name resolves to must be public). Loopback sources, where tests serve repositories,
// are allowed only when the operator says so (--dev or --allow-loopback-git); then plain http://
// is allowed too, for loopback hosts only (git http-backend).
import { BlockList, isIP } from 'node:net';
import { lookup } from 'node:dns/promises';
import { ValidationError } from '../errors.js';

export interface SourceRules {
  allowLoopback: boolean;
  /** Names the field in messages (default source_url). */
  field?: string;
  /** Environments' sync takes https:// only (spec); builds take git:// too. */
  httpsOnly?: boolean;
}

/** Resolves a host name to every address it has (injected so tests decide what names mean). */
export type ResolveHost = (host: string) => Promise<string[]>;

export const resolveWithSystem: ResolveHost = async (host) => (await lookup(host, { all: true, verbatim: true })).map((a) => a.address);

const LOOPBACK = new BlockList();
LOOPBACK.addSubnet('127.0.0.0', 8, 'ipv4');
LOOPBACK.addAddress('::1', 'ipv6');

// Not public: RFC 1918, CGNAT, link-local, "this network", multicast, reserved, benchmarking,
// documentation and their IPv6 counterparts (unique-local, link-local, unspecified, multicast).
const NOT_PUBLIC = new BlockList();
for (const [net, bits] of [
  ['0.0.0.0', 8], ['10.0.0.0', 8], ['100.64.0.0', 10], ['169.254.0.0', 16], ['172.16.0.0', 12],
  ['192.0.0.0', 24], ['192.0.2.0', 24], ['192.168.0.0', 16], ['198.18.0.0', 15], ['198.51.100.0', 24],
  ['203.0.113.0', 24], ['224.0.0.0', 4], ['240.0.0.0', 4],
] as const) NOT_PUBLIC.addSubnet(net, bits, 'ipv4');
for (const [net, bits] of [['::', 128], ['fc00::', 7], ['fe80::', 10], ['ff00::', 8], ['2001:db8::', 32], ['64:ff9b::', 96]] as const) {
  NOT_PUBLIC.addSubnet(net, bits, 'ipv6');
}

type AddressClass = 'public' | 'loopback' | 'private';

function classify(address: string): AddressClass {
  // IPv4-mapped IPv6 (::ffff:10.0.0.1) is judged by the IPv4 address inside.
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(address)?.[1];
  const a = mapped ?? address;
  const family = isIP(a) === 6 ? 'ipv6' : 'ipv4';
  if (LOOPBACK.check(a, family)) return 'loopback';
  if (NOT_PUBLIC.check(a, family)) return 'private';
  return 'public';
}

/**
 * Checks a build's source URL; throws ValidationError (400) with the reason. Returns the URL
 * unchanged when it may be cloned.
 */
export async function checkSourceUrl(raw: string, rules: SourceRules, resolve: ResolveHost = resolveWithSystem): Promise<string> {
  const field = rules.field ?? 'source_url';
  const schemes = rules.httpsOnly ? 'an https://' : 'an https:// or git://';
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new ValidationError(`${field} must be ${schemes} URL`);
  }
  if (rules.httpsOnly && url.protocol !== 'https:') throw new ValidationError(`${field} must be ${schemes} URL`);
  if (!['https:', 'git:', 'http:'].includes(url.protocol)) throw new ValidationError(`${field} must be ${schemes} URL`);
  if (url.username || url.password) throw new ValidationError(`${field} must not carry credentials`);
  const host = url.hostname.replace(/^\[|\]$/g, '');
  if (!host) throw new ValidationError(`${field} has no host`);

  let addresses: string[];
  if (isIP(host)) addresses = [host];
  else {
    addresses = await resolve(host).catch(() => []);
    if (addresses.length === 0) throw new ValidationError(`${field} host ${host} does not resolve`);
  }
  const classes = new Set(addresses.map(classify));
  if (classes.has('private')) throw new ValidationError(`${field} must point to a public address (private and link-local addresses are refused)`);
  if (classes.has('loopback')) {
    if (!rules.allowLoopback) throw new ValidationError(`${field} must point to a public address (loopback is refused)`);
    if (classes.size > 1) throw new ValidationError(`${field} host resolves to both loopback and public addresses`);
    return raw; // http://, https:// and git:// on loopback, when allowed
  }
  if (url.protocol === 'http:') throw new ValidationError(`${field} must be ${schemes} URL`);
  return raw;
}

/**
 * A branch, a tag or a commit SHA. Git's own rules (git check-ref-format) for names, narrowed to
 * characters a shell or URL never treats specially; a leading "-" would read as an option.
 */
export function checkSourceRef(ref: string, field = 'source_ref'): string {
  const ok =
    /^[A-Za-z0-9][A-Za-z0-9._/-]{0,254}$/.test(ref) &&
    !ref.includes('..') &&
    !ref.includes('//') &&
    !ref.endsWith('/') &&
    !ref.endsWith('.') &&
    !ref.endsWith('.lock') &&
    !ref.split('/').some((part) => part.startsWith('.'));
  if (!ok) throw new ValidationError(`${field} must be a branch, a tag or a commit SHA`);
  return ref;
}
