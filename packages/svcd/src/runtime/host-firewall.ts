// Tenant egress (DECISIONS.md, "Tenant egress"): tenant workloads (services, builds,
// environments, databases, boards) reach the internet and their own tenant network, nothing else:
// not the host's ports, not private (RFC 1918), CGNAT, link-local or metadata addresses, not
// other tenants. The operator opens named destinations with --egress-allow CIDR[:PORT].
//
// Every tenant bridge is named TENANT_BRIDGE_PREFIX + 11 hex digits, so iptables' interface
// wildcard `svc-+` covers every tenant, present and future, with a fixed set of rules:
//
//   DOCKER-USER  -i svc-+ -j SVC-TENANT-EGRESS      forwarded traffic (to other hosts)
//   INPUT        -i svc-+ -j SVC-TENANT-HOST        traffic to the host itself
//
//   SVC-TENANT-EGRESS: replies pass; tenant bridge to tenant bridge returns to Docker's own
//     isolation (same bridge allowed, another bridge dropped); allowances return; every
//     non-public range is rejected; the rest (the internet) returns to Docker's rules.
//   SVC-TENANT-HOST: replies pass (Caddy and svcd open connections to containers, not the
//     reverse); allowances return; everything else is rejected, svcd's API port included.
//
// DOCKER-USER is the chain Docker keeps for operators: it runs before Docker's own FORWARD rules
// and Docker never flushes it. REJECT rather than DROP so a refused connection fails at once.
//
// The chains are host policy shared by every svcd on the host (the tests run many): installing
// is idempotent and closing leaves them (a tenant bridge without them would be open). The
// allowances are each svcd's own: their comment names its instance (the data directory's id), so
// that a stop removes its own and never another svcd's copy of the same entry, and a start removes
// those an earlier run of its own left (killed) that its flags no longer name. Tenant networks are
// IPv4 only (svc never enables IPv6 on them), so there is no IPv6 path to close.
//
// The same rules guard a swarm's nodes (swarm/node-firewall.ts), for the interface a node's tasks
// leave by: Swarm's docker_gwbridge, which every tenant's tasks on the node share; and for the
// tenant bridges of the builds svcd runs on the manager's engine, in chains of their own.
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { NON_PUBLIC_IPV4 } from '../addresses/non-public.js';

/** Tenant bridges are named svc-<first 11 hex digits of the tenant id> (15 bytes: Linux's cap). */
export const TENANT_BRIDGE_PREFIX = 'svc-';
/** The warm pool's bridge: its containers become tenants' and so fall under the same rules. */
export const WARM_POOL_BRIDGE = `${TENANT_BRIDGE_PREFIX}warm-pool`;

export function tenantBridgeName(tenantId: string): string {
  return `${TENANT_BRIDGE_PREFIX}${tenantId.slice(0, 11)}`;
}

export const EGRESS_CHAIN = 'SVC-TENANT-EGRESS';
export const HOST_CHAIN = 'SVC-TENANT-HOST';

/** The interfaces tenant workloads' traffic arrives on, as iptables' `-i` names them. */
export interface TenantInterfaces {
  pattern: string;
  /**
   * Whether traffic from one of them to another is Docker's to judge (its isolation rules keep
   * apart what must be): true for svc's tenant bridges; false for a bridge tenants share, where
   * everything between its members (other tenants' published ports) is refused.
   */
  dockerIsolates: boolean;
  /**
   * Where forwarded traffic is sent to the egress chain: DOCKER-USER, which Docker keeps ahead of
   * its own rules for the bridges it makes; or FORWARD itself, kept first there, where Docker's
   * rules for the interface come before DOCKER-USER (a swarm node's docker_gwbridge: Engine 20.10
   * inserts its accept for the bridge above the jump to DOCKER-USER).
   */
  forwardChain: 'DOCKER-USER' | 'FORWARD';
  /**
   * Whether only replies pass (conntrack's reply direction): a flow the tenant opened while the
   * rules were away (a node that rebooted, before svcd put them back) is cut once they are back,
   * instead of passing as established. The host's rules, installed before any tenant workload
   * starts and never removed, pass established flows both ways (as they always have).
   */
  repliesOnly: boolean;
  /**
   * The chains the rules are kept in, when not EGRESS_CHAIN and HOST_CHAIN: a second set of
   * interfaces on one host with other rules (a swarm node's tenant bridges beside its
   * docker_gwbridge) keeps its own, so that neither set's rules weaken the other's.
   */
  chains?: { egress: string; host: string };
}

