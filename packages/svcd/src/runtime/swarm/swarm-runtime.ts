// The Docker Swarm driver (issue 21, --runtime swarm): svc's workloads as Swarm services on a
// cluster, through a manager's Engine API, behind the same port as the single-engine driver
// (driver.ts). What Swarm has no API of its own for (exec, one-shot stats) goes to the engine of
// the node that runs the task, at the address the operator names for that node (--swarm-node);
// svc never uses SSH.
//
// How a workload runs here:
// - A tenant's network is an attachable overlay network (VXLAN), `tenant-<id>`.
// - A workload is a Swarm service of one replica (a service's `replicas`: that many, at most one
//   a node, since each publishes the service's port on its node) with svc's labels, hardened as far as a service
//   spec allows (every capability dropped, pids, memory and CPU limits). Swarm cannot pick an OCI
//   runtime per service nor set no-new-privileges (Engine 20.10). So the sandbox is the nodes':
//   a sandboxed workload runs only on nodes whose engine runs gVisor by default (labelled by
//   svcd), and every workload starts through svc-init (from a volume svcd keeps on every node),
//   which sets no-new-privileges for the command itself; tenant code runs under it, its log held
//   to the rate, as on one engine.
// - Its port is published in host mode on the node that runs the task, on the port svcd allocated
//   for the service (--swarm-ports, one per service for its life): this kernel has no IPVS, so
//   Swarm's virtual IPs and ingress mesh are out (endpoint mode dnsrr). svcd and the proxy reach
//   the task at <node address>:<published port>, read from the task list; a rescheduled task is
//   found there again.
// - A redeploy is rolling where another node can take the new task: the running service is set
//   aside (svc's name label moved to its set-aside name; a Swarm service cannot be renamed, and
//   its tasks run on untouched) and a new Swarm service starts beside it under a name of its own;
//   Swarm's scheduler places its task on a node where the service's port is free, that is another
//   node, and the deployer moves the route before it removes the old one. With no other node that
//   can run it, the old service goes first, as before. A workload's name is therefore its
//   `svc.name` label, not always its Swarm service's name; names are looked up by that label.
// - Swarm restarts a task that exits and reschedules tasks of a node that is gone (restart
//   condition any). A task that fails before its service was ever running counts as an exit, so
//   that a deploy of an image that crashes fails at once instead of at the readiness deadline.
// - Images come from a registry every node reaches: Swarm's nodes pull them themselves.
// - Tasks run only on nodes where svcd put its tenant egress rules (node-firewall.ts), which it
//   marks with a node label.
// - A workload that keeps its data on its node's disk (a database: its volume is the node's own)
//   is pinned to that node by a placement constraint, and placed on the least busy node the
//   first time. When that node is down, drained or gone, Swarm is not left to start it empty
//   elsewhere: apply refuses with NodeUnavailableError, which the resource reports, and it runs
//   there again once the node is back.
// Images are built and the host's figures read on the manager's engine (the single-engine
// driver, over the same address).
import Docker from 'dockerode';
import type { Clock, Timers } from '../../clock.js';
import { systemClock, systemTimers } from '../../clock.js';
import { applyInOrder } from '../apply-sequence.js';
import { EGRESS_NODE_CONSTRAINT, EGRESS_NODE_LABEL, SANDBOX_NODE_CONSTRAINT, SANDBOX_NODE_LABEL, preparedNodeConstraints, TENANT_INIT_VOLUME, tenantInitName, tenantInitNodeLabel } from './node-firewall.js';
import { DockerRuntime, dockerOptions, imageCommand, isNotFound, type EngineTls } from '../docker/docker-runtime.js';
import { TENANT_INIT_DIR, resolveCommand, tenantCommand, withoutPrivilegeGain, type ImageCommand, type LogRate } from '../tenant-init.js';
import { demuxedLog, lastLinesOf } from '../docker/engine-streams.js';
import {
  LABELS,
  NodeUnavailableError,
  WorkloadNotRunningError,
  tenantNetworkName,
  workloadLabels,
  type Applied,
  type ApplyRequest,
  type ClusterNodeInfo,
  type ClusterNodes,
  type DriverCapabilities,
  type EngineHost,
  type Endpoint,
  type ExecOutcome,
  type ExecSpec,
  type ImageBuildSpec,
  type LogOptions,
  type Runtime,
  type WorkloadExit,
  type WorkloadInfo,
  type WorkloadKind,
  type WorkloadSpec,
  type WorkloadStats,
} from '../port.js';

export interface SwarmRuntimeOptions {
  /** A manager's Engine API (--docker-host). */
  manager: string;
  /** Each node's own Engine API by its host name (--swarm-node NAME=URL), for exec and stats. */
  nodes: ReadonlyMap<string, string>;
  /** TLS material of the engines (the manager's, the nodes') reached at https://, by address. */
  tls?: Readonly<Record<string, EngineTls>>;
  installation: string;
  timeoutMs?: number;
  clock?: Clock;
  timers?: Timers;
  /** How often the task list is read for exits (events). */
  eventsEveryMs?: number;
  /**
   * svc-init for tenant code, which svcd puts on every node (node-firewall.ts) by its hash: tasks
   * mount the nodes' svc-init volume and run the file of that hash, only on nodes labelled to hold it.
   */
  tenantInit?: { sha256: string; rate: LogRate };
}

/**
 * Task states that are the workload's own end: its process exited (complete, failed) or it could
 * not start (rejected). Not svc's or Swarm's stops (shutdown, remove), nor a task left on a node
 * that went away (orphaned): a node's loss is not charged to the tenant's crash circuit.
 */
const EXIT_TASK_STATES = new Set(['complete', 'failed', 'rejected']);
/**
 * The workload's name (the spec's, or its set-aside name) on its Swarm service: the Swarm name
 * cannot change, and a rolling redeploy's new service runs beside the old one under another.
 */
const NAME_LABEL = 'svc.name';
/** The replicas the spec asked for, kept on the Swarm service: a stop scales it to 0, a start back to this. */
const REPLICAS_LABEL = 'svc.replicas';
/** A copy of a workload (WorkloadInfo.copies): its task's node (host name) and container. */
const COPY_REF = /^(.+)\/([0-9a-f]{64})$/;
function copyRef(hostname: string, containerId: string): string {
  return `${hostname}/${containerId}`;
}
/** What Swarm answers for a service ID (25 lowercase letters and digits): svc's names have dashes. */
const SWARM_ID = /^[0-9a-z]{25}$/;
/** How long after a service is made its tasks may find its port still held by the task it replaced. */
const REPLACED_TASK_GRACE_MS = 60_000;
/** How long the node directory (addresses, host names) is used before it is read again. */
const NODE_DIRECTORY_TTL_MS = 1_000;
/** How long a volume a removed service's task still holds is waited for (its stop grace is 10 s). */
const VOLUME_IN_USE_WAIT_MS = 30_000;
/** The engine's errors for a host port in use, with the port. */
const PORT_IN_USE = /Bind for \S+:(\d+) failed: port is already allocated|listen tcp[46]? \S+:(\d+): bind: address already in use/;

