// The tenant's task board.
import type { Command } from 'commander';
import type { Cli } from '../context.js';
import { action, waitUntil } from '../output.js';

export function kanbanCommands(program: Command, { out, client }: Cli): void {
  const kanban = program.command('kanban').description("the tenant's task board");
  kanban
    .command('create')
    .description('create it (provisioned in the background: --wait, or `svc kanban show` until url is set)')
    .option('--wait', 'wait until its url is set')
    .action(
      action(out, async (o: { wait?: boolean }) => {
        const c = client();
        const created = await c.createKanban();
        if (!o.wait) return created;
        return waitUntil(out, 'task board', () => c.kanban(), (v) => v.status !== 'provisioning', 'running', 5 * 60_000);
      }),
    );
  kanban.command('show').description('the board: status, URL and address').action(action(out, () => client().kanban()));
  kanban.command('admin-token').description("reveal the board's admin token (audit-logged)").action(action(out, () => client().kanbanAdminToken()));
  kanban.command('delete').description('delete the board with its data').action(
    action(out, async () => {
      await client().deleteKanban();
      out.note('task board deleted');
    }),
  );
}
