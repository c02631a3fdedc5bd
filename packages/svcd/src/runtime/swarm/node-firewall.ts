// Tenant egress on a swarm's nodes (DECISIONS.md, "Tenant egress"; issue 21). A Swarm task leaves
// its node through docker_gwbridge, a bridge every tenant's tasks on the node share: without rules
// there, a task reaches the node's own ports (its engine, if it listens on TCP) and, through them,
// every host-mode published port, other tenants' included, bypassing the proxy; and private
// networks behind the node. The rules are host-firewall.ts's, for docker_gwbridge instead of svc's
// tenant bridges, and with nothing allowed between members of the bridge: tasks of one tenant talk
// over their overlay network, never through the gateway bridge.
//
// Builds run on the manager's engine (swarm-runtime.ts), on the tenant's bridge network there, as
// on one engine's host: their RUN steps leave the node through svc's tenant bridges, which get
// the host's rules too (host-firewall.ts's TENANT_BRIDGES) in chains of their own. Every node gets
// both sets (a node that is no manager has no tenant bridge, and the set is idle there), so that
// --docker-host may name any manager.
//
// svc has no agent of its own on the nodes and never uses SSH: it runs the rules through each
// node's engine (--swarm-node), which is root on the node already. On each node it keeps one
// helper container (HELPER_NAME) in the node's network namespace, with the node's root file
// system mounted (read only), of an image with a shell, sleep and chroot (--swarm-helper-image;
// busybox); each iptables call is an exec in it that runs the node's own iptables under chroot.
// So the rules use the node's iptables binary and backend (legacy or nf_tables), as Docker's own
// rules on the node do. (Not nsenter into PID 1's mount namespace: it needs SYS_ADMIN and
// SYS_PTRACE, and some hosts refuse even those.) The helper restarts with its engine; svcd
// checks every node's rules on a timer and puts back what is missing (a node that rebooted, one
// that joined).
//
// The same pass puts svc-init (tenant-init.ts) on every node, which Swarm has no way to ship with a
// task: the helper holds the node volume TENANT_INIT_VOLUME, where each build of svc-init is a file
// named by its hash (tenantInitName), which svcd writes through the helper and checks by its hash
// on every pass; tasks that run tenant code mount the volume read-only and run their build's file.
// A node is labelled ready for workloads (the egress label and the label of this svc-init's hash)
// only once both are in place, and workloads ask for both labels: a task never lands where its
// init is missing. svcd of two versions (an upgrade under way) each keep their own file beside the
// other's, and the helper does not depend on either.
import { createHash, randomBytes } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { basename } from 'node:path';
import { buffer } from 'node:stream/consumers';
import Docker from 'dockerode';
import { pack } from 'tar-stream';
import { CappedText, dockerOptions, isNotFound, type EngineTls } from '../docker/docker-runtime.js';
import { consumeProgress } from '../docker/engine-streams.js';
import { SANDBOX_RUNTIME } from '../port.js';
import { installPublishedPortsGate, missingPublishedPortRule, type NodeGateFacts, type PublishedPortsOptions } from './published-ports.js';
import { FirewallError, HostFirewall, TENANT_BRIDGES, shellIptablesCheck, type ChainRule, type EgressAllowance, type IptablesFamily, type TenantInterfaces } from '../host-firewall.js';

/**
 * The bridge Swarm connects every task to for its traffic off the overlay (and its published
 * ports), under chains of its own: svcd's own host (a node, often) keeps its tenant bridges' rules
 * in the default chains, and rules of two sets in one chain would weaken each other (an early
 * RETURN of one skipping the other's rejects). An older svcd's jumps to the default chains, left
 * on a node, only add their rejects.
 */
const GATEWAY_CHAINS = { egress: 'SVC-GW-EGRESS', host: 'SVC-GW-HOST' };
export const SWARM_GATEWAY_BRIDGE: TenantInterfaces = { pattern: 'docker_gwbridge', dockerIsolates: false, forwardChain: 'FORWARD', repliesOnly: true, chains: GATEWAY_CHAINS };

/**
 * The tenant bridges of builds on a node's engine, under chains apart from the gateway bridge's;
 * only replies pass, as on the gateway bridge (a node's rules can be away after a reboot).
 */
