// Caddy's on-demand TLS question, answered by svcd: before it orders a certificate for a name a
// client sent in its handshake, Caddy asks GET <askUrl>?domain=<name>, and orders only on a 200.
// svcd says yes only for a certified host (under the base domain, or a tenant's proven custom
// domain) that the configuration it last pushed to Caddy routes, so that a client cannot make svc
// order certificates for other names. That first check is made from the set in memory: anyone can
// send handshakes with random names, and each must not cost a store query. It listens on loopback
// only (config.ts): the question is Caddy's, on svcd's host.
//
// Several svcd sharing --tls-storage must order once per name, and Caddy 2.6's own storage lock
// does not hold: its file lock is created empty and written a moment later, and a Caddy that reads
// it in between takes it for a crashed holder's and orders too (seen here: 11 orders for 10 names
// handshaken on two proxies at once). So the question also serializes orders: svcd says yes when
// the shared storage already holds a certificate that needs no renewal (Caddy loads it from there
// and orders nothing), or when this svcd claims the name in the store (one claimant at a time for
// all svcd, `CertificateOrderClaims`). Otherwise it waits for the claimant's certificate to appear,
// and says no when none did in time: that handshake fails, and the client's next one finds it.
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Logger } from 'pino';
import type { Clock, Timers } from '../clock.js';
import { isCertified } from './caddy-config.js';
import { storedCertificate } from './tls-storage.js';

/** Whether svc wants a certificate for `domain`: a routed host served over HTTPS. */
export function wantsCertificate(domain: string, routedHosts: ReadonlySet<string>): boolean {
  const name = domain.toLowerCase();
  return isCertified(name) && routedHosts.has(name);
}

/** Who may have a certificate ordered for a name now: one svcd at a time, across every svcd on the store. */
export interface CertificateOrderClaims {
  /** Claims `name` for this svcd's Caddy, or renews this svcd's claim; false while another svcd holds it. */
  claim(name: string): Promise<boolean>;
}

/**
 * How long a question waits for another svcd's order. Caddy gives up on its question after 10 s
 * (Caddy 2.6's ask client), and a handshake it answers late fails anyway.
 */
export const ASK_WAIT_MS = 7_000;
/** How often a waiting question looks at the storage and the claim again. */
const ASK_POLL_MS = 200;
/**
 * A stored certificate with less than this share of its lifetime left may be due for renewal
 * (Caddy renews in the last third): renewing is ordering, so it needs the claim too.
 */
const RENEWAL_SHARE = 0.4;

/** Whether a stored certificate's validity (unix seconds) leaves it clear of Caddy's renewal window at `nowMs`. */
export function needsNoRenewal(cert: { validFrom: number; validTo: number } | null, nowMs: number): boolean {
  if (!cert) return false;
  const left = cert.validTo * 1000 - nowMs;
  return left > (cert.validTo - cert.validFrom) * 1000 * RENEWAL_SHARE;
}

export interface TlsAskDeps {
  /** The hosts of the configuration Caddy has now (lower case). */
  routedHosts: () => ReadonlySet<string>;
  /** Caddy's certificate storage (--tls-storage), shared by the svcd that share it. */
  storageDir: string;
  claims: CertificateOrderClaims;
  clock: Clock;
  timers: Timers;
  log: Logger;
}

export class TlsAskServer {
  private server: Server | null = null;

  constructor(
    private readonly listen: { host: string; port: number },
    private readonly deps: TlsAskDeps,
  ) {}

  /** Starts listening; answers the URL Caddy is to ask. */
  async start(): Promise<string> {
    const server = createServer((req, res) => {
      const url = new URL(req.url ?? '/', 'http://ask');
      if (req.method !== 'GET' || url.pathname !== '/ask') {
        res.statusCode = 404;
        res.end();
        return;
      }
      const domain = url.searchParams.get('domain') ?? '';
      void this.answer(domain).then(
        (yes) => {
          this.deps.log.debug({ domain, yes }, 'on-demand TLS question');
          res.statusCode = yes ? 200 : 404;
          res.end();
        },
        (err: unknown) => {
          // Without the store no claim can be made: no order rather than a second one.
          this.deps.log.warn({ err, domain }, 'on-demand TLS question failed');
          res.statusCode = 503;
          res.end();
        },
      );
    });
    this.server = server;
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(this.listen.port, this.listen.host, () => resolve());
    });
    const { port } = server.address() as AddressInfo;
    const host = this.listen.host.includes(':') ? `[${this.listen.host}]` : this.listen.host;
    return `http://${host}:${port}/ask`;
  }

  /** Whether Caddy may go on with `domain`: routed, and either stored already or claimed by this svcd. */
  async answer(domain: string): Promise<boolean> {
    const { routedHosts, storageDir, claims, clock } = this.deps;
    if (!wantsCertificate(domain, routedHosts())) return false;
    const name = domain.toLowerCase();
    const deadline = clock.now() + ASK_WAIT_MS;
    for (;;) {
      if (needsNoRenewal(await storedCertificate(storageDir, name), clock.now())) return true;
      if (await claims.claim(name)) return true;
      if (clock.now() >= deadline) return false;
      await new Promise<void>((resolve) => this.deps.timers.setTimeout(resolve, ASK_POLL_MS));
    }
  }

  async close(): Promise<void> {
    const server = this.server;
    if (!server) return;
    await new Promise<void>((resolve) => server.close(() => resolve()));
  }
}