/**
 * Whether a failed task is one its node refused the service's own published port while the task
 * the service replaced still stops there (svc removes the old service first; Swarm stops its task
 * in the background): not the workload ending, and Swarm tries again. Only then: the error names
 * that port, within a minute of the service's making. A port held for good (something outside svc)
 * fails the deploy at its readiness deadline, and a later failure is an exit as any other.
 */
export function replacedTaskHoldsPort(error: string, port: number | null, taskCreated: string, serviceCreated: string): boolean {
  const m = PORT_IN_USE.exec(error);
  if (!m || port === null || Number(m[1] ?? m[2]) !== port) return false;
  const since = Date.parse(taskCreated) - Date.parse(serviceCreated);
  return Number.isFinite(since) && since < REPLACED_TASK_GRACE_MS;
}

/** The port a service spec publishes its task on (svcd's allocation), if it names one. */
function specPublishedPort(spec: ServiceSpec | undefined): number | null {
  return (spec?.EndpointSpec as { Ports?: Array<{ PublishedPort?: number }> } | undefined)?.Ports?.[0]?.PublishedPort ?? null;
}

/** A task that runs and is meant to (not one Swarm is stopping, nor one still on its way). */
function runsNow(t: TaskView): boolean {
  return t.state === 'running' && t.desired === 'running';
}

interface TaskView {
  id: string;
  serviceId: string;
  nodeId: string;
  state: string;
  desired: string;
  createdAt: string;
  exitCode: number | null;
  error: string;
  containerId: string | null;
  publishedPort: number | null;
}

interface SwarmNode {
  ID: string;
  Version: { Index: number };
  Spec: Record<string, unknown> & { Role?: string; Availability?: 'active' | 'pause' | 'drain' };
  Status?: { State?: string; Addr?: string };
  Description?: { Hostname?: string; Engine?: { EngineVersion?: string }; Resources?: { NanoCPUs?: number; MemoryBytes?: number } };
}


type ServiceSpec = Record<string, unknown> & { Name?: string; Labels?: Record<string, string>; Mode?: { Replicated?: { Replicas?: number } } };

interface SwarmService {
  ID: string;
  Spec: ServiceSpec;
  Version: { Index: number };
  CreatedAt?: string;
}

export class SwarmRuntime implements Runtime, ClusterNodes {
  private readonly docker: Docker;
  private readonly streaming: Docker;
  /** The manager's engine, for builds, images and the host's figures. */
  private readonly managerEngine: DockerRuntime;
  /** Engines of the nodes by host name, made on first use. */
  private readonly nodeEngines = new Map<string, DockerRuntime>();
  /** The node directory as last read (nodeDirectory). */
  private directory: { nodes: Map<string, { address: string; hostname: string }>; readAtMs: number } | null = null;
  /** Each node's last disk reading of svc's workloads (diskUsage), for a pass its engine misses. */
  private readonly lastNodeDisk = new Map<string, Awaited<ReturnType<EngineHost['diskUsage']>>['workloads']>();
  private readonly clock: Clock;
  private readonly timers: Timers;

  constructor(private readonly o: SwarmRuntimeOptions) {
    const timeoutMs = o.timeoutMs ?? 5_000;
    this.clock = o.clock ?? systemClock;
    this.timers = o.timers ?? systemTimers;
    const tls = o.tls?.[o.manager] ?? null;
    this.docker = new Docker(dockerOptions(o.manager, timeoutMs, tls));
    this.streaming = new Docker({ ...dockerOptions(o.manager, timeoutMs, tls), timeout: undefined });
    // Builds on a network of their own there: the tenant's network is the overlay of its tasks.
    this.managerEngine = new DockerRuntime({ host: o.manager, tls, installation: o.installation, timeoutMs, clock: this.clock, timers: this.timers, buildNetwork: 'own' });
  }

  // --- The host and images: the manager's engine. ---
  info: EngineHost['info'] = () => this.managerEngine.info();
  /** The health detail's sandbox: gVisor where every node svcd prepared runs it by default (capabilities). */
  sandboxVersion: EngineHost['sandboxVersion'] = async () => ((await this.capabilities()).sandbox ? "gVisor (every node's default runtime)" : null);
  storage: EngineHost['storage'] = () => this.managerEngine.storage();
  /**
   * What svc's workloads take on every node's disk (their writable layers and volumes: a task's,
   * a pinned database's or environment's), read from each node's engine, and the built images'
   * layers on the manager (where builds run). A node whose engine does not answer counts with its
   * last reading (what is on its disk is still there), rather than the whole reading failing.
   */
  diskUsage: EngineHost['diskUsage'] = async () => {
    const manager = await this.managerEngine.diskUsage();
    const managerHost = await this.managerHostname();
    const others = [...this.o.nodes.keys()].filter((hostname) => hostname !== managerHost);
    const readings = await Promise.all(
      others.map(async (hostname) => {
        try {
          const { workloads } = await this.nodeEngine(hostname).diskUsage();
          this.lastNodeDisk.set(hostname, workloads);
          return workloads;
        } catch {
          return this.lastNodeDisk.get(hostname) ?? [];
        }
      }),
    );
    return { workloads: [...manager.workloads, ...readings.flat()], images: manager.images };
  };

  /** The host name of the node whose engine is the manager's (--docker-host). */
  private async managerHostname(): Promise<string | null> {
    const info = (await this.docker.info()) as { Swarm?: { NodeID?: string } };
    return (await this.nodeDirectory()).get(info.Swarm?.NodeID ?? '')?.hostname ?? null;
  }
  countNetworks: EngineHost['countNetworks'] = (prefix) => this.managerEngine.countNetworks(prefix);
  hasImage = (image: string) => this.managerEngine.hasImage(image);
  baseImage = (image: string) => this.managerEngine.baseImage(image);
  stepRuntime = () => this.managerEngine.stepRuntime();
  close = () => this.managerEngine.close();
  pullImage = (image: string, signal?: AbortSignal) => this.managerEngine.pullImage(image, signal);
  /**
   * On the manager's engine. A tenant's RUN steps leave it through its tenant bridges: only while
   * svcd's rules are in place there (its node label says so, as for tasks), not in the moments
   * after the manager rebooted or while svcd cannot reach its engine.
   */
  buildImage = async (spec: ImageBuildSpec): Promise<void> => {
    if (spec.tenantId !== null) await this.assertBuildHostSecured();
    return this.managerEngine.buildImage(spec);
  };

