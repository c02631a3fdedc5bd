// Caddy's on-demand TLS question, answered by svcd: before it orders a certificate for a name a
// client sent in its handshake, Caddy asks GET <askUrl>?domain=<name>, and orders only on a 200.
// svcd says yes only for a certified host (under the base domain, or a tenant's proven custom
// domain) that the configuration it last pushed to Caddy routes, so that a client cannot make svc order certificates for other names. It answers
// from that set in memory: anyone can send handshakes with random names, and each must not cost
// a store query. It listens on loopback only (config.ts): the question is Caddy's, on svcd's host.
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Logger } from 'pino';
import { isCertified } from './caddy-config.js';

/** Whether svc wants a certificate for `domain`: a routed host served over HTTPS. */
export function wantsCertificate(domain: string, routedHosts: ReadonlySet<string>): boolean {
  const name = domain.toLowerCase();
  return isCertified(name) && routedHosts.has(name);
}

export class TlsAskServer {
  private server: Server | null = null;

  constructor(
    private readonly listen: { host: string; port: number },
    /** The hosts of the configuration Caddy has now (lower case). */
    private readonly routedHosts: () => ReadonlySet<string>,
    private readonly log: Logger,
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
      const yes = wantsCertificate(domain, this.routedHosts());
      this.log.debug({ domain, yes }, 'on-demand TLS question');
      res.statusCode = yes ? 200 : 404;
      res.end();
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

  async close(): Promise<void> {
    const server = this.server;
    if (!server) return;
    await new Promise<void>((resolve) => server.close(() => resolve()));
  }
}
