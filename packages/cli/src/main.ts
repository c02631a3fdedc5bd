#!/usr/bin/env node
// svc, the command-line client. Tables for people, --json for scripts; API errors are printed as
// the API's {error} message with a non-zero exit. One file per command group under commands/.
import { Command } from 'commander';
import { clientFromConfig, type Cli } from './context.js';
import { output } from './output.js';
import { accountCommands } from './commands/account.js';
import { serviceCommands, envCommands } from './commands/services.js';
import { buildCommands } from './commands/builds.js';
import { deployCommand } from './commands/deploy.js';
import { databaseCommands } from './commands/databases.js';
import { kanbanCommands } from './commands/kanban.js';
import { environmentCommands } from './commands/environments.js';

const program = new Command('svc')
  .description('svc command-line client (config: ~/.config/svc/config.json or $SVC_CONFIG; SVC_URL and SVC_API_KEY override it)')
  .option('--json', 'print JSON instead of tables');

const cli: Cli = { out: output(() => program.opts<{ json?: boolean }>().json === true), client: clientFromConfig };
accountCommands(program, cli);
serviceCommands(program, cli);
envCommands(program, cli);
buildCommands(program, cli);
deployCommand(program, cli);
databaseCommands(program, cli);
kanbanCommands(program, cli);
environmentCommands(program, cli);

await program.parseAsync();