  private async assertBuildHostSecured(): Promise<void> {
    const info = (await this.docker.info()) as { Swarm?: { NodeID?: string } };
    const node = ((await this.docker.listNodes()) as SwarmNode[]).find((n) => n.ID === info.Swarm?.NodeID);
    if (!node || !this.prepared(node)) {
      throw new Error("the build host is not ready for tenants' builds now (svc's network rules are not in place there): try the build again in a minute");
    }
  }
  pushImage = (image: string, signal: AbortSignal, onOutput: (line: string) => void) => this.managerEngine.pushImage(image, signal, onOutput);
  removeImage = (reference: string) => this.managerEngine.removeImage(reference);
  removeRepository = (repository: string) => this.managerEngine.removeRepository(repository);

  /**
   * The registry digest of the image the manager pulled (or pushed) under this name: the nodes
   * pull that, pinned to the same content as the single-engine driver's image ID.
   */
  async imageId(image: string): Promise<string | null> {
    let info: { RepoDigests?: string[] | null };
    try {
      info = await this.docker.getImage(image).inspect();
    } catch (err) {
      if (isNotFound(err)) return null;
      throw err;
    }
    const repository = repositoryOf(image);
    return (info.RepoDigests ?? []).find((d) => d.slice(0, d.indexOf('@')) === repository) ?? null;
  }

  /**
   * Whether svcd prepared the node for workloads (node-firewall.ts labels it so): its tenant egress
   * rules are in place, and it holds this svcd's svc-init. Tasks and builds run only there.
   */
  private prepared(n: SwarmNode): boolean {
    const labels = (n.Spec.Labels ?? {}) as Record<string, string>;
    const init = this.o.tenantInit;
    return labels[EGRESS_NODE_LABEL] === 'installed' && (init === undefined || labels[tenantInitNodeLabel(init.sha256)] === 'installed');
  }

  /** Whether the node's engine runs every container under gVisor (node-firewall.ts labels it so). */
  private sandboxed(n: SwarmNode): boolean {
    return ((n.Spec.Labels ?? {}) as Record<string, string>)[SANDBOX_NODE_LABEL] === 'gvisor';
  }

  /** The nodes that can take tasks now: ready, active, prepared by svcd (and running gVisor, for a sandboxed workload). */
  private usable(n: SwarmNode, sandbox: boolean): boolean {
    return n.Status?.State === 'ready' && (n.Spec.Availability ?? 'active') === 'active' && this.prepared(n) && (!sandbox || this.sandboxed(n));
  }

  /**
   * The sandbox is offered when every node svcd prepared runs gVisor by default: a Swarm service
   * spec cannot choose a runtime, so a sandboxed workload is placed on such nodes only, and with
   * --sandbox auto a cluster of mixed nodes runs workloads unsandboxed anywhere rather than
   * crowding them onto its gVisor nodes (--sandbox required does that).
   */
  async capabilities(): Promise<DriverCapabilities> {
    const prepared = ((await this.docker.listNodes()) as SwarmNode[]).filter((n) => this.prepared(n));
    const sandbox = prepared.length > 0 && prepared.every((n) => this.sandboxed(n));
    // The agent is svc-init's: svcd reaches an environment's at the port its node publishes it on.
    return { sandbox, warmPool: false, agent: this.o.tenantInit !== undefined, addressable: false, allocatedPorts: true, setAside: true, replicas: true };
  }

  async apply(request: ApplyRequest): Promise<Applied> {
    // Before anything is removed: a pinned workload whose node cannot run it stays as it is, and
    // what it will run is known (an image the manager cannot get leaves the old one running).
    const { placement } = request.spec;
    const node = placement ? await this.placementNode(placement, request.spec.sandbox) : null;
    const command = await this.commandOf(request.spec, request.signal);
    // Rolling only where the new task has somewhere to run beside what runs now (its port is the
    // service's on every node): otherwise everything of the workload goes first, a service an
    // interrupted rolling apply set aside included (it would hold the port). A pinned workload
    // has one node: never rolling.
    if (request.setAside && (placement !== undefined || !(await this.roomBeside(request.spec)))) {
      request = { ...request, setAside: false };
      for (const service of await this.servicesOf(request.spec)) await this.remove(service.ID);
    }
    const applied = await applyInOrder(request, {
      clock: this.clock,
      timers: this.timers,
      ensureNetwork: (spec) => this.ensureTenantNetwork(spec.tenantId),
      // Every node pulls for its own tasks, from a registry they all reach.
      hasImage: () => Promise.resolve(true),
      pullImage: () => Promise.resolve(),
      remove: (ref) => this.remove(ref),
      rename: (ref, name) => this.relabel(ref, name),
      run: (spec) => this.createService(spec, node, command),
      inspect: (ref) => this.inspect(ref),
      logTail: (ref) => this.logTail(ref),
    }).catch(async (err: unknown) => {
      // Its node went away while it started (its task then waits for that node, never ready):
      // that, not the deadline, is why.
      if (node !== null) await this.placementNode({ node, holdsData: true }, request.spec.sandbox);
      throw err;
    });
    return node === null ? applied : { ...applied, node };
  }

  /**
   * Whether a node can take the workload's replacement now (ready, active, with svc's egress
   * rules) where none of its services (the one under its name, and any set aside) has a task
   * that holds its port.
   */
  private async roomBeside(spec: WorkloadSpec): Promise<boolean> {
    const taken = new Set<string>();
    for (const service of await this.servicesOf(spec)) {
      for (const t of await this.tasks(service.ID)) if (t.desired === 'running' || t.state === 'running') taken.add(t.nodeId);
    }
    const list = (await this.docker.listNodes()) as SwarmNode[];
    return list.some((n) => !taken.has(n.ID) && this.usable(n, spec.sandbox));
  }

  /** Every Swarm service of this installation that runs the spec's workload (its resource), whatever its name. */
  private async servicesOf(spec: Pick<WorkloadSpec, 'tenantId' | 'kind' | 'resourceId'>): Promise<SwarmService[]> {
    const label = [`${LABELS.installation}=${this.o.installation}`, `${LABELS.tenant}=${spec.tenantId}`, `${LABELS.kind}=${spec.kind}`, `${LABELS.resource}=${spec.resourceId}`];
    return (await this.docker.listServices({ filters: { label } })) as unknown as SwarmService[];
  }

