// The workload driver port: how svc's domain runs containers on an engine, in as few verbs as a
// second engine (Docker Swarm) can implement too. Types only. The Docker Engine driver is
// runtime/docker/, an in-memory one that follows the same contract is runtime/memory/, and
// test/driver-conformance.ts holds both to it.
//
// The verb that matters is apply: given a spec, it makes the engine run exactly that (the
// tenant's network, the image when missing, the old container replaced) and resolves only when
// the workload is ready as seen from where svcd and the proxy reach it. It is idempotent by the
// spec's name, and a failed apply leaves nothing of its own running.

import type { Timers } from '../clock.js';

export type WorkloadKind = 'service' | 'database' | 'kanban' | 'environment' | 'build';

/** What to run: one container (later, one Swarm service). */
export interface WorkloadSpec {
  /** Unique engine name, e.g. svc-<serviceID>. */
  name: string;
  image: string;
  env: Record<string, string>;
  /** Container port the workload serves on (none: an environment, which serves what its user starts). */
  port?: number;
  tenantId: string;
  kind: WorkloadKind;
  /** The store id of what this workload is (service id, ...). */
  resourceId: string;
  /** Extra labels (deployment id, ...). */
  labels?: Record<string, string>;
  limits: { memoryMb: number; cpus: number; pids: number };
  /** Run under gVisor. */
  sandbox: boolean;
  /** Arguments instead of the image's CMD. */
  cmd?: string[];
  /** Instead of the image's ENTRYPOINT ([] for none). */
  entrypoint?: string[];
  /**
   * Start it unassigned, labelled for no tenant: on svc's internal warm-pool network (no way out,
   * none to its peers), or, with a tenantId, on that tenant's network already (kept for it);
   * assign hands it to one later.
   */
  warmPool?: boolean;
  /** A minimal init as PID 1 that reaps orphaned processes (environments, where exec starts many). */
  init?: boolean;
  /**
   * It runs a tenant's own code (services, environments): under svc-init as PID 1, which holds
   * its output to the installation's log rate (tenant-init.ts) and reaps orphans.
   */
  tenantCode?: boolean;
  /**
   * svc-init serves its agent (exec without the engine) on this port of the workload's address,
   * to requests with the token in `env[AGENT_TOKEN_ENV]` (tenant code only; an environment).
   */
  agentPort?: number;
  /** Run as this user of the image (name or uid) instead of the image's default. */
  user?: string;
  /** Named volumes (created with the workload's labels when missing) and where they mount. */
  volumes?: Array<{ name: string; target: string }>;
  /** Extra names the workload answers to on its tenant network. */
  aliases?: string[];
  /**
   * Publish `port` on this address and port of the host (databases: loopback; boards:
   * --kanban-address); on a swarm, services on this port of their task's node (the address is not used).
   */
  publish?: { address: string; port: number };
  /** Let the engine restart it when it exits (workloads svc does not watch for crashes itself). */
  engineRestarts?: boolean;
  /**
   * It keeps its data in its volumes on the disk of the node it runs on (a database, a board): on
   * a cluster it runs on `node` only, never moved where its volume would start empty. With `node`
   * null and no data yet (`holdsData` false: it never answered), on a node the driver picks, told
   * back in `Applied.node`. A node that cannot run it now (down, drained, gone), or data that is on
   * no node of the cluster (it ran before the installation moved to one), fails the apply with
   * NodeUnavailableError before anything is removed. A single engine has one node: nothing to pin.
   */
  placement?: { node: string | null; holdsData: boolean };
  /**
   * How many copies run (a service, on a driver with capability `replicas`; 1 when absent). apply
   * resolves once one of them is ready; the others join as the driver runs them (WorkloadInfo.addresses).
   */
  replicas?: number;
}

export type WorkloadState = 'created' | 'running' | 'paused' | 'restarting' | 'removing' | 'exited' | 'dead';