/** The chains of a set of interfaces' rules. */
function chainsOf(tenants: TenantInterfaces): { egress: string; host: string } {
  return tenants.chains ?? { egress: EGRESS_CHAIN, host: HOST_CHAIN };
}

/** svc's tenant bridges on one engine's host: every tenant, present and future. */
export const TENANT_BRIDGES: TenantInterfaces = { pattern: `${TENANT_BRIDGE_PREFIX}+`, dockerIsolates: true, forwardChain: 'DOCKER-USER', repliesOnly: false };

/** FORWARD's jump to DOCKER-USER, which Docker moves back to the top whenever it makes a network. */
const DOCKER_USER_JUMP = '-A FORWARD -j DOCKER-USER';

/** One --egress-allow entry: a destination network, and optionally one TCP/UDP port on it. */
export interface EgressAllowance {
  cidr: string;
  port: number | null;
}

/** Runs iptables with these arguments; resolves to what it printed, rejects when it fails. */
export type Iptables = (args: string[]) => Promise<string>;
/** A rule of a chain, as iptables' arguments after the chain's name. */
export type ChainRule = readonly [chain: string, rule: string[]];
/**
 * Whether each rule is in place (`iptables -C`): a runner whose calls are dear (an exec on a
 * swarm node, a process started from svcd) checks many in one script (shellIptablesCheck).
 */
export type IptablesCheck = (rules: readonly ChainRule[]) => Promise<boolean[]>;
/** The two address families and the binary that holds each one's rules. */
export type IptablesFamily = 'iptables' | 'ip6tables';
/** Runs a shell script where the rules are (svcd's host, a swarm node); its exit code and what it printed. */
export type ShellRun = (script: string) => Promise<{ exitCode: number; output: string }>;

const execFileAsync = promisify(execFile);
const systemIptables: Iptables = async (args) => {
  // -w: wait for the xtables lock instead of failing while Docker changes its own rules.
  return (await execFileAsync('iptables', ['-w', ...args])).stdout;
};

/**
 * `-C` for every rule in a shell, a line of 1 (in place) or 0 each: one process, or one exec on a
 * node, for each 64 KB of script (scriptsOf: one for every set of rules but a long --egress-allow's).
 * Read strictly, since a rule read as in place is one install() does not add: anything but one 0
 * or 1 a rule, or an exit other than 0, throws.
 */
export function shellIptablesCheck(run: ShellRun, family: IptablesFamily = 'iptables'): IptablesCheck {
  return async (rules) => {
    const present: boolean[] = [];
    for (const part of scriptsOf(rules.map(([chain, rule]) => `if ${family} -w -C ${[chain, ...rule].map(shellWord).join(' ')} >/dev/null 2>&1; then echo 1; else echo 0; fi`))) {
      const { exitCode, output } = await run(part.join('\n'));
      const answers = output.trim().split('\n');
      if (exitCode !== 0 || answers.length !== part.length || answers.some((a) => a !== '1' && a !== '0')) throw new Error(`the rules could not be checked: ${output.trim().slice(0, 300)}`);
      present.push(...answers.map((a) => a === '1'));
    }
    return present;
  };
}

/**
 * A script is one argument of `sh -c`, which Linux caps at 128 KiB: the lines go in scripts of at
 * most SCRIPT_MAX_BYTES each (a long --egress-allow makes hundreds of rules, about 175 bytes a line).
 */
const SCRIPT_MAX_BYTES = 64 * 1024;
function scriptsOf(lines: string[]): string[][] {
  const scripts: string[][] = [];
  let bytes = Infinity;
  for (const line of lines) {
    const size = Buffer.byteLength(line) + 1;
    if (bytes + size > SCRIPT_MAX_BYTES) {
      scripts.push([]);
      bytes = 0;
    }
    scripts.at(-1)?.push(line);
    bytes += size;
  }
  return scripts;
}

