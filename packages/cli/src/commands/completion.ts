// `svc completion bash|zsh`: a completion script made from the command tree itself, so that it
// never falls behind the commands. It completes command names (aliases too) and, after a `-`,
// the options of the command typed so far. zsh runs the same function through bashcompinit.
import type { Command } from 'commander';
import { CommandFailed } from '../output.js';

interface Node {
  /** The command path, svc and the canonical names below it joined by spaces (bash cannot key an array by ''). */
  path: string;
  children: Array<{ names: string[]; node: Node }>;
  options: string[];
}

function describe(cmd: Command, path: string): Node {
  const options = [...cmd.options.flatMap((o) => [o.long, o.short].filter((f): f is string => f !== undefined)), '--help'];
  const children = cmd.commands.map((c) => ({ names: [c.name(), ...c.aliases()], node: describe(c, `${path} ${c.name()}`) }));
  return { path, children, options };
}

function flatten(node: Node): Node[] {
  return [node, ...node.children.flatMap((c) => flatten(c.node))];
}

const quote = (s: string) => `'${s.replace(/'/g, "'\\''")}'`;

export function bashCompletion(program: Command): string {
  const nodes = flatten(describe(program, 'svc'));
  const lines = [
    '# svc completion for bash (and zsh through bashcompinit): svc completion bash > ~/.local/share/bash-completion/completions/svc',
    'declare -gA _svc_children _svc_options _svc_canonical',
  ];
  for (const n of nodes) {
    lines.push(`_svc_children[${quote(n.path)}]=${quote(n.children.flatMap((c) => c.names).join(' '))}`);
    lines.push(`_svc_options[${quote(n.path)}]=${quote(n.options.join(' '))}`);
    for (const c of n.children) for (const name of c.names) lines.push(`_svc_canonical[${quote(`${n.path}|${name}`)}]=${quote(c.node.path)}`);
  }
  lines.push(
    '_svc() {',
    '  local cur=${COMP_WORDS[COMP_CWORD]} node=svc i next',
    '  for ((i = 1; i < COMP_CWORD; i++)); do',
    '    next=${_svc_canonical["$node|${COMP_WORDS[i]}"]}',
    '    [[ -n $next ]] && node=$next',
    '  done',
    '  if [[ $cur == -* ]]; then',
    '    COMPREPLY=($(compgen -W "${_svc_options[$node]}" -- "$cur"))',
    '  else',
    '    COMPREPLY=($(compgen -W "${_svc_children[$node]}" -- "$cur"))',
    '  fi',
    '}',
    'complete -F _svc svc',
  );
  return `${lines.join('\n')}\n`;
}

export function zshCompletion(program: Command): string {
  return ['# svc completion for zsh: eval "$(svc completion zsh)" in ~/.zshrc (after compinit)', 'autoload -U +X bashcompinit && bashcompinit', bashCompletion(program)].join('\n');
}

export function completionCommand(program: Command): void {
  program
    .command('completion <shell>')
    .description('print a completion script for bash or zsh')
    .action((shell: string) => {
      if (shell === 'bash') process.stdout.write(bashCompletion(program));
      else if (shell === 'zsh') process.stdout.write(zshCompletion(program));
      else {
        process.stderr.write(`svc: ${new CommandFailed(`no completion for ${JSON.stringify(shell)}: bash or zsh`).message}\n`);
        process.exitCode = 2;
      }
    });
}
