import { SvcClient, type ClientOptions } from '@svc/client';
import { effectiveConfig } from './config-file.js';
import { nodeHttpTransport } from './http-transport.js';
import type { Output } from './output.js';

/** What every command group gets: the output and a client built from the config file and SVC_*. */
export interface Cli {
  out: Output;
  client: () => SvcClient;
}

/** A client whose requests go out through node:http (http-transport.ts says why). */
export function cliClient(opts: Omit<ClientOptions, 'transport'>): SvcClient {
  return new SvcClient({ ...opts, transport: nodeHttpTransport });
}

export function clientFromConfig(): SvcClient {
  const c = effectiveConfig();
  return cliClient({
    baseUrl: c.url,
    apiKey: c.apiKey,
    adminToken: process.env.SVC_ADMIN_TOKEN,
    bootstrapToken: process.env.SVC_BOOTSTRAP_TOKEN,
  });
}