export interface WorkloadInfo {
  id: string;
  name: string;
  state: WorkloadState;
  exitCode: number | null;
  labels: Record<string, string>;
  /**
   * Where the workload answers on its tenant network (the pool's while it waits unassigned), as
   * seen from the host; `published`: the port is one its node publishes for it (Swarm), where
   * svcd and the proxy reach it instead of at the spec's port.
   */
  address: { host: string; port: number; published?: boolean } | null;
  /**
   * Every running copy's address (a workload of several replicas: one per node on a swarm, all on
   * the same published port), `address` first; absent where there is one copy at most.
   */
  addresses?: Array<{ host: string; port: number }>;
  /**
   * The refs of its running copies where they are apart from the workload's (a swarm's tasks:
   * node and container), each metered on its own: stats takes them as it takes the workload's ref.
   */
  copies?: string[];
  /** When it last stopped (ms), if it ever did; inspect only. */
  finishedAtMs?: number | null;
}

/** A command run inside a running workload (environments' exec). */
export interface ExecSpec {
  /** argv as given: no shell is added. */
  cmd: string[];
  workDir: string;
  /** The process (and its process group) is killed at this many seconds. */
  timeoutSeconds: number;
  /** stdout and stderr are each kept up to this many bytes; the rest is read and dropped. */
  maxOutputBytes: number;
  /** Fed to the process's stdin, which closes when it ends (without it, stdin is empty). */
  stdin?: NodeJS.ReadableStream | Buffer;
  /** Variables added to the workload's own for this process. */
  env?: Record<string, string>;
}

export interface ExecOutcome {
  exitCode: number;
  stdout: string;
  stderr: string;
  truncated: boolean;
  timedOut: boolean;
  durationMs: number;
}

/**
 * One reading of a workload's counters. CPU, network and block I/O are cumulative since the
 * container started (they restart at zero when it does); memory is the current working set.
 */
export interface WorkloadStats {
  cpuMicros: number;
  memoryBytes: number;
  netRxBytes: number;
  netTxBytes: number;
  blockReadBytes: number;
  blockWriteBytes: number;
}

export interface LogOptions {
  tail: number;
  follow: boolean;
}

/** A workload ended (whatever the reason: crash, stop, removal). */
export interface WorkloadExit {
  id: string;
  labels: Record<string, string>;
  exitCode: number | null;
}

/** Where a workload answers, as svcd and the proxy reach it. */
export interface Endpoint {
  host: string;
  /** The spec's port; null for a workload that serves no port (an environment). */
  port: number | null;
}

/** When a workload counts as ready: running, and then its probe passes at its endpoint. */
export interface Readiness {
  /**
   * Resolves once the workload answers properly at its endpoint (a login, a health route).
   * Without one: a workload with a port is ready when it accepts TCP there, one without when it runs.
   * `timers` are the waiting driver's: a probe's own time bounds run on them.
   */
  probe?: (endpoint: Endpoint, timers: Timers) => Promise<void>;
  /** Not ready by then: apply rejects with the last probe error (and removes what it started). */
  timeoutMs: number;
  /** Pause between probes. */
  everyMs: number;
  /**
   * Instead of everyMs, for the first `forMs` after the workload is first seen running: a small
   * server listens within a tenth of a second of its start, and a probe that waits out a longer
   * pause holds the first request back for nothing.
   */
  eager?: { everyMs: number; forMs: number };
  /** A probe that never settles is given up after this long (and tried again). */
  probeTimeoutMs: number;
}

export interface ApplyRequest {
  spec: WorkloadSpec;
  /** A workload of an earlier apply to remove first, when its ref is not the spec's name. */
  replaces?: string | null;
  /**
   * A rolling replacement (drivers with `setAside`): what runs under the spec's name is renamed
   * aside (setAsideName) and keeps running, and serving, while the new one starts; the caller
   * removes it once the new one took its place. `replaces` is left alone too.
   */
  setAside?: boolean;
  /** `missing`: pull the image when the engine does not have it; `never`: the caller saw to it (a build, an image ID). */
  pull: 'missing' | 'never';
  ready: Readiness;
  /** Aborts the apply (a cancel, a newer generation, a deadline): it rejects with the reason and removes what it started. */
  signal: AbortSignal;
  /** Told the workload's ref as soon as it is started, before it is ready (its logs can be read from then). */
  started?: (ref: string) => Promise<void>;
}

