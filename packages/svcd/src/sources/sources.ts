// Which git sources a build or an environment sync may clone (builds issue, item 1); a module of
// its own since both use it. A clone makes svcd's host open a
// connection to an address the tenant chose, so the address is checked like any server-side
// request forgery target: https:// or git:// only, no credentials in the URL, and no private,
// loopback, link-local or otherwise non-public address, for names as well as literals (every
// address a name resolves to must be public). Loopback sources, where tests serve repositories,
// are allowed only when the operator says so (--dev or --allow-loopback-git); then plain http://
// is allowed too, for loopback hosts only (git http-backend).
//
// The check and the connection must be about the same address (issue 17, item 1). WHATWG URL,
// curl and git each read some strings differently (`https://1.1.1.1\@127.0.0.1/` is 1.1.1.1 to
// URL and 127.0.0.1 to curl; `git://0x7f.1/` is a name to URL and 127.0.0.1 to getaddrinfo), so:
// - characters parsers disagree on are refused before anything parses the string;
// - the URL is parsed once, by the strict grammar below, and git only ever sees a URL rebuilt
//   from the parsed parts (scheme, host, port, path);
// - a host is a canonical dotted quad, a bracketed IPv6 address, or a DNS name; anything that a
//   resolver's inet_aton would read as a number (127.1, 0x7f.1, 2130706433, 0177.0.0.1) is refused;
// - the name is resolved once, every address judged, and those addresses are pinned for git
//   (curl's resolve list for http(s), the address literal for git://), so a DNS answer that
//   changes between check and connection changes nothing.
import { BlockList } from 'node:net';
import { lookup } from 'node:dns/promises';
import { domainToASCII, domainToUnicode } from 'node:url';
import { NON_PUBLIC_IPV4, NON_PUBLIC_IPV6 } from '../addresses/non-public.js';
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

export const resolveWithSystem: ResolveHost = async (host) => (await lookup(host, { all: true, order: 'verbatim' })).map((a) => a.address);

export type SourceScheme = 'https' | 'http' | 'git';

/** A source URL that passed the check: what it means, and the only form git may be given. */
export interface CheckedSource {
  /** Rebuilt from the parsed parts, with the host as written (lower-cased): for messages and logs. */
  url: string;
  scheme: SourceScheme;
  /** A lower-case DNS name, a dotted quad, or an IPv6 address (without brackets). */
  host: string;
  /** As written, or the scheme's default. */
  port: number;
  /** Every address the host had when checked (for a literal, itself); each one was judged. */
  addresses: string[];
  /** What git gets: connections go to the checked addresses only, whatever DNS says later. */
  pinned: {
    url: string;
    /** `key=value` settings for `git -c`. */
    gitConfig: string[];
  };
}

/** Checks a source URL as the builds and sync routes do (the rules and resolver bound). */
export type SourceCheck = (raw: string) => Promise<CheckedSource>;

const DEFAULT_PORTS: Record<SourceScheme, number> = { https: 443, http: 80, git: 9418 };
/** Far above any real repository URL; bounds the work done on a tenant's string. */
const URL_MAX_LENGTH = 2048;

const LOOPBACK = new BlockList();
LOOPBACK.addSubnet('127.0.0.0', 8, 'ipv4');
LOOPBACK.addAddress('::1', 'ipv6');

// Not public: the shared ranges (addresses/non-public.ts), and more that matter when svcd itself
// connects to a tenant's address: the 6to4 relay anycast; IPv4-compatible (::/96) and
// IPv4-translated (::ffff:0:0:0/96) IPv6, which some stacks route as the IPv4 inside; the local
// NAT64 prefix (NAT64 is refused whole: the translator sits on our side, and what it reaches is
// not ours to judge); discard-only, Teredo (an obfuscated IPv4 inside), benchmarking, ORCHID and
// the deprecated site-local range.
const NOT_PUBLIC = new BlockList();
for (const [net, bits] of [...NON_PUBLIC_IPV4, ['192.88.99.0', 24] as const]) NOT_PUBLIC.addSubnet(net, bits, 'ipv4');
for (const [net, bits] of [
  ...NON_PUBLIC_IPV6,
  ...([['::', 96], ['::ffff:0:0:0', 96], ['64:ff9b:1::', 48], ['100::', 64], ['2001::', 32], ['2001:2::', 48], ['2001:10::', 28], ['2001:20::', 28], ['fec0::', 10]] as const),
]) {
  NOT_PUBLIC.addSubnet(net, bits, 'ipv6');
}