const BUILD_CHAINS = { egress: 'SVC-BUILD-EGRESS', host: 'SVC-BUILD-HOST' };
export const SWARM_BUILD_BRIDGES: TenantInterfaces = { ...TENANT_BRIDGES, repliesOnly: true, chains: BUILD_CHAINS };

/** The helper container svcd keeps on every node (one per node, shared by every svcd and installation). */
export const HELPER_NAME = 'svc-node-firewall';
const HELPER_LABEL = 'svc.role';
/** The helper's configuration as a label: a helper made otherwise (an older svcd, another image) is made again. */
const HELPER_CONFIG_LABEL = 'svc.helper-config';

/**
 * The node label svcd sets once a node's rules are in place, and every workload's placement
 * constraint: Swarm runs tasks only on nodes svcd has secured (not on one that joined without
 * an engine address in --swarm-node, nor before svcd reached it).
 */
export const EGRESS_NODE_LABEL = 'svc.egress-rules';
export const EGRESS_NODE_CONSTRAINT = `node.labels.${EGRESS_NODE_LABEL}==installed`;

/**
 * The node label svcd sets where the node's engine runs every container under gVisor (its default
 * runtime is runsc): a Swarm service spec cannot choose a runtime (Engine 20.10), so a sandboxed
 * workload runs only on such nodes (SANDBOX_NODE_CONSTRAINT).
 */
export const SANDBOX_NODE_LABEL = 'svc.sandbox';
export const SANDBOX_NODE_CONSTRAINT = `node.labels.${SANDBOX_NODE_LABEL}==gvisor`;

/** Whether an engine runs its containers under gVisor unless told otherwise (its default runtime is runsc, by name or by path). */
export function sandboxedByDefault(info: { DefaultRuntime?: unknown; Runtimes?: Record<string, { path?: unknown } | undefined> }): boolean {
  const name = typeof info.DefaultRuntime === 'string' ? info.DefaultRuntime : 'runc';
  const path = info.Runtimes?.[name]?.path;
  return name === SANDBOX_RUNTIME || (typeof path === 'string' && basename(path) === SANDBOX_RUNTIME);
}

/** What an iptables call answered, in full, up to this much (its errors are one line). */
const MAX_OUTPUT_BYTES = 16 * 1024;

/** svc-init as svcd ships it to the nodes: its content and its SHA-256 (hex). */
export interface NodeTenantInit {
  content: Buffer;
  sha256: string;
}

/** svc-init's binary (built by make, or --tenant-init) as the nodes get it. */
export async function readNodeTenantInit(binary: string): Promise<NodeTenantInit> {
  const content = await readFile(binary);
  return { content, sha256: createHash('sha256').update(content).digest('hex') };
}

/** The node volume that holds svc-init, one file per build of it (tasks of an older one keep theirs). */
export const TENANT_INIT_VOLUME = 'svc-init';

/** The file of this build of svc-init in TENANT_INIT_VOLUME. */
export function tenantInitName(sha256: string): string {
  return sha256.slice(0, 16);
}

/** The node label saying the node holds this svc-init; workloads' placement asks for it. */
export function tenantInitNodeLabel(sha256: string): string {
  return `svc.tenant-init.${tenantInitName(sha256)}`;
}

/** Every workload's placement constraints on a swarm: a node with svc's egress rules and this svc-init. */
export function preparedNodeConstraints(tenantInitSha256: string): string[] {
  return [EGRESS_NODE_CONSTRAINT, `node.labels.${tenantInitNodeLabel(tenantInitSha256)}==installed`];
}

/** Where the helper mounts the svc-init volume (read-write: it is written through the helper). */
const HELPER_INIT_DIR = '/svc-init';

export interface NodeFirewallsOptions {
  /** Each node's Engine API by its host name (--swarm-node). */
  nodes: ReadonlyMap<string, string>;
  /** TLS material of the node engines reached at https://, by address. */
  tls?: Readonly<Record<string, EngineTls>>;
  /**
   * The cluster's nodes as Swarm lists them now, by host name (a node without an engine address
   * is reported) and address (refused to tasks on every node: refuseNodes).
   */
  clusterNodes: () => Promise<Array<{ id: string; hostname: string; address: string; state: string }>>;
  /**
   * Labels the node ready for workloads (through the manager: EGRESS_NODE_LABEL and this
   * svc-init's tenantInitNodeLabel), or takes the labels off (ready: false), and says whether it
   * runs gVisor (SANDBOX_NODE_LABEL; left as it is when not known); nothing where they are so
   * already.
   */
  markNode: (node: string, ready: boolean, sandboxed?: boolean) => Promise<void>;
  /** svc-init, put on every node beside the rules. */
  tenantInit: NodeTenantInit;
  /** Who reaches the ports svc publishes on the nodes (published-ports.ts). */
  published: PublishedPortsOptions;
  /** Where what a node lacks is told (tenants read the health detail: it names no node). */
  log: { warn(obj: object, msg: string): void };
  /** An image with sleep and chroot (busybox), which every node can pull. */
  helperImage: string;
  allow: readonly EgressAllowance[];
  timeoutMs?: number;
}

