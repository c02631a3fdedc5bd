// The operator listener: GET /metrics on its own address (--metrics-listen), apart from the API,
// so that it can stay on loopback (or a private network) while the API is public.
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { OperatorMetrics } from './operator-metrics.js';

export class MetricsListener {
  private server: http.Server | null = null;

  constructor(private readonly metrics: OperatorMetrics) {}

  /** Starts listening; resolves with the bound address (port 0 resolved). Fails when the address is taken. */
  async listen(address: { host: string; port: number }): Promise<{ host: string; port: number }> {
    const server = http.createServer((req, res) => {
      const path = (req.url ?? '/').split('?')[0];
      if (path !== '/metrics' || (req.method !== 'GET' && req.method !== 'HEAD')) {
        res.writeHead(404, { 'content-type': 'text/plain' }).end('not found: GET /metrics\n');
        return;
      }
      this.metrics.text().then(
        ({ contentType, body }) => res.writeHead(200, { 'content-type': contentType }).end(req.method === 'HEAD' ? undefined : body),
        (err: unknown) => res.writeHead(500, { 'content-type': 'text/plain' }).end(`metrics failed: ${(err as Error).message}\n`),
      );
    });
    await new Promise<void>((resolve, reject) => {
      server.once('error', (err) => reject(new Error(`--metrics-listen ${address.host}:${address.port}: ${err.message}`)));
      server.listen(address.port, address.host, () => resolve());
    });
    this.server = server;
    return this.address() as { host: string; port: number };
  }

  /** Where it listens, or null when it does not. */
  address(): { host: string; port: number } | null {
    const bound = this.server?.address() as AddressInfo | null | undefined;
    return bound ? { host: bound.address, port: bound.port } : null;
  }

  async close(): Promise<void> {
    const server = this.server;
    this.server = null;
    if (!server) return;
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  }
}