type AddressClass = 'public' | 'loopback' | 'private';

/** An address as bytes: 4 for IPv4, 16 for IPv6. */
type AddressBytes = number[];

const DECIMAL_OCTET = '(?:25[0-5]|2[0-4]\\d|1\\d\\d|[1-9]?\\d)';
/** Four decimal numbers 0-255 without leading zeros: the one IPv4 spelling every parser reads alike. */
const DOTTED_QUAD = new RegExp(`^${DECIMAL_OCTET}(?:\\.${DECIMAL_OCTET}){3}$`);

function parseDottedQuad(text: string): AddressBytes | null {
  return DOTTED_QUAD.test(text) ? text.split('.').map(Number) : null;
}

/**
 * What inet_aton (and so getaddrinfo, and git's connect) makes of a numeric host: 1 to 4 parts,
 * each decimal, 0x-hex or 0-octal, the last filling the remaining bytes. Only used to tell the
 * tenant what a refused spelling means; null when inet_aton would not read it as a number either.
 */
function inetAton(text: string): string | null {
  const parts = text.split('.');
  if (parts.length > 4) return null;
  const values: number[] = [];
  for (const part of parts) {
    let value: number;
    if (/^0x[0-9a-f]*$/i.test(part)) value = part.length === 2 ? 0 : Number.parseInt(part.slice(2), 16);
    else if (/^0[0-7]*$/.test(part)) value = Number.parseInt(part, 8);
    else if (/^[1-9]\d*$/.test(part)) value = Number(part);
    else return null;
    values.push(value);
  }
  const last = values.pop() ?? 0;
  if (values.some((v) => v > 255) || last >= 2 ** (8 * (4 - values.length))) return null;
  const bytes = [...values];
  for (let i = 4 - values.length - 1; i >= 0; i--) bytes.push(Math.floor(last / 2 ** (8 * i)) % 256);
  return bytes.join('.');
}

/** Strict IPv6 text (RFC 4291, optionally ending in a dotted quad; no zone) to 16 bytes. */
function parseIPv6(text: string): AddressBytes | null {
  if (!/^[0-9a-f:.]+$/i.test(text)) return null;
  const halves = text.split('::');
  if (halves.length > 2) return null;
  const compressed = halves.length === 2;
  const groupsOf = (s: string) => (s === '' ? [] : s.split(':'));
  const before = groupsOf(halves[0] ?? '');
  const after = compressed ? groupsOf(halves[1] ?? '') : [];
  // A trailing dotted quad (::ffff:127.0.0.1) stands for the last two groups.
  const last = compressed ? after : before;
  let embedded: AddressBytes = [];
  if (last.at(-1)?.includes('.')) {
    const v4 = parseDottedQuad(last.pop() ?? '');
    if (!v4) return null;
    embedded = v4;
  }
  if ([...before, ...after].some((g) => !/^[0-9a-f]{1,4}$/i.test(g))) return null;
  const missing = 8 - embedded.length / 2 - before.length - after.length;
  if (compressed ? missing < 1 : missing !== 0) return null;
  const groups = [...before, ...Array<string>(compressed ? missing : 0).fill('0'), ...after].map((g) => Number.parseInt(g, 16));
  return [...groups.flatMap((g) => [g >> 8, g & 0xff]), ...embedded];
}