  /** Gives a service another workload name (its set-aside one): a change of the service's own labels, which leaves its tasks running. */
  private async relabel(ref: string, name: string): Promise<void> {
    const service = await this.resolve(ref);
    if (!service) throw new WorkloadNotRunningError('the service is gone');
    await this.docker.getService(service.ID).update({ ...service.Spec, Labels: { ...service.Spec.Labels, [NAME_LABEL]: name }, version: service.Version.Index });
  }

  /**
   * The node a workload that keeps its data on its node runs on: its node while that node can run
   * tasks (ready, active, with svc's egress rules), else a NodeUnavailableError naming it; with
   * none yet and no data, the node that can run tasks and runs the fewest. The errors are the
   * tenant's to read (the resource's last_error): they name the node, not its firewall.
   */
  private async placementNode(placement: { node: string | null; holdsData: boolean }, sandbox: boolean): Promise<string> {
    const list = (await this.docker.listNodes()) as SwarmNode[];
    const pinned = placement.node;
    if (pinned !== null) {
      const n = list.find((x) => x.ID === pinned);
      if (!n) throw new NodeUnavailableError(`swarm node ${pinned}, which holds its data, is no longer in the swarm: svc does not move its data`);
      const name = n.Description?.Hostname || pinned;
      const state = n.Status?.State ?? 'unknown';
      if (state !== 'ready') throw new NodeUnavailableError(`swarm node ${name}, which holds its data, is ${state}: it starts again there once the node is back`);
      const availability = n.Spec.Availability ?? 'active';
      if (availability !== 'active') throw new NodeUnavailableError(`swarm node ${name}, which holds its data, is set to ${availability} by an operator: it starts again there once the node is active`);
      if (!this.prepared(n)) throw new NodeUnavailableError(`swarm node ${name}, which holds its data, is not ready for svc's workloads now: it starts again there once it is`);
      if (sandbox && !this.sandboxed(n)) throw new NodeUnavailableError(`swarm node ${name}, which holds its data, does not run gVisor, which this installation requires: it starts again there once it does`);
      return n.ID;
    }
    // Data made before this installation ran on a swarm (on one engine's volume): not started
    // empty on some node instead.
    if (placement.holdsData) throw new NodeUnavailableError('its data was made before svc ran on this swarm and is on no swarm node: svc does not move it');
    const tasks = (await this.docker.listTasks({ filters: { 'desired-state': ['running'] } })) as Array<{ NodeID?: string }>;
    const load = (n: SwarmNode) => tasks.filter((t) => t.NodeID === n.ID).length;
    // The least busy, then by host name: the same answer for the same cluster.
    const [least] = list
      .filter((n) => this.usable(n, sandbox))
      .sort((a, b) => load(a) - load(b) || (a.Description?.Hostname ?? '').localeCompare(b.Description?.Hostname ?? ''));
    if (!least) throw new NodeUnavailableError(`no swarm node can take it now (ready, active, with svc's tenant egress rules${sandbox ? ', running gVisor' : ''})`);
    return least.ID;
  }

  /** The address a node is reached at (what a pinned database's connection string names), or null when no node has that id. */
  async nodeAddress(node: string): Promise<string | null> {
    const list = (await this.docker.listNodes()) as SwarmNode[];
    return list.find((n) => n.ID === node)?.Status?.Addr ?? null;
  }

  private async ensureTenantNetwork(tenantId: string): Promise<void> {
    const name = tenantNetworkName(tenantId);
    const sameName = async () => (await this.docker.listNetworks({ filters: { name: [name] } })).filter((n) => n.Name === name);
    // Any network of the cluster's (scope swarm): the overlay, its driver named once Swarm's
    // allocator has taken it (listed with no driver in the moments before, when another apply's
    // create has just made it; taken for a local one, it was removed under that apply).
    const isOverlay = (n: Docker.NetworkInspectInfo) => n.Scope === 'swarm';
    const existing = await sameName();
    if (existing.some(isOverlay)) return;
    // A local network of that name (a build's on the manager's engine, made by an older svcd before the first
    // deploy) would keep the overlay from being made: it goes, unless something uses it.
    for (const n of existing) {
      try {
        await this.docker.getNetwork(n.Id).remove();
      } catch (err) {
        if (isNotFound(err)) continue; // removed meanwhile by another apply
        throw new Error(`the tenant's network ${name} exists on the manager as a ${n.Driver} network in use, not as a swarm overlay`, { cause: err });
      }
    }
    try {
      await this.docker.createNetwork({
        Name: name,
        Driver: 'overlay',
        Attachable: true,
        CheckDuplicate: true,
        Labels: { [LABELS.managed]: 'true', [LABELS.installation]: this.o.installation, [LABELS.tenant]: tenantId },
      });
    } catch (err) {
      // Made meanwhile by another apply (a tenant's first services deploy at once): the engine
      // answers 409 when its own check saw it, and 500 ("name conflicts with an existing object",
      // Swarm's store) when both creates passed that check together. Either way it is there now.
      if ((await sameName().catch(() => [])).some(isOverlay)) return;
      throw new Error(`the tenant's network ${name} could not be made: ${(err as Error).message}`, { cause: err });
    }
  }

  /**
   * The ENTRYPOINT and CMD of the workload's Swarm service. Every workload starts through
   * svc-init, from its node's volume, which sets no-new-privileges for it: a service spec cannot
   * (Engine 20.10). Tenant code runs under it (its log held to the rate, orphans reaped, an
   * environment's agent); svc's own workloads become their command once the flag is set
   * (withoutPrivilegeGain).
   */
  private async commandOf(spec: WorkloadSpec, signal: AbortSignal): Promise<{ entrypoint?: string[]; cmd?: string[] }> {
    const init = this.o.tenantInit;
    if (!init) return { entrypoint: spec.entrypoint, cmd: spec.cmd };
    const initPath = `${TENANT_INIT_DIR}/${tenantInitName(init.sha256)}`;
    const image = await this.imageCommandOnManager(spec.image, signal);
    return spec.tenantCode ? tenantCommand(image, spec, init.rate, initPath) : withoutPrivilegeGain(resolveCommand(image, spec.entrypoint, spec.cmd), initPath);
  }

