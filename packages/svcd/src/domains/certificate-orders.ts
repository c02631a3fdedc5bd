// One svcd at a time orders a host's certificate, whichever proxy a client's first handshake
// reaches: the claim is a lease in the store, taken when Caddy asks whether it may order
// (proxy/tls-ask.ts says why Caddy's own storage lock is not enough). It covers every certified
// host, the base domain's as well as tenants' custom domains.
import type { Clock } from '../clock.js';
import type { CertificateOrderClaims } from '../proxy/caddy.js';
import type { JobLockStore } from '../store/job-locks.js';

/**
 * How long a claim holds without a renewal: long enough for one order (an ACME order with its
 * validation takes seconds, a slow CA's retries up to about a minute). A claimant that dies
 * blocks the others for no longer than this.
 */
export const CERTIFICATE_ORDER_CLAIM_MS = 120_000;

export class CertificateOrders implements CertificateOrderClaims {
  constructor(private readonly deps: { jobLocks: JobLockStore; clock: Clock; holder: string }) {}

  claim(name: string): Promise<boolean> {
    return this.deps.jobLocks.tryAcquire(`certificate-order:${name}`, this.deps.holder, this.deps.clock.now(), CERTIFICATE_ORDER_CLAIM_MS);
  }
}
