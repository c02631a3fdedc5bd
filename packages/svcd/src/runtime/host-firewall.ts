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
const TENANT_BRIDGES = `${TENANT_BRIDGE_PREFIX}+`;

/** One --egress-allow entry: a destination network, and optionally one TCP/UDP port on it. */
export interface EgressAllowance {
  cidr: string;
  port: number | null;
}

export type Iptables = (args: string[]) => Promise<void>;

const execFileAsync = promisify(execFile);
const systemIptables: Iptables = async (args) => {
  // -w: wait for the xtables lock instead of failing while Docker changes its own rules.
  await execFileAsync('iptables', ['-w', ...args]);
};

export class FirewallError extends Error {}

export class HostFirewall {
  private installedAllowances: Array<[chain: string, ...rule: string[]]> = [];

  constructor(
    private readonly allow: readonly EgressAllowance[],
    private readonly iptables: Iptables = systemIptables,
  ) {}

  /**
   * Installs the chains, their rules and the jumps to them, and this svcd's allowances.
   * Idempotent; throws FirewallError naming what could not be installed.
   */
  async install(): Promise<void> {
    try {
      for (const chain of [EGRESS_CHAIN, HOST_CHAIN]) await this.iptables(['-N', chain]).catch(() => {}); // exists already
      for (const [chain, rule] of baseRules()) await this.ensure('-A', chain, rule);
      for (const [chain, rule] of this.allowanceRules()) {
        await this.ensure('-I', chain, rule);
        this.installedAllowances.push([chain, ...rule]);
      }
      // Jumps last: until the chains are complete, no traffic is sent through them.
      for (const [chain, rule] of jumps()) await this.ensure('-I', chain, rule);
    } catch (err) {
      throw new FirewallError(`tenant egress rules could not be installed: ${describe(err)}`);
    }
  }

  /** null when every rule is in place; otherwise what is missing (health detail). */
  async missing(): Promise<string | null> {
    for (const [chain, rule] of [...jumps(), ...baseRules(), ...this.allowanceRules()]) {
      const present = await this.iptables(['-C', chain, ...rule]).then(() => true, () => false);
      if (!present) return `missing rule in ${chain}: ${rule.join(' ')}`;
    }
    return null;
  }

  async close(): Promise<void> {
    for (const [chain, ...rule] of this.installedAllowances) {
      await this.iptables(['-D', chain, ...rule]).catch(() => {});
    }
    this.installedAllowances = [];
  }

  private async ensure(position: '-A' | '-I', chain: string, rule: string[]): Promise<void> {
    // -C fails when the rule is missing (rules left by a killed svcd are found and kept).
    const present = await this.iptables(['-C', chain, ...rule]).then(() => true, () => false);
    if (!present) await this.iptables(position === '-I' ? ['-I', chain, '1', ...rule] : ['-A', chain, ...rule]);
  }

  private allowanceRules(): Array<[string, string[]]> {
    const rules: Array<[string, string[]]> = [];
    for (const a of this.allow) {
      const protocols = a.port === null ? [[]] : [['-p', 'tcp', '--dport', String(a.port)], ['-p', 'udp', '--dport', String(a.port)]];
      for (const p of protocols) {
        const rule = ['-d', a.cidr, ...p, '-m', 'comment', '--comment', 'svc: --egress-allow', '-j', 'RETURN'];
        rules.push([EGRESS_CHAIN, rule], [HOST_CHAIN, rule]);
      }
    }
    return rules;
  }
}

const REJECT = ['-j', 'REJECT', '--reject-with', 'icmp-admin-prohibited'];
const REPLIES = ['-m', 'conntrack', '--ctstate', 'RELATED,ESTABLISHED', '-j', 'RETURN'];

function baseRules(): Array<[string, string[]]> {
  return [
    [EGRESS_CHAIN, REPLIES],
    // Between tenant bridges, Docker's isolation rules decide (they follow DOCKER-USER).
    [EGRESS_CHAIN, ['-o', TENANT_BRIDGES, '-j', 'RETURN']],
    ...NON_PUBLIC_IPV4.map(([net, bits]): [string, string[]] => [EGRESS_CHAIN, ['-d', `${net}/${bits}`, ...REJECT]]),
    [HOST_CHAIN, REPLIES],
    [HOST_CHAIN, REJECT],
  ];
}

function jumps(): Array<[string, string[]]> {
  return [
    ['DOCKER-USER', ['-i', TENANT_BRIDGES, '-j', EGRESS_CHAIN]],
    ['INPUT', ['-i', TENANT_BRIDGES, '-j', HOST_CHAIN]],
  ];
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