/** One word for sh: single-quoted (the rules are svc's own words; a swarm node's allowance comment has a space). */
function shellWord(word: string): string {
  return `'${word.replaceAll("'", "'\\''")}'`;
}

/** A script run by this host's `sh`: its exit code, and what it printed to stdout. */
export const hostShell: ShellRun = async (script) => {
  try {
    return { exitCode: 0, output: (await execFileAsync('sh', ['-c', script])).stdout };
  } catch (err) {
    const e = err as { code?: unknown; signal?: string | null; stdout?: string; stderr?: string; message?: string };
    // Not started at all (no sh: its stderr is empty), or ended by a signal: a failed check, with the reason.
    const why = e.stderr || (e.signal ? `sh ended by ${e.signal}` : e.message) || '';
    return { exitCode: typeof e.code === 'number' ? e.code : 127, output: `${e.stdout ?? ''}${why}` };
  }
};

export class FirewallError extends Error {}

export interface HostFirewallOptions {
  /** The operator's --egress-allow. */
  allow: readonly EgressAllowance[];
  /**
   * Whose allowances these are: the svcd's instance id on its own host (each svcd's rules its own,
   * removed at its stop, an earlier run's swept at its start); null on a swarm node, whose
   * allowances every svcd of the swarm shares and none removes (NodeFirewalls.close).
   */
  owner: string | null;
  /** Default: this host's iptables. */
  iptables?: Iptables;
  tenants?: TenantInterfaces;
  /** Default: this host's iptables checked in a shell (shellIptablesCheck), or `-C` through `iptables` when one is given. */
  check?: IptablesCheck;
}

export class HostFirewall {
  private readonly allow: readonly EgressAllowance[];
  private readonly owner: string | null;
  private readonly iptables: Iptables;
  private readonly tenants: TenantInterfaces;
  private readonly check: IptablesCheck;
  private unowned: readonly string[] = [];

  constructor(o: HostFirewallOptions) {
    this.allow = o.allow;
    this.owner = o.owner;
    this.iptables = o.iptables ?? systemIptables;
    this.tenants = o.tenants ?? TENANT_BRIDGES;
    // -C fails when the rule is missing (an earlier run's rules are found and kept). This host's
    // checks run in a shell: an iptables started from svcd's own process for each rule held its
    // event loop 5-8 ms (the fork of a large process), some twenty of them for a health detail
    // that any tenant may ask for afresh, about as many at every start.
    this.check =
      o.check ??
      (o.iptables === undefined
        ? shellIptablesCheck(hostShell)
        : async (rules) => {
            const present: boolean[] = [];
            for (const [chain, rule] of rules) present.push(await this.iptables(['-C', chain, ...rule]).then(() => true, () => false));
            return present;
          });
  }

  /**
   * Installs the chains, their rules and the jumps to them, and this svcd's allowances; then
   * removes the allowances of its own that its flags no longer name (left by an earlier run that
   * was killed). Idempotent; throws FirewallError naming what could not be installed.
   */
  async install(): Promise<void> {
    try {
      const base = baseRules(this.tenants);
      const allowances = this.allowanceRules();
      const present = await this.check([...base, ...allowances]);
      if (present.includes(false)) {
        const { egress, host } = chainsOf(this.tenants);
        for (const chain of [egress, host]) await this.iptables(['-N', chain]).catch(() => {}); // exists already
      }
      for (const [i, [chain, rule]] of base.entries()) if (present[i] !== true) await this.iptables(['-A', chain, ...rule]);
      // Ahead of the rejects.
      for (const [i, [chain, rule]] of allowances.entries()) if (present[base.length + i] !== true) await this.iptables(['-I', chain, '1', ...rule]);
      // After the inserts: an entry still named is never absent meanwhile.
      await this.removeOwnAllowances(this.allow);
      // Jumps last: until the chains are complete, no traffic is sent through them.
      if (this.tenants.forwardChain === 'FORWARD') await this.ensureFirst();
      else await this.ensure(...dockerUserJump(this.tenants));
      await this.ensure(...inputJump(this.tenants));
    } catch (err) {
      throw new FirewallError(`tenant egress rules could not be installed: ${describe(err)}`);
    }
  }