  private async createService(spec: WorkloadSpec, node: string | null, command: { entrypoint?: string[]; cmd?: string[] }): Promise<string> {
    const labels = workloadLabels(spec, this.o.installation);
    // The spec's name, unless a service set aside still has it (a rolling redeploy's old one).
    const taken = await this.serviceInspect(spec.name);
    const swarmName = taken ? `${spec.name}-${this.clock.now().toString(36)}` : spec.name;
    const init = this.o.tenantInit;
    const replicas = spec.replicas ?? 1;
    // What its node publishes: the service's port, or an environment's agent (svcd reaches it
    // there; the proxy reaches its previews through it).
    const target = spec.port ?? (spec.publish && init ? spec.agentPort : undefined);
    const initMount = init ? [{ Type: 'volume', Source: TENANT_INIT_VOLUME, Target: TENANT_INIT_DIR, ReadOnly: true, VolumeOptions: { NoCopy: true } }] : [];
    const created = (await this.docker.createService({
      Name: swarmName,
      Labels: { ...labels, [NAME_LABEL]: spec.name, [REPLICAS_LABEL]: String(replicas) },
      TaskTemplate: {
        ContainerSpec: {
          Image: spec.image,
          Labels: labels,
          Env: Object.entries(spec.env).map(([k, v]) => `${k}=${v}`),
          ...(command.entrypoint ? { Command: command.entrypoint } : {}),
          ...(command.cmd ? { Args: command.cmd } : {}),
          ...(spec.user ? { User: spec.user } : {}),
          // svc-init is an init itself where tenant code runs under it: the engine's goes only elsewhere.
          ...(spec.init && !(init && spec.tenantCode) ? { Init: true } : {}),
          Mounts: [...(spec.volumes ?? []).map((v) => ({ Type: 'volume', Source: v.name, Target: v.target, VolumeOptions: { Labels: labels } })), ...initMount],
          // Hardening as far as a service spec goes (Engine API 1.41).
          CapabilityDrop: ['ALL'],
        },
        // A service spec's CPU limit is NanoCPUs alone (Engine 20.10): the engine's own period,
        // not the single engine's longer one (docker-runtime.ts, CPU_PERIOD_US).
        Resources: { Limits: { NanoCPUs: Math.round(spec.limits.cpus * 1e9), MemoryBytes: spec.limits.memoryMb * 1024 * 1024, Pids: spec.limits.pids } },
        RestartPolicy: { Condition: 'any', Delay: 1_000_000_000 },
        // Only on nodes whose tenant egress rules svcd put in place (node-firewall.ts); a workload
        // whose data is on its node's disk only there.
        Placement: {
          Constraints: [
            ...(this.o.tenantInit ? preparedNodeConstraints(this.o.tenantInit.sha256) : [EGRESS_NODE_CONSTRAINT]),
            // Sandboxed: on a node whose engine runs gVisor by default (the spec cannot choose a runtime).
            ...(spec.sandbox ? [SANDBOX_NODE_CONSTRAINT] : []),
            ...(node === null ? [] : [`node.id==${node}`]),
          ],
          // Each replica publishes the service's port on its node: two on one node cannot, so one
          // waits (pending) for a node of its own rather than failing there again and again. Set
          // for one replica too: a scale then changes the count alone, which restarts no task.
          ...(spec.publish ? { MaxReplicas: 1 } : {}),
        },
        LogDriver: { Name: 'json-file', Options: { 'max-size': '10m', 'max-file': '3' } },
        // Its workload name too: after a rolling redeploy its Swarm name is another.
        Networks: [{ Target: tenantNetworkName(spec.tenantId), Aliases: [...(spec.aliases ?? []), ...(taken ? [spec.name] : [])] }],
      },
      Mode: { Replicated: { Replicas: replicas } },
      // On the port svcd allocated for the service (a stale route then reaches it or nothing), or
      // one the node picks.
      EndpointSpec: { Mode: 'dnsrr', ...(target ? { Ports: [{ Protocol: 'tcp', TargetPort: target, PublishMode: 'host', ...(spec.publish ? { PublishedPort: spec.publish.port } : {}) }] } : {}) },
    } as unknown as Docker.CreateServiceOptions).catch((err: unknown) => {
      // Said with what was being made: a Swarm error alone ("name conflicts with an existing object") names nothing.
      throw new Error(`the Swarm service ${swarmName} could not be made: ${(err as Error).message}`, { cause: err });
    })) as { id?: string; ID?: string };
    const id = created.id ?? created.ID;
    if (!id) throw new Error('the swarm manager answered no service id');
    return id;
  }

  /**
   * What the image runs (its ENTRYPOINT and CMD), read on the manager's engine. Tenant code's and
   * boards' images are there (pulled or built there); a database's is pulled there whenever the
   * manager has no copy (only the nodes that run it need it otherwise, and a prune may remove it).
   */
  private async imageCommandOnManager(image: string, signal: AbortSignal): Promise<ImageCommand> {
    try {
      return await imageCommand(this.docker, image);
    } catch (err) {
      if (!isNotFound(err)) throw err;
    }
    await this.managerEngine.pullImage(image, signal);
    return imageCommand(this.docker, image);
  }

  /** The service's tasks, newest first. */
  private async tasks(serviceRef: string): Promise<TaskView[]> {
    const raw = (await this.docker.listTasks({ filters: { service: [serviceRef] } })) as Array<{
      ID: string;
      ServiceID: string;
      NodeID?: string;
      DesiredState?: string;
      CreatedAt?: string;
      Status?: { State?: string; Err?: string; ContainerStatus?: { ContainerID?: string; ExitCode?: number }; PortStatus?: { Ports?: Array<{ PublishedPort?: number }> } };
    }>;
    return raw
      .map((t) => ({
        id: t.ID,
        serviceId: t.ServiceID,
        nodeId: t.NodeID ?? '',
        state: t.Status?.State ?? 'new',
        desired: t.DesiredState ?? 'running',
        createdAt: t.CreatedAt ?? '',
        exitCode: t.Status?.ContainerStatus?.ExitCode ?? null,
        error: t.Status?.Err ?? '',
        containerId: t.Status?.ContainerStatus?.ContainerID ?? null,
        publishedPort: t.Status?.PortStatus?.Ports?.[0]?.PublishedPort ?? null,
      }))
      // Newest first (RFC 3339 with a varying number of fraction digits: compared as times).
      .sort((a, b) => Date.parse(b.createdAt) - Date.parse(a.createdAt));
  }

  /**
   * Node addresses by node id, and host names (the key of --swarm-node), read at most once a
   * second: a readiness wait inspects every 25 ms, and a node's address changes only when it
   * joins anew (a second late at most).
   */
  private async nodeDirectory(): Promise<Map<string, { address: string; hostname: string }>> {
    const now = this.clock.now();
    if (this.directory && now - this.directory.readAtMs < NODE_DIRECTORY_TTL_MS) return this.directory.nodes;
    const list = (await this.docker.listNodes()) as Array<{ ID: string; Status?: { Addr?: string }; Description?: { Hostname?: string } }>;
    const nodes = new Map(list.map((n) => [n.ID, { address: n.Status?.Addr ?? '', hostname: n.Description?.Hostname ?? '' }]));
    this.directory = { nodes, readAtMs: now };
    return nodes;
  }

