// Address ranges that are not the public internet, in one place for the two rules that need
// them: the build and sync source check (a tenant's URL must name a public host) and the tenant
// egress firewall (tenant workloads may not open connections into these ranges).
// Loopback is not listed: the source check treats it on its own (allowed by operator flag), and
// no packet to it is ever forwarded.

/** RFC 1918, CGNAT, link-local (cloud metadata among it), "this network", IETF protocol
 * assignments, documentation and benchmarking nets, multicast and reserved. */
export const NON_PUBLIC_IPV4: ReadonlyArray<readonly [string, number]> = [
  ['0.0.0.0', 8],
  ['10.0.0.0', 8],
  ['100.64.0.0', 10],
  // Azure's WireServer (and platform DNS): a cloud platform endpoint outside link-local.
  ['168.63.129.16', 32],
  ['169.254.0.0', 16],
  ['172.16.0.0', 12],
  ['192.0.0.0', 24],
  ['192.0.2.0', 24],
  ['192.168.0.0', 16],
  ['198.18.0.0', 15],
  ['198.51.100.0', 24],
  ['203.0.113.0', 24],
  ['224.0.0.0', 4],
  ['240.0.0.0', 4],
];

/** Unspecified, unique-local (ULA), link-local, multicast, documentation and NAT64. */
export const NON_PUBLIC_IPV6: ReadonlyArray<readonly [string, number]> = [
  ['::', 128],
  ['fc00::', 7],
  ['fe80::', 10],
  ['ff00::', 8],
  ['2001:db8::', 32],
  ['64:ff9b::', 96],
];