  /** null when every rule is in place; otherwise what is missing (health detail). */
  async missing(): Promise<string | null> {
    const keptFirst = this.tenants.forwardChain === 'FORWARD';
    const wanted = [...(keptFirst ? [] : [dockerUserJump(this.tenants)]), inputJump(this.tenants), ...baseRules(this.tenants), ...this.allowanceRules()];
    const present = await this.check(wanted);
    const absent = wanted.find((_, i) => present[i] !== true);
    if (absent) return `missing rule in ${absent[0]}: ${absent[1].join(' ')}`;
    if (keptFirst && !(await this.isFirst())) return `the jump -i ${this.tenants.pattern} -j ${chainsOf(this.tenants).egress} is not the first rule of FORWARD (or not there): traffic can pass before it`;
    return null;
  }

  /**
   * Removes this svcd's allowances as it stops (after a start that failed, too): those that carry
   * its name, and no other svcd's, even of the same entry. A swarm node's (no owner) stay. Throws
   * naming what it could not remove.
   */
  async close(): Promise<void> {
    // Without entries there is nothing of its own: an earlier run's were swept at install.
    if (this.allow.length > 0) await this.removeOwnAllowances([]);
  }

  /**
   * Rules in the allowances' chains with the comment svcds wrote before theirs named them
   * (`svc: --egress-allow`): an earlier svc's, which no svcd removes now (read at install).
   */
  get unownedAllowances(): readonly string[] {
    return this.unowned;
  }

  /**
   * Deletes every allowance rule in the chains that carries this svcd's name, but those of the
   * entries in `keep`. Found in a listing of the two chains (`iptables -S`) by their comment, which
   * names the svcd and the entry; deleted by the words svc gives that entry's rules (entryRules),
   * not the listing's. Listed again after: an own allowance still there (a delete that failed, a
   * rule of the name in other words) throws, naming it.
   */
  private async removeOwnAllowances(keep: readonly EgressAllowance[]): Promise<void> {
    if (this.owner === null) return;
    const owner = this.owner;
    const kept = new Set(keep.map((a) => allowanceComment(owner, a)));
    const stale = async () => {
      const listed = await this.listAllowanceChains();
      this.unowned = listed.filter((line) => line.includes(` --comment "${SHARED_ALLOWANCE_COMMENT}" `));
      const found = new Map<string, EgressAllowance>();
      for (const line of listed) {
        const comment = / --comment (\S+) /.exec(line)?.[1];
        const entry = comment === undefined ? null : ownAllowanceEntry(owner, comment);
        if (comment !== undefined && entry !== null && !kept.has(comment)) found.set(comment, entry);
      }
      return found;
    };
    const found = await stale();
    if (found.size === 0) return;
    for (const entry of found.values()) {
      for (const [chain, rule] of this.entryRules(entry)) {
        // Every copy (a rule inserted twice); a delete fails once none is left. At most a bound.
        for (let i = 0; i < 16 && (await this.iptables(['-D', chain, ...rule]).then(() => true, () => false)); i++);
      }
    }
    const left = [...(await stale()).keys()];
    if (left.length > 0) {
      const { egress, host } = chainsOf(this.tenants);
      throw new Error(`could not remove this svcd's allowance rules ${left.join(', ')} (iptables -S ${egress}, iptables -S ${host}; delete them by hand)`);
    }
  }

  /** The lines of `iptables -S` for the chains allowances are kept in. */
  private async listAllowanceChains(): Promise<string[]> {
    const { egress, host } = chainsOf(this.tenants);
    return [...(await this.rulesOf(egress)), ...(await this.rulesOf(host))];
  }

  /** Inserts the rule at the top of the chain unless it is in the chain already. */
  private async ensure(chain: string, rule: string[]): Promise<void> {
    const [present] = await this.check([[chain, rule]]);
    if (present !== true) await this.iptables(['-I', chain, '1', ...rule]);
  }

