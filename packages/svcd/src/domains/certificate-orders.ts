// One svcd at a time orders a host's certificate, whichever proxy a client's first handshake
// reaches: the claim is a lease in the store, taken when Caddy asks whether it may order
// (proxy/tls-ask.ts says why Caddy's own storage lock is not enough). It covers every certified
// host, the base domain's as well as tenants' custom domains.
import type { Clock } from '../clock.js';
import type { CertificateOrderClaims } from '../proxy/caddy.js';
import type { JobLockStore } from '../store/job-locks.js';

/**
 * How long a claim holds without a renewal: longer than Caddy spends on one order, retries
 * included (up to its 5-minute renewal deadline). Waiting svcd answer as soon as the certificate
 * is stored, so a long claim costs nothing when the order succeeds; a claimant that dies or
 * whose order fails blocks the others' orders for no longer than this.
 */
export const CERTIFICATE_ORDER_CLAIM_MS = 6 * 60_000;

export class CertificateOrders implements CertificateOrderClaims {
  constructor(private readonly deps: { jobLocks: JobLockStore; clock: Clock; holder: string }) {}

  claim(key: string): Promise<boolean> {
    return this.deps.jobLocks.tryAcquire(`certificate-order:${key}`, this.deps.holder, this.deps.clock.now(), CERTIFICATE_ORDER_CLAIM_MS);
  }

  release(key: string): Promise<void> {
    return this.deps.jobLocks.release(`certificate-order:${key}`, this.deps.holder);
  }
}