/** RFC 5952 text: lower-case, no leading zeros, the first longest run of 2+ zero groups as "::". */
function formatIPv6(bytes: AddressBytes): string {
  const groups = Array.from({ length: 8 }, (_, i) => ((bytes[2 * i] ?? 0) << 8) | (bytes[2 * i + 1] ?? 0));
  let bestStart = -1;
  let bestLength = 1;
  for (let i = 0; i < 8; i++) {
    let j = i;
    while (j < 8 && groups[j] === 0) j++;
    if (j - i > bestLength) [bestStart, bestLength] = [i, j - i];
    i = j;
  }
  const hex = (gs: number[]) => gs.map((g) => g.toString(16)).join(':');
  return bestStart < 0 ? hex(groups) : `${hex(groups.slice(0, bestStart))}::${hex(groups.slice(bestStart + bestLength))}`;
}

/** A resolver's answer or a literal, strictly parsed; null when it is neither spelling. */
function parseAddress(text: string): { text: string; bytes: AddressBytes } | null {
  const v4 = parseDottedQuad(text);
  if (v4) return { text, bytes: v4 };
  const v6 = parseIPv6(text);
  return v6 ? { text: formatIPv6(v6), bytes: v6 } : null;
}

function classifyIPv4(bytes: AddressBytes): AddressClass {
  const text = bytes.join('.');
  if (LOOPBACK.check(text, 'ipv4')) return 'loopback';
  if (NOT_PUBLIC.check(text, 'ipv4')) return 'private';
  return 'public';
}

function classify(bytes: AddressBytes): AddressClass {
  if (bytes.length === 4) return classifyIPv4(bytes);
  // IPv4-mapped (::ffff:a.b.c.d, in any spelling) is the IPv4 address inside.
  if (bytes.slice(0, 10).every((b) => b === 0) && bytes[10] === 0xff && bytes[11] === 0xff) return classifyIPv4(bytes.slice(12));
  // 6to4 (2002:AABB:CCDD::/48) is routed through the IPv4 address inside: public only if that is.
  if (bytes[0] === 0x20 && bytes[1] === 0x02 && classifyIPv4(bytes.slice(2, 6)) !== 'public') return 'private';
  const text = formatIPv6(bytes);
  if (LOOPBACK.check(text, 'ipv6')) return 'loopback';
  if (NOT_PUBLIC.check(text, 'ipv6')) return 'private';
  return 'public';
}

/** An address in a URL or in curl's resolve list: IPv6 in brackets. */
function hostInUrl(address: string): string {
  return address.includes(':') ? `[${address}]` : address;
}

/**
 * An xn-- label that decodes to a name and encodes back to itself. Said here rather than left to
 * the WHATWG URL check below: Node 20's parser refused broken punycode, Node 24's (newer IDNA
 * rules) keeps such a label as it is, and resolvers or IDN libraries may still read it otherwise.
 * Decoding fails as '' on Node 20 and as the label unchanged on Node 24.
 */
function isPunycode(label: string): boolean {
  const unicode = domainToUnicode(label);
  return unicode !== '' && unicode !== label && domainToASCII(unicode) === label;
}