  /**
   * Makes FORWARD's jump its first rule (below Docker's jump to DOCKER-USER at most). Docker may
   * change FORWARD between any two calls, so rule numbers are never used: the jump has two forms
   * (firstJumpForms), and a move inserts the form not in the chain at the top, then deletes the
   * other by its words. The chain is never without a jump, and no delete can take another rule.
   */
  private async ensureFirst(): Promise<void> {
    if (await this.isFirst()) return;
    const [a, b] = firstJumpForms(this.tenants);
    const [hasA, hasB] = await this.check([a, b]);
    // Both in the chain, neither first: b goes (a stays meanwhile), to come back at the top.
    if (hasA === true && hasB === true) await this.deleteAll(b);
    const [fresh, stale] = hasA === true ? [b, a] : [a, b];
    await this.iptables(['-I', fresh[0], '1', ...fresh[1]]);
    await this.deleteAll(stale);
  }

  private async deleteAll([chain, rule]: ChainRule): Promise<void> {
    while ((await this.check([[chain, rule]]))[0] === true) await this.iptables(['-D', chain, ...rule]);
  }

  private async isFirst(): Promise<boolean> {
    // Docker's jump to DOCKER-USER may stand above: it comes back to the top each time the node's
    // engine makes a network (a tenant's overlay reaching the node), and DOCKER-USER is the
    // operator's own chain, where svc puts nothing.
    const first = (await this.rulesOf('FORWARD')).find((line) => line !== DOCKER_USER_JUMP);
    return firstJumpForms(this.tenants).some(([chain, rule]) => first === ['-A', chain, ...rule].join(' '));
  }

  /** The chain's rules as `-S` prints them (`-A CHAIN args`, in the words they were given in), in order. */
  private async rulesOf(chain: string): Promise<string[]> {
    return (await this.iptables(['-S', chain])).split('\n').filter((line) => line.startsWith('-A '));
  }

  private allowanceRules(): ChainRule[] {
    return this.allow.flatMap((a) => this.entryRules(a));
  }

  /** An entry's rules: in the egress and the host chain, for TCP and UDP when it names a port. */
  private entryRules(a: EgressAllowance): ChainRule[] {
    const rules: ChainRule[] = [];
    const protocols = a.port === null ? [[]] : [['-p', 'tcp', '--dport', String(a.port)], ['-p', 'udp', '--dport', String(a.port)]];
    for (const p of protocols) {
      const rule = ['-d', a.cidr, ...p, '-m', 'comment', '--comment', this.owner === null ? SHARED_ALLOWANCE_COMMENT : allowanceComment(this.owner, a), '-j', 'RETURN'];
      const { egress, host } = chainsOf(this.tenants);
      rules.push([egress, rule], [host, rule]);
    }
    return rules;
  }
}

/**
 * An allowance's comment on a svcd's own host: the svcd's instance (16 hex digits) and the entry
 * (`svc-egress-allow-<instance>-10-0-0-5_32_5000` for 10.0.0.5/32:5000), in letters, digits, `-`
 * and `_` only, which `iptables -S` prints as they are (iptables' xtables_save_string quotes a
 * word with any other character); with a null entry, the prefix all of that svcd's share.
 */
function allowanceComment(owner: string, entry: EgressAllowance | null): string {
  const prefix = `svc-egress-allow-${owner}-`;
  if (entry === null) return prefix;
  const [address = '', bits = ''] = entry.cidr.split('/');
  return `${prefix}${address.replaceAll('.', '-')}_${bits}${entry.port === null ? '' : `_${String(entry.port)}`}`;
}
/** The entry an allowance comment of this owner's names (allowanceComment), or null for any other comment. */
function ownAllowanceEntry(owner: string, comment: string): EgressAllowance | null {
  if (!comment.startsWith(allowanceComment(owner, null))) return null;
  const m = /^(\d{1,3})-(\d{1,3})-(\d{1,3})-(\d{1,3})_(\d{1,2})(?:_(\d{1,5}))?$/.exec(comment.slice(allowanceComment(owner, null).length));
  if (!m) return null;
  return { cidr: `${m.slice(1, 5).map(Number).join('.')}/${String(Number(m[5]))}`, port: m[6] === undefined ? null : Number(m[6]) };
}
/** An allowance's comment on a swarm node, where every svcd of the swarm shares it. */
const SHARED_ALLOWANCE_COMMENT = 'svc: --egress-allow';