  /** A service by its Swarm ID or Swarm name (what the manager resolves): resolve() for workload names. */
  private async serviceInspect(ref: string): Promise<SwarmService | null> {
    try {
      return (await this.docker.getService(ref).inspect()) as SwarmService;
    } catch (err) {
      if (isNotFound(err)) return null;
      throw err;
    }
  }

  /**
   * The Swarm service a ref names: an ID as it is; a workload name by svc's name label (the
   * newest, when a race left two), or by its Swarm name for a service made before the label was.
   */
  private async resolve(ref: string): Promise<SwarmService | null> {
    if (SWARM_ID.test(ref)) return this.serviceInspect(ref);
    return (await this.named(ref))[0] ?? null;
  }

  /**
   * The services of a workload name, newest first: those labelled with it (two only after a race
   * between svcd: remove takes both), else the service of that Swarm name unless its label gives
   * it another (a service set aside under its Swarm name answers to its set-aside name only).
   */
  private async named(name: string): Promise<SwarmService[]> {
    const list = (await this.docker.listServices({ filters: { label: [`${LABELS.installation}=${this.o.installation}`, `${NAME_LABEL}=${name}`] } })) as unknown as SwarmService[];
    if (list.length > 0) return list.sort((a, b) => Date.parse(b.CreatedAt ?? '') - Date.parse(a.CreatedAt ?? '') || b.Version.Index - a.Version.Index);
    const byName = await this.serviceInspect(name);
    const label = byName?.Spec.Labels?.[NAME_LABEL];
    return byName && (label === undefined || label === name) ? [byName] : [];
  }

  async inspect(ref: string): Promise<WorkloadInfo | null> {
    const service = await this.resolve(ref);
    if (!service) return null;
    const tasks = await this.tasks(service.ID);
    const running = tasks.filter(runsNow);
    const base = { id: service.ID, name: service.Spec.Labels?.[NAME_LABEL] ?? service.Spec.Name ?? '', labels: service.Spec.Labels ?? {} };
    if (running.length > 0) {
      const directory = await this.nodeDirectory();
      const ports = (service.Spec.EndpointSpec as { Ports?: unknown[] } | undefined)?.Ports ?? [];
      // A port asked for but not (yet) published: no address, never the node at the spec's port,
      // which could be anything the node serves. Oldest first: the address a route had stays first.
      const addresses = [...running]
        .reverse()
        .flatMap((t) => {
          const host = directory.get(t.nodeId)?.address;
          return host && (ports.length === 0 || t.publishedPort !== null) ? [{ host, port: t.publishedPort ?? 0, published: t.publishedPort !== null }] : [];
        });
      const [first] = addresses;
      // Each task's container on its node, for stats without a question to the manager.
      const copies = running.flatMap((t) => {
        const hostname = directory.get(t.nodeId)?.hostname;
        return hostname && t.containerId ? [copyRef(hostname, t.containerId)] : [];
      });
      if (!first) return { ...base, state: 'running', exitCode: null, address: null, copies };
      return { ...base, state: 'running', exitCode: null, address: first, copies, ...(addresses.length > 1 ? { addresses: addresses.map(({ host, port }) => ({ host, port })) } : {}) };
    }
    const replicas = service.Spec.Mode?.Replicated?.Replicas ?? 1;
    const newest = tasks[0];
    // Stopped by svc (no replicas), or every task so far ended and none is on its way.
    if (replicas === 0) return { ...base, state: 'exited', exitCode: newest?.exitCode ?? null, address: null };
    const port = specPublishedPort(service.Spec);
    const failed = tasks.find((t) => (t.state === 'failed' || t.state === 'rejected') && !replacedTaskHoldsPort(t.error, port, t.createdAt, service.CreatedAt ?? ''));
    if (failed && !tasks.some((t) => t.state === 'running' || (t.state === 'complete' && t.desired === 'running'))) {
      return { ...base, state: 'exited', exitCode: failed.exitCode, address: null };
    }
    return { ...base, state: 'created', exitCode: null, address: null };
  }

  /** The last lines the service printed, or the task's error (an image no node could pull). */
  private async logTail(ref: string): Promise<string> {
    // No logs: the task error below says why.
    const printed = await this.logs(ref, { tail: 5, follow: false }).then(lastLinesOf).catch(() => '');
    if (printed !== '') return printed;
    const service = await this.resolve(ref).catch(() => null);
    const failed = service ? (await this.tasks(service.ID).catch(() => [])).find((t) => t.error) : undefined;
    return failed?.error.slice(0, 500) ?? '';
  }

  async start(ref: string): Promise<Endpoint | null> {
    const service = await this.resolve(ref);
    if (!service) throw new WorkloadNotRunningError('the service is gone');
    await this.setReplicas(service, Math.max(1, Number(service.Spec.Labels?.[REPLICAS_LABEL] ?? 1) || 1));
    const deadline = this.clock.now() + 60_000;
    for (;;) {
      const info = await this.inspect(ref);
      if (!info) throw new WorkloadNotRunningError('the service is gone');
      if (info.state === 'running' && info.address) return { host: info.address.host, port: info.address.port || null };
      if (this.clock.now() >= deadline) throw new Error('no task of the service ran within 60 s');
      await new Promise<void>((resolve) => this.timers.setTimeout(resolve, 250));
    }
  }

  async stop(ref: string): Promise<void> {
    const service = await this.resolve(ref);
    if (service) await this.setReplicas(service, 0);
  }

  /**
   * A service's replicas changed in place: Swarm starts the new ones (or stops some) and leaves
   * the others running. The count is kept on the service (a stop sets 0; a start comes back to it).
   */
  async scale(ref: string, replicas: number, wait: { timeoutMs: number; signal: AbortSignal }): Promise<boolean> {
    const service = await this.resolve(ref);
    if (!service) throw new WorkloadNotRunningError('the service is gone');
    // Made before services were placed one a node: its task template would change, which Swarm
    // carries out by replacing its tasks. Deployed anew instead.
    const placement = (service.Spec.TaskTemplate as { Placement?: { MaxReplicas?: number } } | undefined)?.Placement;
    if (replicas > 1 && placement?.MaxReplicas !== 1) return false;
    await this.setReplicas(service, replicas, { ...service.Spec.Labels, [REPLICAS_LABEL]: String(replicas) });
    // The count is taken: from here the scale has happened, and a failed look at the tasks (the
    // manager busy) is waited out rather than failing it (which would deploy the service anew).
    const deadline = this.clock.now() + wait.timeoutMs;
    while (this.clock.now() < deadline) {
      wait.signal.throwIfAborted();
      const running = await this.tasks(service.ID).then(
        (tasks) => tasks.filter(runsNow).length,
        () => -1,
      );
      if (running === replicas) return true;
      await new Promise<void>((resolve) => this.timers.setTimeout(resolve, 250));
    }
    return true;
  }