/** A DNS name: LDH labels (international names in punycode, xn--), at most 253 characters. */
const DNS_LABEL = /^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$/;
/** The last label looks like a number: resolvers and WHATWG URL read such hosts as IPv4. */
const NUMERIC_LABEL = /^(?:\d+|0x[0-9a-f]*)$/;
/** RFC 3986 path characters (pchar and "/"), percent-escapes complete. */
const PATH = /^(?:\/(?:[A-Za-z0-9\-._~!$&'()*+,;=:@]|%[0-9A-Fa-f]{2})*)*$/;

/** A source URL as the one parse read it, before its host is resolved and judged. */
interface ParsedSource {
  scheme: SourceScheme;
  /** Lower-case name, dotted quad, or IPv6 address (RFC 5952, without brackets). */
  host: string;
  port: number;
  /** ":port" when the URL gave one, else empty: kept as written in the rebuilt URL. */
  portSuffix: string;
  path: string;
  /** Rebuilt from the parts above. */
  url: string;
  /** The host's address when it is a literal; null for a name. */
  literal: AddressBytes | null;
}

/**
 * Checks a source URL; throws ValidationError (400) with the reason. Returns what the URL means
 * and the pinned form git may be given.
 */
export async function checkSourceUrl(raw: string, rules: SourceRules, resolve: ResolveHost = resolveWithSystem): Promise<CheckedSource> {
  const field = rules.field ?? 'source_url';
  const source = parseSourceUrl(raw, rules, field);
  const { scheme, host, url, literal } = source;

  let addresses: Array<{ text: string; bytes: AddressBytes }>;
  if (literal) addresses = [{ text: host, bytes: literal }];
  else {
    const answers = await resolve(host).catch(() => []);
    if (answers.length === 0) throw new ValidationError(`${field} host ${host} does not resolve`);
    const parsed = answers.map(parseAddress);
    // Only addresses we can judge may be connected to (a zone-scoped answer, say, is not one).
    if (parsed.some((a) => a === null)) throw new ValidationError(`${field} host ${host} resolves to an address that cannot be checked`);
    addresses = [...new Map(parsed.flatMap((a) => (a ? [[a.text, a] as const] : []))).values()];
  }
  const classes = new Set(addresses.map((a) => classify(a.bytes)));
  if (classes.has('private')) throw new ValidationError(`${field} must point to a public address (private and link-local addresses are refused)`);
  if (classes.has('loopback')) {
    if (!rules.allowLoopback) throw new ValidationError(`${field} must point to a public address (loopback is refused)`);
    if (classes.size > 1) throw new ValidationError(`${field} host resolves to both loopback and public addresses`);
  } else if (scheme === 'http') {
    throw wrongScheme(field, rules); // http:// on loopback only, when allowed
  }

  const checked = addresses.map((a) => a.text);
  return { url, scheme, host, port: source.port, addresses: checked, pinned: pinnedForGit(source, checked) };
}

function wrongScheme(field: string, rules: SourceRules): ValidationError {
  return new ValidationError(`${field} must be ${rules.httpsOnly ? 'an https://' : 'an https:// or git://'} URL`);
}

/** The one parse of a tenant's string, strict enough that every other parser reads the result alike. */
function parseSourceUrl(raw: string, rules: SourceRules, field: string): ParsedSource {
  // Before any parsing: what parsers disagree on. WHATWG URL drops tabs and newlines and reads
  // "\" as "/" in https URLs; curl does neither; non-ASCII hosts go through IDNA mapping in one
  // parser and byte-for-byte in another.
  if (raw.length > URL_MAX_LENGTH) throw new ValidationError(`${field} is longer than ${URL_MAX_LENGTH} characters`);
  const odd = /[^\x21-\x7e]/.exec(raw)?.[0];
  if (odd !== undefined) {
    if (/\s/.test(odd)) throw new ValidationError(`${field} must not contain whitespace`);
    if (odd < ' ' || odd === '\x7f') throw new ValidationError(`${field} must not contain control characters`);
    throw new ValidationError(`${field} must be plain ASCII (write international host names in punycode, xn--)`);
  }
  if (raw.includes('\\')) throw new ValidationError(`${field} must not contain a backslash`);

  // scheme "://" authority path, nothing after. A query or fragment is refused rather than
  // dropped: git appends "/info/refs?service=..." to the URL, so a query has no use, a fragment
  // is never sent, and both are where parsers disagree on where the authority ends.
  const parts = /^([A-Za-z][A-Za-z0-9+.-]*):\/\/([^/?#]*)([^?#]*)(.*)$/.exec(raw);
  if (!parts) throw wrongScheme(field, rules);
  const [, schemeText = '', authority = '', path = '', after = ''] = parts;
  const scheme = schemeText.toLowerCase();
  if (scheme !== 'https' && scheme !== 'git' && scheme !== 'http') throw wrongScheme(field, rules);
  if (rules.httpsOnly && scheme !== 'https') throw wrongScheme(field, rules);
  if (after) throw new ValidationError(`${field} must not have a query (?) or a fragment (#)`);
  if (authority.includes('@')) throw new ValidationError(`${field} must not carry credentials`);
  if (authority.startsWith('[') && authority.includes('%')) throw new ValidationError(`${field} must not name an IPv6 zone (%)`);
  if (authority.includes('%')) throw new ValidationError(`${field} host must not be percent-encoded`);
  if (!PATH.test(path)) throw new ValidationError(`${field} path holds characters a URL does not allow (percent-encode them)`);

  const authorityParts = /^(\[[^\]]*\]|[^:[\]]*)(?::(\d*))?$/.exec(authority);
  if (!authorityParts) throw new ValidationError(`${field} must be host or host:port after ${scheme}://`);
  const [, hostText = '', portText] = authorityParts;
  if (!hostText) throw new ValidationError(`${field} has no host`);
  let port = DEFAULT_PORTS[scheme];
  if (portText !== undefined) {
    port = /^[1-9]\d{0,4}$/.test(portText) ? Number(portText) : 0;
    if (port < 1 || port > 65535) throw new ValidationError(`${field} port must be a number from 1 to 65535`);
  }

  // The host: an IPv6 literal, a canonical dotted quad, or a name to resolve.
  let host: string;
  let literal: AddressBytes | null = null;
  if (hostText.startsWith('[')) {
    literal = parseIPv6(hostText.slice(1, -1));
    if (!literal) throw new ValidationError(`${field} host ${hostText} is not an IPv6 address`);
    host = formatIPv6(literal);
  } else {
    host = hostText.toLowerCase();
    const labels = host.split('.');
    if (NUMERIC_LABEL.test(labels.at(-1) ?? '')) {
      literal = parseDottedQuad(host);
      if (!literal) {
        const read = inetAton(host);
        throw new ValidationError(`${field} host ${hostText} is not a standard IPv4 address${read ? ` (resolvers read it as ${read})` : ''}: write four decimal numbers, e.g. 192.0.2.1`);
      }
    } else if (host.endsWith('.')) {
      throw new ValidationError(`${field} host must not end with a dot`);
    } else if (host.length > 253 || !labels.every((l) => DNS_LABEL.test(l))) {
      throw new ValidationError(`${field} host ${hostText} is not a valid host name (letters, digits and hyphens; punycode for international names)`);
    } else {
      const broken = labels.find((l) => l.startsWith('xn--') && !isPunycode(l));
      if (broken) throw new ValidationError(`${field} host ${hostText} is read differently by URL parsers (${broken} is not a valid international label in punycode)`);
    }
  }
  const portSuffix = portText === undefined ? '' : `:${port}`;
  const url = `${scheme}://${hostInUrl(host)}${portSuffix}${path}`;

  // Defence in depth: WHATWG URL must read the rebuilt URL's host and port as this parse did.
  // (Broken punycode is refused above: Node 24's parser no longer refuses it.)
  const reread = URL.canParse(url) ? new URL(url) : null;
  const rereadPort = reread?.port ? Number(reread.port) : DEFAULT_PORTS[scheme];
  if (reread?.hostname !== hostInUrl(host) || rereadPort !== port) throw new ValidationError(`${field} host ${hostText} is read differently by URL parsers`);
  return { scheme, host, port, portSuffix, path, url, literal };
}

/**
 * How git is made to connect to the checked addresses only. A literal needs nothing. For a name
 * over http(s), curl gets the addresses through its resolve list (the URL keeps the name, so TLS
 * verifies the certificate and the server sees its own Host); git:// has no such setting, so the
 * URL names the first checked address itself.
 */
function pinnedForGit(source: ParsedSource, addresses: string[]): CheckedSource['pinned'] {
  const { scheme, host, port, portSuffix, path, url } = source;
  if (source.literal) return { url, gitConfig: [] };
  const [first = host] = addresses;
  if (scheme === 'git') return { url: `git://${hostInUrl(first)}${portSuffix}${path}`, gitConfig: [] };
  return { url, gitConfig: [`http.curloptResolve=${host}:${port}:${addresses.map(hostInUrl).join(',')}`] };
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
