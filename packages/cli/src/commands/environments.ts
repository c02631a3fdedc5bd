// Developer environments: templates, create, lifecycle, leases, git sync, previews. Exec is
// `svc env exec` (commands/services.ts).
import type { Command } from 'commander';
import type { Cli } from '../context.js';
import { action, integer } from '../output.js';

export function environmentCommands(program: Command, { out, client }: Cli): void {
  const envs = program.command('environments').alias('envs').description('leased developer environments (exec: svc env exec)');
  envs.command('templates').description('the templates environments are created from').action(action(out, () => client().templates()));
  envs
    .command('create <name>')
    .description('create and start an environment (answers once it runs)')
    .requiredOption('--template <id>', 'default, node, python or go')
    .option('--lease <seconds>', 'lease duration', integer)
    .action(action(out, (name: string, o: { template: string; lease?: number }) => client().createEnvironment({ name, template_id: o.template, lease_duration_seconds: o.lease })));
  envs
    .command('list')
    .description('the environments: id, name, template, status, lease end and age (--wide or --json: every field)')
    .action(action(out, () => client().environments({ limit: 200 }), { columns: ['id', 'name', 'template_id', 'status', 'lease_expires_at', 'age'] }));
  envs.command('show <environmentID>').description('one environment').action(action(out, (id: string) => client().environment(id)));
  envs.command('start <environmentID>').description('start a stopped environment').action(action(out, (id: string) => client().startEnvironment(id)));
  envs.command('stop <environmentID>').description('stop an environment (its workspace is kept)').action(action(out, (id: string) => client().stopEnvironment(id)));
  envs
    .command('extend <environmentID> <seconds>')
    .description('set the lease to end this many seconds from now')
    .action(action(out, (id: string, seconds: string) => client().extendLease(id, integer(seconds))));
  envs
    .command('sync <environmentID>')
    .description('check out a git repository into /workspace/<name>')
    .requiredOption('--git-url <url>', 'https:// URL')
    .option('--ref <ref>', 'branch, tag or commit')
    .action(action(out, (id: string, o: { gitUrl: string; ref?: string }) => client().sync(id, { git_url: o.gitUrl, git_ref: o.ref })));
  envs.command('delete <environmentID>').description('delete an environment with its workspace').action(
    action(out, async (id: string) => {
      await client().deleteEnvironment(id);
      out.note(`environment ${id} deleted with its workspace`);
    }),
  );
  const previews = envs.command('previews').description("an environment's port previews");
  previews.command('list <environmentID>').description("an environment's previews").action(action(out, (id: string) => client().previews(id)));
  previews
    .command('create <environmentID> <name> <port>')
    .description('route a port of the environment to a public URL')
    .action(action(out, (id: string, name: string, port: string) => client().createPreview(id, { name, port: integer(port) })));
  previews.command('delete <environmentID> <previewID>').description('delete a preview').action(
    action(out, async (id: string, previewId: string) => {
      await client().deletePreview(id, previewId);
      out.note(`preview ${previewId} deleted`);
    }),
  );
}
