// The tenant's own account: login and registration, the tenant, usage, keys, activity, health,
// and the operator's recovery commands (SVC_ADMIN_TOKEN).
import type { Command } from 'commander';
import { writeConfig } from '../config-file.js';
import { cliClient, type Cli } from '../context.js';
import { action, integer } from '../output.js';
import { metricsOptions, type MetricsOptions } from './metrics-options.js';

export function accountCommands(program: Command, { out, client }: Cli): void {
  program
    .command('login')
    .description('check a key and store it with the API URL in the config file (0600)')
    .requiredOption('--url <url>', 'svcd base URL, e.g. http://127.0.0.1:8080')
    .requiredOption('--key <apiKey>', 'API key')
    .action(
      action(out, async (o: { url: string; key: string }) => {
        const t = await cliClient({ baseUrl: o.url, apiKey: o.key }).tenant();
        const path = writeConfig({ url: o.url, apiKey: o.key });
        out.note(`logged in as ${t.name}; saved to ${path}`);
      }),
    );

  program
    .command('register')
    .description('register a tenant (SVC_BOOTSTRAP_TOKEN unless the server has open registration) and log in')
    .requiredOption('--name <name>')
    .requiredOption('--email <email>')
    .option('--url <url>', 'svcd base URL')
    .action(
      action(out, async (o: { name: string; email: string; url?: string }) => {
        const c = client();
        const url = o.url ?? c.baseUrl;
        const r = await cliClient({ baseUrl: url, bootstrapToken: c.bootstrapToken }).register({ name: o.name, email: o.email });
        writeConfig({ url, apiKey: r.api_key });
        return r;
      }),
    );

  const tenant = program.command('tenant').description('the tenant you are logged in as');
  tenant.command('show', { isDefault: true }).description('show the tenant').action(action(out, () => client().tenant()));
  tenant.command('rename <name>').description('rename the tenant').action(action(out, (name: string) => client().renameTenant(name)));
  tenant
    .command('suspend')
    .description('suspend the tenant: its workloads stop and its keys stop working (an operator can reactivate it)')
    .requiredOption('--yes', 'confirm')
    .action(action(out, () => client().suspendTenant()));

  const usage = program.command('usage').description('usage against quota, and metered usage');
  usage.command('show', { isDefault: true }).description('counts against quota').action(action(out, () => client().usage()));
  metricsOptions(usage.command('metrics').description("metered usage rollups: the tenant's totals, or one service's"))
    .option('--service <serviceID>', "one service's rollups")
    .action(action(out, (o: MetricsOptions & { service?: string }) => client().usageMetrics({ period: o.period, since: o.since, until: o.until, service_id: o.service })));

  const keys = program.command('keys').description('API keys');
  keys.command('list').description('the API keys (their secrets are never shown again)').action(action(out, () => client().listKeys()));
  keys
    .command('create').description('create an API key; its secret is printed once')
    .option('--name <name>')
    .option('--expires-in <seconds>', 'lifetime in seconds', integer)
    .action(action(out, (o: { name?: string; expiresIn?: number }) => client().createKey({ name: o.name, expires_in: o.expiresIn })));
  keys.command('revoke <keyID>').description('revoke an API key at once').action(action(out, (id: string) => client().revokeKey(id)));

  program
    .command('activity')
    .description('recent activity, newest first')
    .option('--limit <n>', 'entries (default 50, max 200)', integer)
    .option('--action <action>', 'e.g. service.created')
    .option('--service <serviceID>')
    .action(action(out, (o: { limit?: number; action?: string; service?: string }) => client().activity({ limit: o.limit, action: o.action, service_id: o.service })));

  program
    .command('health')
    .description('detailed health of the platform')
    .option('--fresh', 'bypass the 30 s cache')
    .action(action(out, (o: { fresh?: boolean }) => client().healthDetailed(o.fresh === true)));

  const admin = program.command('admin').description('operator commands (SVC_ADMIN_TOKEN)');
  admin.command('reactivate <tenantID>').description('reactivate a suspended tenant; prints its new key').action(action(out, (id: string) => client().reactivateTenant(id)));
  admin.command('recover <email>').description("issue a new key for the tenant with this email").action(action(out, (email: string) => client().recover(email)));
  const nodes = admin.command('nodes').description("the cluster's nodes (svcd with --runtime swarm)");
  nodes
    .command('list')
    .description('nodes with their state, availability, engine version and svc tasks')
    .action(action(out, () => client().listClusterNodes(), { columns: ['hostname', 'id', 'role', 'state', 'availability', 'tasks', 'engine_version'] }));
  nodes.command('drain <node>').description("move a node's tasks to the others and give it no new ones (by id or host name)").action(action(out, (node: string) => client().setClusterNodeAvailability(node, 'drain')));
  nodes.command('activate <node>').description('let a drained node take tasks again').action(action(out, (node: string) => client().setClusterNodeAvailability(node, 'active')));
  admin
    .command('quotas <tenantID>')
    .description("change a tenant's quotas")
    .option('--max-services <n>', 'cap 100', integer)
    .option('--max-databases <n>', 'cap 50', integer)
    .option('--max-builds-concurrent <n>', 'cap 10', integer)
    .option('--max-env-vars-per-service <n>', 'cap 500', integer)
    .option('--max-domains-per-service <n>', 'custom domains; 0 to 100', integer)
    .action(
      action(out, (id: string, o: { maxServices?: number; maxDatabases?: number; maxBuildsConcurrent?: number; maxEnvVarsPerService?: number; maxDomainsPerService?: number }) =>
        client().patchQuotas(id, {
          max_services: o.maxServices,
          max_databases: o.maxDatabases,
          max_builds_concurrent: o.maxBuildsConcurrent,
          max_env_vars_per_service: o.maxEnvVarsPerService,
          max_domains_per_service: o.maxDomainsPerService,
        }),
      ),
    );
}
