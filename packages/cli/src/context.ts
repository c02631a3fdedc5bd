import { SvcClient } from '@svc/client';
import { effectiveConfig } from './config-file.js';
import type { Output } from './output.js';

/** What every command group gets: the output and a client built from the config file and SVC_*. */
export interface Cli {
  out: Output;
  client: () => SvcClient;
}

export function clientFromConfig(): SvcClient {
  const c = effectiveConfig();
  return new SvcClient({
    baseUrl: c.url,
    apiKey: c.apiKey,
    adminToken: process.env.SVC_ADMIN_TOKEN,
    bootstrapToken: process.env.SVC_BOOTSTRAP_TOKEN,
  });
}
