// The command tree of svc, built apart from running it, so that tests can walk it (every command
// has a description and an example) and `svc completion` can describe it.
import { createRequire } from 'node:module';
import { Command } from 'commander';
import { clientFromConfig, type Cli } from './context.js';
import { colorWanted, output } from './output.js';
import { accountCommands } from './commands/account.js';
import { serviceCommands, envCommands } from './commands/services.js';
import { buildCommands } from './commands/builds.js';
import { deployCommand } from './commands/deploy.js';
import { databaseCommands } from './commands/databases.js';
import { kanbanCommands } from './commands/kanban.js';
import { environmentCommands } from './commands/environments.js';
import { completionCommand } from './commands/completion.js';
import { addExamples } from './examples.js';

/** The CLI's version: its package's (src/ and dist/ are both one level below package.json). */
export const CLI_VERSION = (createRequire(import.meta.url)('../package.json') as { version: string }).version;

export function buildProgram(): Command {
  const program = new Command('svc')
    .description('svc command-line client (config: $SVC_CONFIG, or $XDG_CONFIG_HOME/svc/config.json, by default ~/.config/svc/config.json; SVC_URL and SVC_API_KEY override it)')
    .version(CLI_VERSION, '-V, --version', "the CLI's version")
    .option('--json', 'print JSON instead of tables')
    .option('--wide', 'tables with every field (lists show a few by default)')
    .showHelpAfterError();

  const opts = () => program.opts<{ json?: boolean; wide?: boolean }>();
  const out = output({ json: () => opts().json === true, wide: () => opts().wide === true, color: colorWanted(process.env, process.stdout.isTTY) });
  const cli: Cli = { out, client: clientFromConfig };
  deployCommand(program, cli);
  accountCommands(program, cli);
  serviceCommands(program, cli);
  envCommands(program, cli);
  buildCommands(program, cli);
  databaseCommands(program, cli);
  kanbanCommands(program, cli);
  environmentCommands(program, cli);
  completionCommand(program);
  addExamples(program);
  return program;
}
