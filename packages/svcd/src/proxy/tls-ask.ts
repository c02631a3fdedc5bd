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
// the storage already holds a certificate that needs no renewal (Caddy loads it from there and
// orders nothing), or when this svcd claims the name in the store (one claimant at a time among
// the svcd sharing the storage: the claim names the storage's id, `CertificateOrderClaims`).
// Otherwise it waits for the claimant's certificate to appear, up to 7 s and 32 questions at once,
// and says no when none did: that handshake fails, and a later one finds it stored.
import { randomBytes } from 'node:crypto';
import { link, mkdir, readFile, unlink, writeFile } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import { join } from 'node:path';
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

/**
 * Who may have a certificate ordered for a name now: one svcd at a time, across every svcd on the
 * store. A key names the storage as well as the name: svcd with storages of their own each order.
 */
export interface CertificateOrderClaims {
  /** Claims `key` for this svcd's Caddy, or renews this svcd's claim; false while another svcd holds it. */
  claim(key: string): Promise<boolean>;
  /** Gives up this svcd's claim (nothing will be ordered under it). */
  release(key: string): Promise<void>;
}

/**
 * How long a question waits for another svcd's order. Caddy gives up on its question after 10 s
 * (Caddy 2.6's ask client), and a handshake it answers late fails anyway.
 */
export const ASK_WAIT_MS = 7_000;
/** How often a waiting question looks at the storage. */
const ASK_POLL_MS = 200;
/** How often a waiting question tries the claim again (a store write: less often than the storage). */
const CLAIM_RETRY_MS = 2_000;
/**
 * Questions that may wait at once: routed names are the tenants' to pick, and one whose orders keep
 * failing would otherwise park questions without bound. Past it, the answer is no at once.
 */
export const ASK_WAITING_MAX = 32;
/**
 * A stored certificate with less than this share of its lifetime left may be due for renewal
 * (Caddy renews in the last third): renewing is ordering, so it needs the claim too.
 */
const RENEWAL_SHARE = 0.4;
/** The file that names a certificate storage, so that claims are per storage (storageId()). */
const STORAGE_ID_FILE = 'svc-storage-id';

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

/** The answer to one question, and the claim it rests on (given back when Caddy never hears it). */
interface Answer {
  yes: boolean;
  claimed: string | null;
}

export class TlsAskServer {
  private server: Server | null = null;
  private storage: string | null = null;
  private waiting = 0;

  constructor(
    private readonly listen: { host: string; port: number },
    private readonly deps: TlsAskDeps,
  ) {}

  /** Starts listening; answers the URL Caddy is to ask. */
  async start(): Promise<string> {
    this.storage = await storageId(this.deps.storageDir);
    const server = createServer((req, res) => {
      const url = new URL(req.url ?? '/', 'http://ask');
      if (req.method !== 'GET' || url.pathname !== '/ask') {
        res.statusCode = 404;
        res.end();
        return;
      }
      const domain = url.searchParams.get('domain') ?? '';
      void this.answer(domain).then(
        (answer) => {
          this.deps.log.debug({ domain, yes: answer.yes }, 'on-demand TLS question');
          // Caddy gave up meanwhile: nothing will be ordered under this claim.
          if (answer.claimed && res.destroyed) void this.deps.claims.release(answer.claimed).catch(() => {});
          res.statusCode = answer.yes ? 200 : 404;
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
  async answer(domain: string): Promise<Answer> {
    const { routedHosts, storageDir, claims, clock, timers } = this.deps;
    const name = domain.toLowerCase();
    const no = { yes: false, claimed: null };
    if (!wantsCertificate(name, routedHosts())) return no;
    if (needsNoRenewal(await storedCertificate(storageDir, name), clock.now())) return { yes: true, claimed: null };
    const key = `${this.storage ?? ''}:${name}`;
    if (await claims.claim(key)) return { yes: true, claimed: key };
    if (this.waiting >= ASK_WAITING_MAX) return no;
    this.waiting++;
    try {
      const deadline = clock.now() + ASK_WAIT_MS;
      let claimTriedAt = clock.now();
      while (clock.now() < deadline) {
        await new Promise<void>((resolve) => timers.setTimeout(resolve, ASK_POLL_MS));
        // Unrouted meanwhile (a domain removed): no order.
        if (!wantsCertificate(name, routedHosts())) return no;
        if (needsNoRenewal(await storedCertificate(storageDir, name), clock.now())) return { yes: true, claimed: null };
        if (clock.now() - claimTriedAt >= CLAIM_RETRY_MS && clock.now() < deadline) {
          claimTriedAt = clock.now();
          if (await claims.claim(key)) return { yes: true, claimed: key };
        }
      }
      return no;
    } finally {
      this.waiting--;
    }
  }

  async close(): Promise<void> {
    const server = this.server;
    if (!server) return;
    await new Promise<void>((resolve) => server.close(() => resolve()));
  }
}

/**
 * The id of a certificate storage, written into it by the first svcd that uses it: svcd that
 * share the storage share the id, and so the claims. `write`: node's (a test's, slower).
 */
export async function storageId(dir: string, write: (path: string, data: string, o: { flag: 'wx'; mode: number }) => Promise<void> = writeFile): Promise<string> {
  const file = join(dir, STORAGE_ID_FILE);
  await mkdir(dir, { recursive: true, mode: 0o700 });
  // Written whole under a name of its own, then linked into place: a link fails when the name
  // exists, so the first svcd's id stands, and no svcd reads the file half-written (with `wx` on
  // the name itself, one started at the same moment read it empty: seen in make test).
  const written = `${file}.${randomBytes(4).toString('hex')}`;
  try {
    await write(written, randomBytes(8).toString('hex'), { flag: 'wx', mode: 0o600 });
    await link(written, file);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
  } finally {
    await unlink(written).catch(() => {}); // never written, or gone: nothing to take back
  }
  const id = (await readFile(file, 'utf8')).trim();
  // An empty file is what an svcd before this version left when it died between creating and
  // writing it: removed, it is made again (every svcd sharing the storage must be restarted then).
  if (!/^[0-9a-f]{16}$/.test(id)) throw new Error(`${file} does not hold a storage id: remove it (and restart every svcd that shares this storage)`);
  return id;
}