export class NodeFirewalls {
  /** Each node's engine and its two sets of rules: its tasks' gateway bridge, and builds' tenant bridges. */
  private readonly firewalls = new Map<string, { engine: Docker; sets: HostFirewall[] }>();
  private readonly helperConfig: string;
  /**
   * The nodes' own addresses read by earlier passes (refused to tasks on every node with those
   * Swarm lists): kept, as a refusal on the nodes is (an address is no one's to reach from a task).
   */
  private nodeAddresses: string[] = [];

  constructor(private readonly o: NodeFirewallsOptions) {
    this.helperConfig = createHash('sha256').update(JSON.stringify(this.helperSpec())).digest('hex').slice(0, 16);
    for (const [name, url] of o.nodes) {
      const engine = new Docker(dockerOptions(url, o.timeoutMs ?? 10_000, o.tls?.[url] ?? null));
      const set = (interfaces: TenantInterfaces) => new HostFirewall({ allow: o.allow, owner: null, iptables: (args) => this.iptablesOn(engine, args), tenants: interfaces, check: (rules) => this.checkOn(engine, rules) });
      this.firewalls.set(name, { engine, sets: [set(SWARM_GATEWAY_BRIDGE), set(SWARM_BUILD_BRIDGES)] });
    }
  }

  /**
   * Installs the rules on every node whose engine answers (idempotent), and marks each node that
   * has them. A node where they could not be put in place (its engine away, an error), or that has
   * no engine address at all, loses the mark: Swarm then moves its tasks to marked nodes (its
   * constraint enforcer) and places none there. Throws naming the nodes it could not install on,
   * after trying every node: one node away does not leave the others open. One run at a time:
   * svcd runs it as a periodic job, under a lease (app.ts).
   */
  async install(): Promise<void> {
    const failed: string[] = [];
    const cluster = await this.o.clusterNodes();
    // First every node's engine checked, its helper made, and its own addresses read: every node
    // refuses all of them (nodeRefusals), also those Swarm's node list does not name.
    const ready = await Promise.all(
      [...this.firewalls].map(async ([name, { engine, sets }]) => {
        try {
          // The engine at this name is the swarm node of that host name (the only live one of
          // it: a node that left and joined again leaves a down entry of the same name).
          const info = (await engine.info()) as Parameters<typeof sandboxedByDefault>[0] & { Swarm?: { NodeID?: string } };
          const named = cluster.filter((n) => n.hostname === name && n.state !== 'down');
          if (named.length !== 1) throw new Error(named.length === 0 ? 'no live swarm node has this host name' : 'several live swarm nodes have this host name');
          const id = named[0]?.id ?? '';
          if (info.Swarm?.NodeID !== id) throw new Error(`the engine at its --swarm-node address is swarm node ${info.Swarm?.NodeID || '(none)'}, not ${name} (${id})`);
          await this.ensureHelper(engine);
          return { name, id, engine, sets, info, addresses: await this.ownAddresses(engine) };
        } catch (err) {
          failed.push(`${name}: ${err instanceof Error ? err.message : String(err)}`);
          return null;
        }
      }),
    );
    this.nodeAddresses = [...new Set([...this.nodeAddresses, ...ready.flatMap((n) => n?.addresses ?? [])])];
    const refusals = nodeRefusals([...cluster, ...this.nodeAddresses.map((address) => ({ address }))]);
    await Promise.all(
      [...this.firewalls].map(async ([name]) => {
        const node = ready.find((n) => n?.name === name);
        try {
          if (!node) throw new Error('not prepared');
          const { engine, sets } = node;
          for (const set of sets) await set.install();
          await this.refuseNodes(engine, refusals);
          await installPublishedPortsGate(this.o.published, await this.gateFacts(engine), (family, args) => this.iptablesOn(engine, args, family), (family, rules) => this.checkOn(engine, rules, family));
          await this.ensureTenantInit(engine);
          await this.o.markNode(node.id, true, sandboxedByDefault(node.info));
        } catch (err) {
          if (node) failed.push(`${name}: ${err instanceof Error ? err.message : String(err)}`);
          // By its id when known (a down entry may share its host name); the manager away too: nothing to unmark with.
          await this.o.markNode(node?.id ?? name, false).catch(() => {});
        }
      }),
    );
    for (const name of await this.nodesWithoutEngine()) await this.o.markNode(name, false);
    if (failed.length > 0) throw new FirewallError(`swarm nodes: ${failed.sort().join('; ')}`);
  }