const REJECT = ['-j', 'REJECT', '--reject-with', 'icmp-admin-prohibited'];
const REPLIES = ['-m', 'conntrack', '--ctstate', 'RELATED,ESTABLISHED', '-j', 'RETURN'];
const REPLIES_ONLY = ['-m', 'conntrack', '--ctstate', 'RELATED,ESTABLISHED', '--ctdir', 'REPLY', '-j', 'RETURN'];

function baseRules(tenants: TenantInterfaces): ChainRule[] {
  const replies = tenants.repliesOnly ? REPLIES_ONLY : REPLIES;
  const { egress, host } = chainsOf(tenants);
  return [
    [egress, replies],
    // Between tenant bridges, Docker's isolation rules decide (they follow DOCKER-USER).
    ...(tenants.dockerIsolates ? [[egress, ['-o', tenants.pattern, '-j', 'RETURN']] satisfies ChainRule] : []),
    ...NON_PUBLIC_IPV4.map(([net, bits]): ChainRule => [egress, ['-d', `${net}/${bits}`, ...REJECT]]),
    [host, replies],
    [host, REJECT],
  ];
}

function dockerUserJump(tenants: TenantInterfaces): ChainRule {
  return ['DOCKER-USER', ['-i', tenants.pattern, '-j', chainsOf(tenants).egress]];
}

/** FORWARD's jump where it is kept first, in its two forms (a comment tells them apart: ensureFirst). */
function firstJumpForms(tenants: TenantInterfaces): [ChainRule, ChainRule] {
  const form = (name: string): ChainRule => ['FORWARD', ['-i', tenants.pattern, '-m', 'comment', '--comment', `svc-egress-${name}`, '-j', chainsOf(tenants).egress]];
  return [form('a'), form('b')];
}

function inputJump(tenants: TenantInterfaces): ChainRule {
  return ['INPUT', ['-i', tenants.pattern, '-j', chainsOf(tenants).host]];
}

function describe(err: unknown): string {
  const e = err as { stderr?: string; message?: string };
  return (e.stderr?.trim() || e.message || String(err)).split('\n')[0] ?? 'unknown error';
}

/** `--egress-allow CIDR[:PORT],...` (an address alone means /32). Throws with the reason. */
export function parseEgressAllow(value: string | undefined): EgressAllowance[] {
  if (value === undefined || value.trim() === '') return [];
  const entries = value.split(',').map((entry): EgressAllowance => {
    const m = /^(\d{1,3}(?:\.\d{1,3}){3})(?:\/(\d{1,2}))?(?::(\d{1,5}))?$/.exec(entry.trim());
    const words = m?.[1]?.split('.') ?? [];
    const octets = words.map(Number);
    const bits = m?.[2] === undefined ? 32 : Number(m[2]);
    const port = m?.[3] === undefined ? null : Number(m[3]);
    if (!m || octets.some((o) => o > 255) || bits > 32 || (port !== null && (port < 1 || port > 65535))) {
      throw new Error(`--egress-allow entries must be IPv4 CIDR[:PORT] (10.0.0.5/32:5000), got ${JSON.stringify(entry)}`);
    }
    // iptables reads an octet with a leading zero as octal (010.0.0.1 is 8.0.0.1): not what was meant.
    if (words.some((w) => w.length > 1 && w.startsWith('0'))) {
      throw new Error(`--egress-allow entries are written without leading zeros (iptables would read ${JSON.stringify(m[1])} as octal), got ${JSON.stringify(entry)}`);
    }
    // The network as iptables takes it (host bits cleared: 10.0.0.5/8 is 10.0.0.0/8), and so as
    // its rule's comment and the health detail name it.
    const mask = bits === 0 ? 0 : (0xffffffff << (32 - bits)) >>> 0;
    const address = (octets.reduce((value, octet) => (value << 8) | octet, 0) & mask) >>> 0;
    return { cidr: `${[24, 16, 8, 0].map((shift) => (address >>> shift) & 0xff).join('.')}/${bits}`, port };
  });
  // Once each: two spellings of one network (10.0.0.5/8, 10.0.0.0/8) are one entry.
  return entries.filter((a, i) => entries.findIndex((b) => b.cidr === a.cidr && b.port === a.port) === i);
}