export interface Applied {
  /** The driver's reference to the workload: what inspect, stop, remove, exec, logs and stats take. */
  ref: string;
  endpoint: Endpoint;
  /** The cluster node it was placed on (a spec with `placement`, on a cluster). */
  node?: string;
  /** The workload was changed where it runs (a scale in place): what was routed to it stays routed. */
  inPlace?: boolean;
}

/** What this driver can do, so that the domain offers only that. */
export interface DriverCapabilities {
  /** Workloads can run sandboxed (gVisor). */
  sandbox: boolean;
  /** Workloads can be started unassigned and handed to a tenant later (environments' warm pool). */
  warmPool: boolean;
  /** Tenant code runs under svc-init, which serves an environment's agent (`agentPort`). */
  agent: boolean;
  /**
   * svcd's host reaches a workload at its own address on its tenant network (environments: their
   * previews and agent). Not so on a swarm, whose overlay networks svcd's host is not on.
   */
  addressable: boolean;
  /**
   * A service's port is published on the node that runs its task, on the port svcd allocated for
   * it (`publish` in its spec) rather than one the node picks: a swarm.
   */
  allocatedPorts: boolean;
  /**
   * apply can set the running workload aside and start its replacement beside it (`setAside`): a
   * redeploy with no moment where nothing answers. On a swarm the replacement's task runs on
   * another node (a service's port is its own on every node, which two tasks of one node cannot
   * share); with no other node that can run it, apply removes the old one first instead.
   */
  setAside: boolean;
  /** A workload can run as several copies (`WorkloadSpec.replicas`): a cluster, a copy per node. */
  replicas: boolean;
}

export interface WorkloadDriver {
  capabilities(): Promise<DriverCapabilities>;
  /** Runs the spec, replacing what ran under its name, and resolves once it is ready (see Readiness). */
  apply(request: ApplyRequest): Promise<Applied>;
  /** Starts a stopped workload again as it was (its writable layer kept); resolves with its endpoint once it runs. */
  start(ref: string): Promise<Endpoint | null>;
  /** Stops gracefully (SIGTERM, then SIGKILL after timeoutSeconds). Missing workloads are fine. */
  stop(ref: string, timeoutSeconds?: number): Promise<void>;
  /** Removes a workload and its anonymous volumes. Missing workloads are fine. */
  remove(ref: string): Promise<void>;
  /**
   * Removes a named volume and its data; a missing one is fine. On a cluster, from every node
   * (a node that does not answer fails it, to be tried again), or with `whereItCanRun` only from
   * the nodes that can run workloads now (a volume about to be made afresh: the nodes it could
   * be made on).
   */
  removeVolume(name: string, opts?: { whereItCanRun?: boolean }): Promise<void>;
  /** Removes the tenant's network (and what else the driver keeps per tenant) once nothing uses it; true when removed. */
  releaseTenant(tenantId: string): Promise<boolean>;
  inspect(ref: string): Promise<WorkloadInfo | null>;
  /** svc workloads of this installation, optionally of one tenant or kind. */
  list(filter?: { tenantId?: string; kind?: WorkloadKind }): Promise<WorkloadInfo[]>;
  /** Exits of svc workloads as the engine reports them, until the signal aborts. */
  events(signal: AbortSignal): AsyncIterable<WorkloadExit>;
  /** Runs a command in a running workload and collects its output. */
  exec(ref: string, spec: ExecSpec): Promise<ExecOutcome>;
  /**
   * stdout and stderr as text; with follow, open until the workload ends or the stream is
   * destroyed. Rejects with WorkloadNotRunningError when the engine is removing the workload.
   */
  logs(ref: string, opts: LogOptions): Promise<NodeJS.ReadableStream>;
  /** One reading of a running workload's counters (one-shot); null when it is gone. */
  stats(ref: string): Promise<WorkloadStats | null>;
  /**
   * Drivers with capability `replicas`: runs this many copies of a running workload as it is (its
   * copies that run keep running), and resolves true once that many run, or after `timeoutMs`
   * with as many as do then; false, having changed nothing, where it cannot without replacing
   * what runs (the caller applies the workload anew).
   */
  scale?(ref: string, replicas: number, wait: { timeoutMs: number; signal: AbortSignal }): Promise<boolean>;
  /** Hands a warm-pool workload to a tenant (its network); returns its address there. */
  assign(ref: string, tenantId: string): Promise<string | null>;
}
