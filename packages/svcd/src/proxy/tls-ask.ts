// Caddy's on-demand TLS question, answered by svcd: before it orders a certificate for a name a
// client sent in its handshake, Caddy asks GET <askUrl>?domain=<name>, and orders only on a 200.
// svcd says yes only for a host it routes right now under the base domain, so that a client
// cannot make svc order certificates for arbitrary names (and spend the ACME account's rate
// limits). It listens on loopback only (config.ts): the question is Caddy's, on svcd's host.
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Logger } from 'pino';

export class TlsAskServer {
  private server: Server | null = null;

  constructor(
    private readonly listen: { host: string; port: number },
    private readonly baseDomain: string,
    /** Every host svc routes now (the store's view, as the proxy's configuration is built from). */
    private readonly routedHosts: () => Promise<string[]>,
    private readonly log: Logger,
  ) {}

  /** Starts listening; answers the URL Caddy is to ask. */
  async start(): Promise<string> {
    const server = createServer((req, res) => {
      void this.answer(req.url ?? '').then(
        (yes) => {
          res.statusCode = yes ? 200 : 404;
          res.end();
        },
        (err: unknown) => {
          // The store away: no certificate now (Caddy asks again at the next handshake).
          this.log.warn({ err }, 'the on-demand TLS question could not be answered');
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

  private async answer(url: string): Promise<boolean> {
    const domain = new URL(url, 'http://ask').searchParams.get('domain')?.toLowerCase() ?? '';
    if (!domain.endsWith(`.${this.baseDomain.toLowerCase()}`)) return false;
    const yes = (await this.routedHosts()).some((h) => h.toLowerCase() === domain);
    this.log.info({ domain, yes }, 'on-demand TLS question');
    return yes;
  }

  async close(): Promise<void> {
    const server = this.server;
    if (!server) return;
    await new Promise<void>((resolve) => server.close(() => resolve()));
  }
}
