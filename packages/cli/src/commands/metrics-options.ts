import { Option, type Command } from 'commander';

export interface MetricsOptions {
  period?: 'hourly' | 'daily';
  since?: string;
  until?: string;
}

/** The metrics routes' query, as options. */
export function metricsOptions(cmd: Command): Command {
  return cmd
    .addOption(new Option('--period <period>', 'rollup period (default daily)').choices(['hourly', 'daily']))
    .option('--since <time>', 'RFC 3339, e.g. 2026-11-01T00:00:00Z')
    .option('--until <time>', 'RFC 3339 (default now)');
}
