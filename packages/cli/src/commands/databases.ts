// Managed postgres and redis databases.
import { Option, type Command } from 'commander';
import type { Cli } from '../context.js';
import { action, waitUntil } from '../output.js';

const DATABASE_WAIT_MS = 5 * 60_000;

export function databaseCommands(program: Command, { out, client }: Cli): void {
  const db = program.command('db').alias('databases').description('managed postgres and redis databases');
  db
    .command('create <name>')
    .description('create a database (provisioned in the background; --wait follows it)')
    .addOption(new Option('--type <type>', 'postgres or redis').choices(['postgres', 'redis']).makeOptionMandatory())
    .option('--wait', 'wait until it accepts connections (or fails)')
    .action(
      action(out, async (name: string, o: { type: string; wait?: boolean }) => {
        const c = client();
        const created = await c.createDatabase({ name, type: o.type });
        if (!o.wait) return created;
        return waitUntil(out, `database ${name}`, () => c.database(created.id), (v) => v.status !== 'provisioning', 'running', DATABASE_WAIT_MS);
      }),
    );
  db.command('list')
    .description('the databases: id, name, type, status and age (--wide or --json: every field)')
    .action(action(out, () => client().databases({ limit: 200 }), { columns: ['id', 'name', 'type', 'status', 'age'] }));
  db.command('show <databaseID>').description('one database').action(action(out, (id: string) => client().database(id)));
  db
    .command('url <databaseID>')
    .description("the connection string from svc's host (--internal: from the tenant's services); the reveal is audit-logged")
    .option('--internal', "the one services use on the tenant's network")
    .action(
      action(out, async (id: string, o: { internal?: boolean }) => {
        const c = await client().connectionString(id);
        return out.json() ? c : o.internal ? c.internal_connection_string : c.connection_string;
      }),
    );
  db.command('delete <databaseID>').description('delete a database with its data').action(
    action(out, async (id: string) => {
      await client().deleteDatabase(id);
      out.note(`database ${id} deleted with its data`);
    }),
  );
}