  /**
   * The node's own IPv4 addresses (global scope), read in its network namespace through the
   * helper: Swarm lists one address a node, which may not be the one a task reaches it at (a
   * public address beside the cluster's, a manager listed at 0.0.0.0).
   */
  private async ownAddresses(engine: Docker): Promise<string[]> {
    const { exitCode, output } = await this.execIn(engine, ['ip', '-4', '-o', 'addr', 'show', 'scope', 'global']);
    if (exitCode !== 0) throw new Error(`the node's addresses could not be read: ${output.trim().slice(0, 300)}`);
    return [...output.matchAll(/\binet (\d{1,3}(?:\.\d{1,3}){3})\//g)].map((m) => m[1] ?? '').filter((a) => a !== '');
  }

  /**
   * null when every node of the cluster has every rule; otherwise a line that says so without
   * naming the node (tenants read it), and the node and what it lacks in the log.
   */
  async missing(): Promise<string | null> {
    const unreachable = await this.nodesWithoutEngine();
    if (unreachable.length > 0) {
      this.o.log.warn({ nodes: unreachable }, 'swarm nodes without an engine address (--swarm-node): svc cannot install their tenant egress rules, and runs no workload there');
      return 'a swarm node has no engine address for svc (see the svcd log): svc runs no workload there';
    }
    const nodes = [...this.firewalls].sort(([a], [b]) => a.localeCompare(b));
    const refusals = nodeRefusals([...(await this.o.clusterNodes()), ...this.nodeAddresses.map((address) => ({ address }))]);
    const missing = await Promise.all(
      nodes.map(async ([, { engine, sets }]) => {
        const egress = (await Promise.all(sets.map((set) => set.missing()))).find((m) => m !== null) ?? null;
        const present = await this.checkOn(engine, refusals);
        const refusal = refusals.find((_, i) => present[i] !== true);
        return egress ?? (refusal ? `missing rule in ${refusal[0]}: ${refusal[1].join(' ')}` : null) ?? (await missingPublishedPortRule(this.o.published, await this.gateFacts(engine), (family, rules) => this.checkOn(engine, rules, family)));
      }),
    );
    const lacking = nodes.flatMap(([name], i) => (missing[i] ? [{ node: name, missing: missing[i] }] : []));
    if (lacking.length === 0) return null;
    this.o.log.warn({ lacking }, "svc's network rules (tenant egress, published ports) are missing on swarm nodes (put back within 30 s)");
    return "svc's network rules are missing on a swarm node (see the svcd log)";
  }

  /** The cluster's nodes that svcd has no engine address for (--swarm-node), by host name. */
  private async nodesWithoutEngine(): Promise<string[]> {
    return (await this.o.clusterNodes()).map((n) => n.hostname).filter((h) => !this.firewalls.has(h)).sort();
  }

  /**
   * Every node's address refused to tasks and builds on this node, whatever address it has: the
   * non-public ranges cover a cluster on a private network, not nodes on public addresses, where a
   * task would otherwise reach another node's published ports (from its own node's address, which
   * --swarm-published-from may name) and its overlay port (4789, unencrypted VXLAN: a hand-made
   * frame into another tenant's overlay). Appended: after the replies (the proxy on a node talks
   * to tasks on others) and the operator's --egress-allow. A node that left keeps its refusal
   * until removed by hand; its address is no one's to reach from a task anyway.
   */
  private async refuseNodes(engine: Docker, refusals: readonly ChainRule[]): Promise<void> {
    const present = await this.checkOn(engine, refusals);
    for (const [i, [chain, rule]] of refusals.entries()) if (present[i] !== true) await this.iptablesOn(engine, ['-A', chain, ...rule]);
  }

  /**
   * Leaves the rules on the nodes, allowances included: the nodes' tasks run on while svcd
   * restarts, and other svcd serve beside it (unlike one host's rules, whose allowances go with
   * their svcd). An allowance taken out of --egress-allow stays on the nodes until removed there.
   */
  close(): Promise<void> {
    return Promise.resolve();
  }

  /** Makes sure the node's helper container exists and runs, of the configured image. */
  private async ensureHelper(engine: Docker): Promise<void> {
    const container = engine.getContainer(HELPER_NAME);
    const state = await container.inspect().catch((err: unknown) => {
      if (isNotFound(err)) return null;
      throw err;
    });
    // The engine answers null for a container without labels (its typings say otherwise).
    const labels = state?.Config.Labels as Partial<Record<string, string>> | null | undefined;
    if (state && labels?.[HELPER_CONFIG_LABEL] !== this.helperConfig) {
      // Made otherwise (another image, an older svcd's settings, or not svc's at all): made again.
      await container.remove({ force: true }).catch((err: unknown) => {
        if (!isNotFound(err)) throw err;
      });
    } else if (state) {
      if (!state.State.Running) await container.start().catch(ignoreAlreadyStarted);
      return;
    }
    const present = await engine.getImage(this.o.helperImage).inspect().then(
      () => true,
      (err: unknown) => {
        if (isNotFound(err)) return false;
        throw err;
      },
    );
    if (!present) await consumeProgress(await engine.pull(this.o.helperImage));
    await engine
      .createContainer({
        ...this.helperSpec(),
        name: HELPER_NAME,
        Labels: { [HELPER_LABEL]: 'node-firewall', [HELPER_CONFIG_LABEL]: this.helperConfig },
      })
      .catch((err: unknown) => {
        // Another svcd made it at the same moment.
        if ((err as { statusCode?: number }).statusCode !== 409) throw err;
      });
    await container.start().catch(ignoreAlreadyStarted);
  }

  /**
   * svc-init in the node's volume, as this svcd has it: checked by its hash (one exec), else
   * written beside and renamed over, so that a task never starts on a half-written binary.
   */
  private async ensureTenantInit(engine: Docker): Promise<void> {
    const { content, sha256 } = this.o.tenantInit;
    const name = tenantInitName(sha256);
    const target = `${HELPER_INIT_DIR}/${name}`;
    const now = await this.execIn(engine, ['sha256sum', target]);
    if (now.exitCode === 0 && now.output.startsWith(sha256)) return;
    // A name of this write's own: two installations writing at once never move each other's half.
    const partial = `${name}.${randomBytes(6).toString('hex')}.partial`;
    const archive = pack();
    // Every user a task runs as must be able to run it.
    archive.entry({ name: partial, mode: 0o555, size: content.length }, content);
    archive.finalize();
    await engine.getContainer(HELPER_NAME).putArchive(await buffer(archive), { path: HELPER_INIT_DIR });
    const moved = await this.execIn(engine, ['mv', '-f', `${HELPER_INIT_DIR}/${partial}`, target]);
    // What counts is the file under its name (another writer's move may have come first).
    const after = await this.execIn(engine, ['sha256sum', target]);
    if (after.exitCode !== 0 || !after.output.startsWith(sha256)) throw new Error(`svc-init could not be put in place: ${(moved.output || after.output).trim().slice(0, 300)}`);
  }

  /**
   * What the published-ports gate needs of a node: its docker_gwbridge's IPv4 subnets (Swarm makes
   * the bridge when the node joins; none yet, nothing to close), and whether its kernel has IPv6
   * (the helper shares the node's network namespace, whose /proc/net says so).
   */
  private async gateFacts(engine: Docker): Promise<NodeGateFacts> {
    const bridge = (await engine
      .getNetwork('docker_gwbridge')
      .inspect()
      .catch((err: unknown) => {
        if (isNotFound(err)) return null;
        throw err;
      })) as { IPAM?: { Config?: Array<{ Subnet?: string }> | null } } | null;
    const subnets = (bridge?.IPAM?.Config ?? []).map((c) => c.Subnet ?? '').filter((subnet) => /^\d{1,3}(\.\d{1,3}){3}\/\d{1,2}$/.test(subnet));
    const ipv6 = (await this.execIn(engine, ['test', '-e', '/proc/net/if_inet6'])).exitCode === 0;
    return { gatewaySubnets: subnets, ipv6 };
  }

  /** The helper container, but for its name and labels. */
  private helperSpec(): Docker.ContainerCreateOptions {
    return {
        Image: this.o.helperImage,
        // Idles; every call is an exec. busybox's sleep takes seconds up to 2^31.
        Entrypoint: ['sleep'],
        Cmd: ['2147483647'],
        HostConfig: {
          // The node's network namespace: its iptables. Its root file system under /host, read
          // only but for /run (iptables' lock): the node's own iptables binary runs there.
          NetworkMode: 'host',
          Binds: ['/:/host:ro', '/run:/host/run'],
          // The node's svc-init volume, which svcd writes through the helper (ensureTenantInit).
          Mounts: [{ Type: 'volume', Source: TENANT_INIT_VOLUME, Target: HELPER_INIT_DIR }],
          CapDrop: ['ALL'],
          CapAdd: ['NET_ADMIN', 'NET_RAW', 'SYS_CHROOT'],
          // runc: the node's default runtime may be gVisor, whose kernel is not the node's.
          Runtime: 'runc',
          RestartPolicy: { Name: 'always' },
        },
    };
  }

  /** iptables (or ip6tables) on the node, through an exec in its helper. Throws with what it said. */
  private async iptablesOn(engine: Docker, args: string[], family: IptablesFamily = 'iptables'): Promise<string> {
    const { exitCode, output } = await this.execIn(engine, ['chroot', '/host', family, '-w', ...args]);
    if (exitCode !== 0) throw Object.assign(new Error(`${family} exited with ${String(exitCode)}: ${output.trim()}`), { stderr: output.trim() || `${family} exited with ${String(exitCode)}` });
    return output;
  }

  /** `iptables -C` (or ip6tables) for the rules in one exec for each 64 KB of script (a call to the node's engine for many rules rather than one a rule): a line of 1 or 0 each. */
  private checkOn(engine: Docker, rules: readonly ChainRule[], family: IptablesFamily = 'iptables'): Promise<boolean[]> {
    return shellIptablesCheck((script) => this.execIn(engine, ['chroot', '/host', 'sh', '-c', script]), family)(rules);
  }

  private async execIn(engine: Docker, cmd: string[]): Promise<{ exitCode: number; output: string }> {
    const exec = await engine.getContainer(HELPER_NAME).exec({
      Cmd: cmd,
      // Where distributions keep iptables, for chroot and the shell to find it.
      Env: ['PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'],
      AttachStdout: true,
      AttachStderr: true,
    });
    const stream = await exec.start({ hijack: true, stdin: false });
    const output = new CappedText(MAX_OUTPUT_BYTES);
    engine.modem.demuxStream(stream, output, output);
    await new Promise<void>((resolve) => {
      stream.on('end', resolve);
      stream.on('close', resolve);
      stream.on('error', resolve);
    });
    // The stream can end a moment before the engine records the exit. (Real timers: this waits
    // on the engine, as every engine call does.)
    for (let tries = 0; ; tries++) {
      const { Running, ExitCode } = await exec.inspect();
      if (!Running && ExitCode !== null) return { exitCode: ExitCode, output: output.text() };
      if (tries >= 50) throw new Error('the exec did not end within 5 s of its output');
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }
}

/** The rules that refuse the nodes' IPv4 addresses to tasks (the gateway bridge) and builds (their tenant bridges) on a node. */
export function nodeRefusals(nodes: ReadonlyArray<{ address: string }>): ChainRule[] {
  const addresses = [...new Set(nodes.map((n) => n.address).filter((a) => /^\d{1,3}(\.\d{1,3}){3}$/.test(a)))].sort();
  return [GATEWAY_CHAINS.egress, BUILD_CHAINS.egress].flatMap((chain) =>
    addresses.map((a): ChainRule => [chain, ['-d', `${a}/32`, '-m', 'comment', '--comment', 'svc: a swarm node', '-j', 'REJECT', '--reject-with', 'icmp-admin-prohibited']]),
  );
}

function ignoreAlreadyStarted(err: unknown): void {
  if ((err as { statusCode?: number }).statusCode !== 304) throw err;
}
