// Who reaches the ports svc publishes on a swarm's nodes (issue 21). A service's task publishes
// its port in host mode (swarm-runtime.ts), and a database's too; the engine then answers on
// every address of the node, IPv4 through its NAT rules and IPv6 through docker-proxy. On one
// engine a database is published on loopback only and a service only behind the proxy; on a
// swarm, without this gate, anyone who reaches a node would reach every tenant's service past
// the proxy (no TLS, no routing by host) and every database's port. Tenants' own tasks cannot
// (node-firewall.ts's egress rules); this is about everyone else on the nodes' network.
//
// The gate, on every node, in the mangle table's PREROUTING, before the engine's NAT rewrites
// the published port into the task's (so the published port is what is matched, whatever task
// and address it goes to):
//
//   PREROUTING ! -i lo -p tcp --dport FROM:TO -m addrtype --dst-type LOCAL -m conntrack --ctdir ORIGINAL -j SVC-PUBLISHED
//   PREROUTING ! -i docker_gwbridge -d <the bridge's subnet> -j DROP
//   SVC-PUBLISHED: -s <each --swarm-published-from CIDR> -j RETURN; -j DROP
//
// one jump per range (--swarm-ports, --database-ports), for IPv4 and, where the node has it, IPv6
// alike (IPv6 allows no source: svcd and its proxy reach the nodes at the IPv4 addresses Swarm
// lists). DROP rather than
// REJECT: the mangle table has no REJECT, and a port that does not answer tells a scanner less.
// Traffic the node makes itself is not gated (it comes in on lo when it loops back to one of the
// node's addresses): the node's own processes, svcd's and its proxy's among them, are the
// operator's. Docker never touches the mangle table of a node for host-mode ports, so the jump's
// place there is not disputed as FORWARD's is (node-firewall.ts).
import type { ChainRule, IptablesFamily } from '../host-firewall.js';

export const PUBLISHED_CHAIN = 'SVC-PUBLISHED';

export interface PublishedPortsOptions {
  /** The port ranges svc publishes on the nodes and only svcd's side may reach. */
  ranges: ReadonlyArray<{ from: number; to: number }>;
  /** IPv4 networks that may reach them (--swarm-published-from): where svcd and its proxy run. */
  allowFrom: readonly string[];
}

/** What the gate needs of one node: the subnets of its docker_gwbridge, where its tasks' addresses are, and whether it has IPv6. */
export interface NodeGateFacts {
  gatewaySubnets: readonly string[];
  /** A node whose kernel has IPv6 off has nothing to gate there (and ip6tables fails on it). */
  ipv6: boolean;
}

function familiesOf(node: NodeGateFacts): IptablesFamily[] {
  return node.ipv6 ? ['iptables', 'ip6tables'] : ['iptables'];
}

const MANGLE = ['-t', 'mangle'];

/**
 * The gate's rules for one family, in the order they stand: the chain's allowances, its DROP,
 * then the jumps (the chain is complete before anything jumps to it). Each rule carries its
 * table, as iptables takes it anywhere among the arguments.
 */
export function publishedPortRules(o: PublishedPortsOptions, node: NodeGateFacts, family: IptablesFamily): { allowances: ChainRule[]; drop: ChainRule; jumps: ChainRule[] } {
  const v4 = family === 'iptables';
  return {
    allowances: (v4 ? o.allowFrom : []).map((cidr): ChainRule => [PUBLISHED_CHAIN, [...MANGLE, '-s', cidr, '-m', 'comment', '--comment', 'svc: --swarm-published-from', '-j', 'RETURN']]),
    drop: [PUBLISHED_CHAIN, [...MANGLE, '-j', 'DROP']],
    jumps: [
      // Every packet a peer sends (the original direction, whatever conntrack's state: a flow
      // opened while the gate was away, after a reboot, is cut once it is back), not the replies
      // to what the node opened, nor what the node sends itself (back in on lo).
      ...o.ranges.map(({ from, to }): ChainRule => [
        'PREROUTING',
        [...MANGLE, '!', '-i', 'lo', '-p', 'tcp', '--dport', `${String(from)}:${String(to)}`, '-m', 'addrtype', '--dst-type', 'LOCAL', '-m', 'conntrack', '--ctdir', 'ORIGINAL', '-j', PUBLISHED_CHAIN],
      ]),
      // A neighbour that routes to the tasks' own addresses through the node, past the published
      // ports (Engine 20.10 forwards that): only the bridge's own members reach them. What the
      // published ports lead to is the node's address here still (the NAT comes after).
      ...(v4 ? node.gatewaySubnets : []).map((subnet): ChainRule => ['PREROUTING', [...MANGLE, '!', '-i', 'docker_gwbridge', '-d', subnet, '-m', 'comment', '--comment', 'svc: tasks only by their published ports', '-j', 'DROP']]),
    ],
  };
}

/** Runs one family's iptables on a node with these arguments; rejects with what it said. */
export type FamilyIptables = (family: IptablesFamily, args: string[]) => Promise<string>;
/** Whether each rule of one family is in place (`-C`), all in one call. */
export type FamilyCheck = (family: IptablesFamily, rules: readonly ChainRule[]) => Promise<boolean[]>;

/**
 * Puts the gate in place on a node (both families), adding what is missing: idempotent, and an
 * allowance taken out of --swarm-published-from stays until removed on the node (as
 * --egress-allow's do), since another svcd with its own list may share the nodes.
 */
export async function installPublishedPortsGate(o: PublishedPortsOptions, node: NodeGateFacts, iptables: FamilyIptables, check: FamilyCheck): Promise<void> {
  for (const family of familiesOf(node)) {
    const { allowances, drop, jumps } = publishedPortRules(o, node, family);
    const present = await check(family, [drop, ...allowances, ...jumps]);
    if (present.every(Boolean)) continue;
    // Without its DROP, the chain may be missing too (a node that rebooted).
    if (present[0] !== true) {
      await iptables(family, [...MANGLE, '-N', PUBLISHED_CHAIN]).catch(() => {}); // exists already
      await iptables(family, ['-A', drop[0], ...drop[1]]);
    }
    // Ahead of the DROP.
    for (const [i, [chain, rule]] of allowances.entries()) if (present[1 + i] !== true) await iptables(family, ['-I', chain, '1', ...rule]);
    for (const [i, [chain, rule]] of jumps.entries()) if (present[1 + allowances.length + i] !== true) await iptables(family, ['-I', chain, '1', ...rule]);
  }
}

/** null when the gate is whole on a node; otherwise the first rule it lacks. */
export async function missingPublishedPortRule(o: PublishedPortsOptions, node: NodeGateFacts, check: FamilyCheck): Promise<string | null> {
  for (const family of familiesOf(node)) {
    const { allowances, drop, jumps } = publishedPortRules(o, node, family);
    const wanted = [drop, ...allowances, ...jumps];
    const present = await check(family, wanted);
    const absent = wanted.find((_, i) => present[i] !== true);
    if (absent) return `missing ${family} rule in ${absent[0]}: ${absent[1].join(' ')}`;
  }
  return null;
}
