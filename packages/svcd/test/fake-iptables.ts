// iptables' filter table in memory, for the firewall's rules without the machine's iptables: the
// unit tests of host-firewall.ts, and every test svcd on a stand-in runtime (harness.ts), which
// starts no container and must leave the machine's rules to the engine tests (they change them).

/** -N, -C, -A, -I, -D and -S on chains that exist. */
export function fakeIptables(chains: Record<string, string[][]> = { INPUT: [], 'DOCKER-USER': [] }) {
  const rules = new Map<string, string[][]>(Object.entries(chains));
  const calls: string[][] = [];
  const key = (r: string[]) => r.join(' ');
  // As iptables lists a rule: a comment with any character but a letter, digit, `-` or `_` in quotes.
  const listed = (r: string[]) => r.map((word, i) => (r[i - 1] === '--comment' && /[^A-Za-z0-9_-]/.test(word) ? `"${word}"` : word)).join(' ');
  const fake = (args: string[]): Promise<string> => {
    calls.push(args);
    const [op, chain, ...rest] = args;
    if (op === '-N') {
      if (rules.has(chain!)) return Promise.reject(new Error('exists'));
      rules.set(chain!, []);
      return Promise.resolve('');
    }
    const list = rules.get(chain!);
    if (!list) return Promise.reject(new Error(`no chain ${chain}`));
    if (op === '-S') return Promise.resolve([`-P ${chain!} ACCEPT`, ...list.map((r) => `-A ${chain!} ${listed(r)}`)].join('\n') + '\n');
    if (op === '-C') {
      if (!list.some((r) => key(r) === key(rest))) return Promise.reject(new Error('missing'));
    } else if (op === '-A') list.push(rest);
    else if (op === '-I') list.splice(Number(rest[0]) - 1, 0, rest.slice(1));
    else if (op === '-D') {
      // By number, or by the rule's words (the first copy).
      const at = rest.length === 1 && /^\d+$/.test(rest[0]!) ? Number(rest[0]) - 1 : list.findIndex((r) => key(r) === key(rest));
      if (at < 0 || at >= list.length) return Promise.reject(new Error('no such rule'));
      list.splice(at, 1);
    }
    return Promise.resolve('');
  };
  return { rules, calls, fake };
}
