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

/** A group of commands below svc: the names (and aliases) of the commands it adds, and how. */
export interface CommandGroup {
  commands: readonly string[];
  add(program: Command, cli: Cli): void;
}

/**
 * svc's commands by group, in the order `svc --help` lists them. A test holds each group's
 * names to the commands it adds.
 */
export const COMMAND_GROUPS: readonly CommandGroup[] = [
  { commands: ['deploy'], add: deployCommand },
  { commands: ['login', 'register', 'tenant', 'usage', 'keys', 'activity', 'health', 'admin'], add: accountCommands },
  { commands: ['services', 'service', 'open', 'logs', 'snapshots', 'domains'], add: serviceCommands },
  { commands: ['env'], add: envCommands },
  { commands: ['builds', 'build'], add: buildCommands },
  { commands: ['db', 'databases'], add: databaseCommands },
  { commands: ['kanban'], add: kanbanCommands },
  { commands: ['environments', 'envs'], add: environmentCommands },
];

/** svc's own options that come before a command and take no value. */
const LEADING_FLAGS = new Set(['--json', '--wide']);

/**
 * The group of the command a command line names (the arguments after `svc`), or undefined when
 * it names none of them: no command, `help`, `completion` (it describes the whole tree), a
 * version or help flag, a word svc does not know (commander suggests the nearest of all).
 */
export function groupOf(args: readonly string[]): CommandGroup | undefined {
  const word = args.find((a) => !LEADING_FLAGS.has(a));
  return word === undefined ? undefined : COMMAND_GROUPS.find((g) => g.commands.includes(word));
}

/**
 * The command tree; given a command line, only what it needs: the group of the command it names,
 * as the whole tree would have it. Setting up every group took 10-14 ms of each command's start
 * (a fifth of the CLI's own part of it, bench/build's `svc deploy`); the others are never run.
 */
export function buildProgram(commandLine?: readonly string[]): Command {
  const program = new Command('svc')
    .description('svc command-line client (config: $SVC_CONFIG, or $XDG_CONFIG_HOME/svc/config.json, by default ~/.config/svc/config.json; SVC_URL and SVC_API_KEY override it)')
    .version(CLI_VERSION, '-V, --version', "the CLI's version")
    .option('--json', 'print JSON instead of tables')
    .option('--wide', 'tables with every field (lists show a few by default)')
    .showHelpAfterError();

  const opts = () => program.opts<{ json?: boolean; wide?: boolean }>();
  const out = output({ json: () => opts().json === true, wide: () => opts().wide === true, color: colorWanted(process.env, process.stdout.isTTY) });
  const cli: Cli = { out, client: clientFromConfig };
  const named = commandLine === undefined ? undefined : groupOf(commandLine);
  if (named) named.add(program, cli);
  else {
    for (const group of COMMAND_GROUPS) group.add(program, cli);
    completionCommand(program);
  }
  addExamples(program);
  return program;
}