  /** The Swarm service's count of replicas (and its labels, when given), as read at `service`'s version. */
  private async setReplicas(service: SwarmService, replicas: number, labels?: Record<string, string>): Promise<void> {
    await this.docker.getService(service.ID).update({ ...service.Spec, ...(labels ? { Labels: labels } : {}), Mode: { Replicated: { Replicas: replicas } }, version: service.Version.Index });
  }

  /** By ID, or every service under the workload name (two svcd that raced each made one). */
  async remove(ref: string): Promise<void> {
    const services = SWARM_ID.test(ref) ? [await this.serviceInspect(ref)].filter((x): x is SwarmService => x !== null) : await this.named(ref);
    for (const service of services) {
      try {
        await this.docker.getService(service.ID).remove();
      } catch (err) {
        if (!isNotFound(err)) throw err;
      }
    }
  }

  /**
   * A named volume lives on each node that ran a task with it: removed from every node (or, with
   * `whereItCanRun`, from the nodes that can run tasks now). Swarm stops a removed service's task
   * in the background: a volume its task still holds is tried again until that task is gone.
   */
  async removeVolume(name: string, opts: { whereItCanRun?: boolean } = {}): Promise<void> {
    let hostnames = [...this.o.nodes.keys()];
    if (opts.whereItCanRun) {
      const ready = new Set(((await this.docker.listNodes()) as SwarmNode[]).filter((n) => n.Status?.State === 'ready').map((n) => n.Description?.Hostname ?? ''));
      hostnames = hostnames.filter((h) => ready.has(h));
    }
    for (const hostname of hostnames) {
      const deadline = this.clock.now() + VOLUME_IN_USE_WAIT_MS;
      for (;;) {
        try {
          await this.nodeEngine(hostname).removeVolume(name);
          break;
        } catch (err) {
          if ((err as { statusCode?: number }).statusCode !== 409 || this.clock.now() >= deadline) throw err;
          await new Promise<void>((resolve) => this.timers.setTimeout(resolve, 500));
        }
      }
    }
  }

  async releaseTenant(tenantId: string): Promise<boolean> {
    const mine = await this.list({ tenantId });
    if (mine.length > 0) return false;
    try {
      await this.docker.getNetwork(tenantNetworkName(tenantId)).remove();
      return true;
    } catch (err) {
      const status = (err as { statusCode?: number }).statusCode ?? 0;
      if (status === 404 || status === 403 || status === 409) return false;
      throw err;
    }
  }

  async list(filter: { tenantId?: string; kind?: WorkloadKind } = {}): Promise<WorkloadInfo[]> {
    const label = [`${LABELS.installation}=${this.o.installation}`];
    if (filter.tenantId) label.push(`${LABELS.tenant}=${filter.tenantId}`);
    if (filter.kind) label.push(`${LABELS.kind}=${filter.kind}`);
    const services = (await this.docker.listServices({ filters: { label } })) as Array<{ ID: string }>;
    const infos = await Promise.all(services.map((s) => this.inspect(s.ID)));
    return infos.filter((i): i is WorkloadInfo => i !== null);
  }

  /**
   * Exits of svc's tasks, read from the task list (a manager's events name services, not the
   * tasks that ended on other nodes). Each ended task is told once; tasks already ended when
   * this starts are not.
   */
  async *events(signal: AbortSignal): AsyncIterable<WorkloadExit> {
    const every = this.o.eventsEveryMs ?? 1_000;
    let seen: Set<string> | null = null;
    while (!signal.aborted) {
      try {
        // One listing of each per tick, matched in memory: a service removed between the two is
        // no error, and the cost does not grow with a call per service.
        const [services, tasks] = await Promise.all([
          this.docker.listServices({ filters: { label: [`${LABELS.installation}=${this.o.installation}`] } }) as Promise<Array<{ ID: string; Spec?: ServiceSpec; CreatedAt?: string }>>,
          this.docker.listTasks() as Promise<Array<{ ID: string; ServiceID: string; CreatedAt?: string; Status?: { State?: string; Err?: string; ContainerStatus?: { ExitCode?: number } } }>>,
        ]);
        const labelsOf = new Map(services.map((x) => [x.ID, x.Spec?.Labels ?? {}]));
        const serviceOf = new Map(services.map((x) => [x.ID, x]));
        const ended = tasks.filter((t) => {
          const service = serviceOf.get(t.ServiceID);
          if (!service || !EXIT_TASK_STATES.has(t.Status?.State ?? '')) return false;
          return !replacedTaskHoldsPort(t.Status?.Err ?? '', specPublishedPort(service.Spec), t.CreatedAt ?? '', service.CreatedAt ?? '');
        });
        if (seen) {
          for (const t of ended) if (!seen.has(t.ID)) yield { id: t.ServiceID, labels: labelsOf.get(t.ServiceID) ?? {}, exitCode: t.Status?.ContainerStatus?.ExitCode ?? null };
        }
        // Only the tasks Swarm still lists are kept: the set stays as small as its task history.
        seen = new Set(ended.map((t) => t.ID));
      } catch (err) {
        // The manager away: the exits are read when it answers again (the set is kept meanwhile).
        // eslint-disable-next-line @typescript-eslint/no-unnecessary-condition -- the signal may have fired while the tasks were read
        if (signal.aborted) return;
        if (!seen) throw err;
      }
      await new Promise<void>((resolve) => {
        const timer = this.timers.setTimeout(resolve, every);
        signal.addEventListener(
          'abort',
          () => {
            timer.cancel();
            resolve();
          },
          { once: true },
        );
      });
    }
  }

  /**
   * A running task's container and the engine of its node: the newest of the service's that
   * svcd has an engine address for (--swarm-node).
   */
  private async runningTask(ref: string): Promise<{ containerId: string; engine: DockerRuntime } | null> {
    const service = await this.resolve(ref);
    const tasks = service ? await this.tasks(service.ID) : [];
    const running = tasks.filter((t): t is TaskView & { containerId: string } => runsNow(t) && t.containerId !== null);
    if (running.length === 0) return null;
    const directory = await this.nodeDirectory();
    const reachable = running.find((t) => this.o.nodes.has(directory.get(t.nodeId)?.hostname ?? ''));
    if (!reachable) {
      const node = directory.get(running[0]?.nodeId ?? '');
      throw new Error(`svcd has no address for the engine of node ${node?.hostname ?? running[0]?.nodeId ?? '?'} (--swarm-node)`);
    }
    return { containerId: reachable.containerId, engine: this.nodeEngine(directory.get(reachable.nodeId)?.hostname ?? '') };
  }

