// Custom domains of a service (beyond the spec): a tenant adds a host name it owns, proves the
// ownership with a DNS TXT record, and svc routes the name to the service (over HTTPS with a
// certificate from the ACME server when svcd runs with --tls on).
import { Type, type Static } from 'typebox';
import { UnixSeconds } from './common.js';

/**
 * The longest name a tenant can add: RFC 1035's 253 characters less the 15 of the
 * `_svc-challenge.` label its TXT record lives under.
 */
export const HOSTNAME_MAX = 238;

/** The name of the TXT record that proves ownership of `hostname`. */
export function domainChallengeName(hostname: string): string {
  return `_svc-challenge.${hostname}`;
}

export const DOMAIN_STATUSES = ['pending_verification', 'issuing', 'active', 'failed'] as const;
export type DomainStatus = (typeof DOMAIN_STATUSES)[number];

export const CreateDomainRequest = Type.Object(
  {
    hostname: Type.String({
      minLength: 1,
      maxLength: 512,
      description:
        'a host name the tenant owns (shop.example.com or example.com; letters, digits and hyphens, internationalized names in their xn-- form; no wildcards, IP addresses, names under the base domain or under localhost, special-use names such as .local, .internal, .arpa, .onion; at most 238 characters); a trailing dot is dropped and letters are lower-cased',
    }),
  },
  { additionalProperties: false },
);
export type CreateDomainRequest = Static<typeof CreateDomainRequest>;

export const Domain = Type.Object({
  id: Type.String(),
  service_id: Type.String(),
  hostname: Type.String(),
  status: Type.Union(
    [Type.Literal('pending_verification'), Type.Literal('issuing'), Type.Literal('active'), Type.Literal('failed')],
    {
      description:
        'pending_verification: waiting for the TXT record; issuing: proven and routed, the certificate is being obtained (until the first certificate, also while failed, plain HTTP serves the name instead of redirecting to HTTPS); active: routed (and certified with --tls on); failed: see last_error (svc keeps checking, and POST .../verify checks now)',
    },
  ),
  verification: Type.Object(
    {
      type: Type.Literal('dns_txt'),
      name: Type.String({ description: 'the TXT record to create: _svc-challenge.<hostname>' }),
      value: Type.String({ description: "the record's value; keep the record: ownership is re-checked every few hours" }),
    },
    { description: 'how to prove ownership of the host name' },
  ),
  url: Type.Union([Type.String(), Type.Null()], { description: 'where the service answers under this name; null while not routed (or when svcd runs without a proxy)' }),
  last_error: Type.Union([Type.String(), Type.Null()], { description: 'what stops the domain from being active, in words the tenant can act on' }),
  verified_at: Type.Union([UnixSeconds, Type.Null()]),
  certificate_expires_at: Type.Union([UnixSeconds, Type.Null()], { description: 'when the certificate served for the name expires (with --tls on); svc renews it before' }),
  checked_at: Type.Union([UnixSeconds, Type.Null()], { description: 'the last check of the record (or of the certificate)' }),
  created_at: UnixSeconds,
});
export type Domain = Static<typeof Domain>;
export const DomainList = Type.Array(Domain);

export const DomainParams = Type.Object({
  serviceID: Type.String({ minLength: 1, maxLength: 64 }),
  domainID: Type.String({ minLength: 1, maxLength: 64 }),
});
