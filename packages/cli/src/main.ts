#!/usr/bin/env node
// svc, the command-line client. Tables for people, --json for scripts; API errors are printed
// as the API's {error} message with a non-zero exit.
import { Command } from 'commander';
import { ApiError, SvcClient } from '@svc/client';
import { effectiveConfig, writeConfig } from './config-file.js';

const program = new Command('svc').description('svc command-line client').option('--json', 'print JSON instead of tables');

function client(): SvcClient {
  const c = effectiveConfig();
  return new SvcClient({
    baseUrl: c.url,
    apiKey: c.apiKey,
    adminToken: process.env.SVC_ADMIN_TOKEN,
    bootstrapToken: process.env.SVC_BOOTSTRAP_TOKEN,
  });
}

function print(value: unknown): void {
  const json = program.opts<{ json?: boolean }>().json === true;
  if (json || typeof value !== 'object' || value === null) {
    process.stdout.write(`${JSON.stringify(value, null, json ? 2 : undefined)}\n`);
    return;
  }
  const rows = Array.isArray(value) ? (value as Record<string, unknown>[]) : [value as Record<string, unknown>];
  if (rows.length === 0) {
    process.stdout.write('(none)\n');
    return;
  }
  const cols = [...new Set(rows.flatMap((r) => Object.keys(r)))];
  const cell = (v: unknown) => (v === null || v === undefined ? '-' : typeof v === 'object' ? JSON.stringify(v) : String(v));
  const widths = cols.map((c) => Math.max(c.length, ...rows.map((r) => cell(r[c]).length)));
  const line = (vals: string[]) => vals.map((v, i) => v.padEnd(widths[i] ?? 0)).join('  ').trimEnd();
  process.stdout.write(`${line(cols.map((c) => c.toUpperCase()))}\n`);
  for (const r of rows) process.stdout.write(`${line(cols.map((c) => cell(r[c])))}\n`);
}

function run<A extends unknown[]>(fn: (...args: A) => Promise<unknown>) {
  return async (...args: A) => {
    try {
      const out = await fn(...args);
      if (out !== undefined) print(out);
    } catch (err) {
      if (err instanceof ApiError) {
        process.stderr.write(`svc: ${err.message} (HTTP ${err.status})\n`);
        process.exitCode = 1;
        return;
      }
      process.stderr.write(`svc: ${(err as Error).message}\n`);
      process.exitCode = 1;
    }
  };
}

program
  .command('login')
  .description('store the API URL and key in the config file (0600)')
  .requiredOption('--url <url>', 'svcd base URL, e.g. http://127.0.0.1:8080')
  .requiredOption('--key <apiKey>', 'API key')
  .action(
    run(async (o: { url: string; key: string }) => {
      const t = await new SvcClient({ baseUrl: o.url, apiKey: o.key }).tenant();
      const path = writeConfig({ url: o.url, apiKey: o.key });
      process.stderr.write(`logged in as ${t.name}; saved to ${path}\n`);
      return undefined;
    }),
  );

program
  .command('register')
  .description('register a tenant (SVC_BOOTSTRAP_TOKEN unless the server has open registration) and log in')
  .requiredOption('--name <name>')
  .requiredOption('--email <email>')
  .option('--url <url>', 'svcd base URL')
  .action(
    run(async (o: { name: string; email: string; url?: string }) => {
      const c = client();
      const url = o.url ?? c.baseUrl;
      const r = await new SvcClient({ baseUrl: url, bootstrapToken: c.bootstrapToken }).register({ name: o.name, email: o.email });
      writeConfig({ url, apiKey: r.api_key });
      return r;
    }),
  );

program.command('tenant').description('show the tenant').action(run(() => client().tenant()));
program.command('usage').description('usage against quota').action(run(() => client().usage()));
program
  .command('health')
  .description('detailed health of the platform')
  .option('--fresh', 'bypass the 30 s cache')
  .action(run((o: { fresh?: boolean }) => client().healthDetailed(o.fresh === true)));
program
  .command('activity')
  .description('recent activity')
  .option('--limit <n>', 'entries', (v) => Number(v))
  .option('--action <action>')
  .action(run((o: { limit?: number; action?: string }) => client().activity({ limit: o.limit, action: o.action })));

const keys = program.command('keys').description('API keys');
keys.command('list').action(run(() => client().listKeys()));
keys
  .command('create')
  .option('--name <name>')
  .option('--expires-in <seconds>', 'lifetime in seconds', (v) => Number(v))
  .action(run((o: { name?: string; expiresIn?: number }) => client().createKey({ name: o.name, expires_in: o.expiresIn })));
keys
  .command('revoke <keyID>')
  .action(run((id: string) => client().revokeKey(id)));

const kanban = program.command('kanban').description("the tenant's task board");
kanban.command('create').description('create it (asynchronous: `svc kanban show` until url is set)').action(run(() => client().createKanban()));
kanban.command('show').action(run(() => client().kanban()));
kanban.command('admin-token').description("reveal the board's admin token (audit-logged)").action(run(() => client().kanbanAdminToken()));
kanban
  .command('delete')
  .description('delete the board with its data')
  .action(
    run(async () => {
      await client().deleteKanban();
      process.stderr.write('task board deleted\n');
      return undefined;
    }),
  );

await program.parseAsync();