  private nodeEngine(hostname: string): DockerRuntime {
    let engine = this.nodeEngines.get(hostname);
    if (!engine) {
      const host = this.o.nodes.get(hostname);
      if (!host) throw new Error(`svcd has no address for the engine of node ${hostname} (--swarm-node)`);
      engine = new DockerRuntime({ host, tls: this.o.tls?.[host] ?? null, installation: this.o.installation, clock: this.clock, timers: this.timers, ...(this.o.timeoutMs ? { timeoutMs: this.o.timeoutMs } : {}) });
      this.nodeEngines.set(hostname, engine);
    }
    return engine;
  }

  async exec(ref: string, spec: ExecSpec): Promise<ExecOutcome> {
    const task = await this.runningTask(ref);
    if (!task) throw new WorkloadNotRunningError('no task of the service is running');
    return task.engine.exec(task.containerId, spec);
  }

  /**
   * One task's counters: a copy's (WorkloadInfo.copies, read from its node's engine: the sampler
   * meters each replica on its own), or the workload's newest task's.
   */
  async stats(ref: string): Promise<WorkloadStats | null> {
    const copy = COPY_REF.exec(ref);
    if (copy?.[1] && copy[2]) return this.nodeEngine(copy[1]).stats(copy[2]);
    const task = await this.runningTask(ref);
    return task ? task.engine.stats(task.containerId) : null;
  }

  /** The service's log through the manager, whichever nodes its tasks ran on. */
  async logs(ref: string, opts: LogOptions): Promise<NodeJS.ReadableStream> {
    const service = await this.resolve(ref);
    if (!service) throw new WorkloadNotRunningError('no such service');
    const options = { stdout: true, stderr: true, tail: opts.tail, timestamps: false, follow: opts.follow };
    const raw = await new Promise<NodeJS.ReadableStream & { destroy(): void }>((resolve, reject) => {
      this.streaming.modem.dial(
        { path: `/services/${encodeURIComponent(service.ID)}/logs?`, method: 'GET', isStream: true, statusCodes: { 200: true, 404: 'no such service', 500: 'server error', 503: 'node is not part of a swarm' }, options },
        (err: Error | null, stream?: unknown) => (err ? reject(err) : resolve(stream as NodeJS.ReadableStream & { destroy(): void })),
      );
    }).catch((err: unknown) => {
      if (isNotFound(err)) throw new WorkloadNotRunningError('no such service');
      throw err;
    });
    return demuxedLog(raw);
  }

  // --- The cluster's nodes, for operators. ---

  async nodes(): Promise<ClusterNodeInfo[]> {
    const [list, services, tasks] = await Promise.all([
      this.docker.listNodes() as Promise<SwarmNode[]>,
      this.docker.listServices({ filters: { label: [`${LABELS.installation}=${this.o.installation}`] } }) as Promise<Array<{ ID: string }>>,
      this.docker.listTasks({ filters: { 'desired-state': ['running'] } }) as Promise<Array<{ ServiceID: string; NodeID?: string; Status?: { State?: string } }>>,
    ]);
    const ours = new Set(services.map((x) => x.ID));
    const running = tasks.filter((t) => ours.has(t.ServiceID) && t.Status?.State === 'running');
    return list.map((n) => ({
      id: n.ID,
      hostname: n.Description?.Hostname ?? '',
      role: n.Spec.Role === 'manager' ? 'manager' : 'worker',
      state: n.Status?.State ?? 'unknown',
      availability: n.Spec.Availability ?? 'active',
      address: n.Status?.Addr ?? '',
      engineVersion: n.Description?.Engine?.EngineVersion ?? '',
      tasks: running.filter((t) => t.NodeID === n.ID).length,
      memoryBytes: n.Description?.Resources?.MemoryBytes ?? 0,
      cpus: (n.Description?.Resources?.NanoCPUs ?? 0) / 1e9,
    }));
  }

  /**
   * Sets labels on the node by id or host name (through the manager), or takes them off (value null),
   * in one update; nothing where they are so already. Tried again when another svcd changed the
   * node meanwhile.
   */
  async labelNode(node: string, changes: Readonly<Record<string, string | null>>): Promise<void> {
    for (let attempt = 1; ; attempt++) {
      const list = (await this.docker.listNodes()) as SwarmNode[];
      // By id; by host name where no id is known (a node without an engine address for svcd).
      const target = list.find((n) => n.ID === node) ?? list.find((n) => n.Description?.Hostname === node);
      if (!target) throw new Error(`no swarm node has the id or host name ${node}`);
      const current = (target.Spec.Labels ?? {}) as Record<string, string>;
      if (Object.entries(changes).every(([key, value]) => (current[key] ?? null) === value)) return;
      const kept = Object.entries(current).filter(([key]) => !(key in changes));
      const set = Object.entries(changes).filter((entry): entry is [string, string] => entry[1] !== null);
      const labels = Object.fromEntries([...kept, ...set]);
      try {
        await this.docker.getNode(target.ID).update({ ...target.Spec, Labels: labels, version: target.Version.Index });
        return;
      } catch (err) {
        // The node's version moved under us (another svcd, an operator): read it again.
        if (attempt >= 3 || !/out of sequence/i.test((err as Error).message)) throw err;
      }
    }
  }

  async setAvailability(node: string, availability: 'active' | 'drain'): Promise<ClusterNodeInfo | null> {
    const list = (await this.docker.listNodes()) as SwarmNode[];
    const target = list.find((n) => n.ID === node || n.Description?.Hostname === node);
    if (!target) return null;
    await this.docker.getNode(target.ID).update({ ...target.Spec, Availability: availability, version: target.Version.Index });
    return (await this.nodes()).find((n) => n.id === target.ID) ?? null;
  }

  assign(): Promise<string | null> {
    return Promise.reject(new Error('the swarm driver has no warm pool'));
  }
}

/** An image name's repository as the engine lists it in RepoDigests (no tag, no digest; Docker Hub's short form). */
export function repositoryOf(image: string): string {
  let name = image.split('@')[0] ?? image;
  const colon = name.lastIndexOf(':');
  if (colon > name.lastIndexOf('/')) name = name.slice(0, colon);
  for (const hub of ['docker.io/', 'index.docker.io/']) if (name.startsWith(hub)) name = name.slice(hub.length);
  return name.startsWith('library/') ? name.slice('library/'.length) : name;
}
