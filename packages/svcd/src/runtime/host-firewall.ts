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
// is idempotent and closing leaves them (a tenant bridge without them would be open); only the
// allowances of one svcd are removed when it closes. Tenant networks are IPv4 only (svc never
// enables IPv6 on them), so there is no IPv6 path to close.
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

/** One word for sh: single-quoted (the rules are svc's own words; an allowance's comment has a space). */
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

export class HostFirewall {
  private installedAllowances: ChainRule[] = [];
  /**
   * Which of allowanceRules() (by position) this process inserted; the others were there: another
   * svcd's, or a killed one's. A set: a node's firewall is installed again every pass, and puts
   * back what a node lost.
   */
  private readonly insertedAllowances = new Set<number>();
  private readonly iptables: Iptables;
  private readonly check: IptablesCheck;

  /** Without a runner: this host's iptables, its rules checked in a shell (shellIptablesCheck). */
  constructor(
    private readonly allow: readonly EgressAllowance[],
    iptables?: Iptables,
    private readonly tenants: TenantInterfaces = TENANT_BRIDGES,
    check?: IptablesCheck,
  ) {
    this.iptables = iptables ?? systemIptables;
    // -C fails when the rule is missing (rules left by a killed svcd are found and kept). This
    // host's checks run in a shell: an iptables started from svcd's own process for each rule
    // held its event loop 5-8 ms (the fork of a large process), some twenty of them for a health
    // detail that any tenant may ask for afresh, about as many at every start.
    this.check =
      check ??
      (iptables === undefined
        ? shellIptablesCheck(hostShell)
        : async (rules) => {
            const present: boolean[] = [];
            for (const [chain, rule] of rules) present.push(await this.iptables(['-C', chain, ...rule]).then(() => true, () => false));
            return present;
          });
  }

  /**
   * Installs the chains, their rules and the jumps to them, and this svcd's allowances.
   * Idempotent; throws FirewallError naming what could not be installed.
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
      for (const [i, [chain, rule]] of allowances.entries()) {
        if (present[base.length + i] === true) continue;
        await this.iptables(['-I', chain, '1', ...rule]);
        this.insertedAllowances.add(i);
      }
      this.installedAllowances = allowances;
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
   * Removes this svcd's allowances as it stops. After a start that failed (`onlyInserted`), only
   * those the start inserted: it leaves the host as it found it, and an allowance that was there
   * may be another svcd's on this host, which runs on (a second svcd whose start fails at a taken
   * port would otherwise take its tenants' allowed destinations away).
   */
  async close(o: { onlyInserted?: boolean } = {}): Promise<void> {
    const removing = o.onlyInserted === true ? this.allowanceRules().filter((_, i) => this.insertedAllowances.has(i)) : this.installedAllowances;
    for (const [chain, rule] of removing) {
      await this.iptables(['-D', chain, ...rule]).catch(() => {});
    }
    this.installedAllowances = [];
    this.insertedAllowances.clear();
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
    const rules: ChainRule[] = [];
    for (const a of this.allow) {
      const protocols = a.port === null ? [[]] : [['-p', 'tcp', '--dport', String(a.port)], ['-p', 'udp', '--dport', String(a.port)]];
      for (const p of protocols) {
        const rule = ['-d', a.cidr, ...p, '-m', 'comment', '--comment', 'svc: --egress-allow', '-j', 'RETURN'];
        const { egress, host } = chainsOf(this.tenants);
        rules.push([egress, rule], [host, rule]);
      }
    }
    return rules;
  }
}

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
  return value.split(',').map((entry) => {
    const m = /^(\d{1,3}(?:\.\d{1,3}){3})(?:\/(\d{1,2}))?(?::(\d{1,5}))?$/.exec(entry.trim());
    const octets = m?.[1]?.split('.').map(Number) ?? [];
    const bits = m?.[2] === undefined ? 32 : Number(m[2]);
    const port = m?.[3] === undefined ? null : Number(m[3]);
    if (!m || octets.some((o) => o > 255) || bits > 32 || (port !== null && (port < 1 || port > 65535))) {
      throw new Error(`--egress-allow entries must be IPv4 CIDR[:PORT] (10.0.0.5/32:5000), got ${JSON.stringify(entry)}`);
    }
    return { cidr: `${m[1]}/${bits}`, port };
  });
}
