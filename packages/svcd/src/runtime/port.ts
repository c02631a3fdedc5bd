// The runtime's port: what svc's domain asks of a container engine. Domain code sees this
// interface, never dockerode, so that a Docker Swarm implementation can stand in later.

export const SANDBOX_RUNTIME = 'runsc';
/** Every tenant gets its own bridge network named with this prefix. */
export const TENANT_NETWORK_PREFIX = 'tenant-';
/** Where warm-pool workloads wait for a tenant. */
export const WARM_POOL_NETWORK = 'svc-warm-pool';
/** The tenant label of warm-pool workloads (their labels cannot change when a tenant gets one). */
export const WARM_POOL_TENANT = 'warm-pool';

export interface EngineInfo {
  version: string;
  /** OCI runtimes the engine has registered (runc, runsc, ...). */
  runtimes: string[];
  /** The runtime of containers that name none: the classic builder's RUN steps among them. */
  defaultRuntime: string;
  /** The engine's data root, e.g. /var/lib/docker. */
  dataRoot: string;
  /** cgroupfs or systemd: tenant CPU groups are placed under cgroupfs only (tenant-cgroups.ts). */
  cgroupDriver: string;
}

export interface EngineStorage {
  imagesBytes: number;
  containersBytes: number;
  volumesBytes: number;
  buildCacheBytes: number;
}

/**
 * The disk one workload takes on the engine's host: its container's writable layer plus the
 * named volumes it mounts; a volume no container mounts is reported on its own (containerId
 * null) with its own labels. Images are not counted: layers are shared and belong to no tenant.
 */
export interface WorkloadDisk {
  containerId: string | null;
  labels: Record<string, string>;
  bytes: number;
}

/** An image's tags and the bytes it holds that no other image shares. */
export interface ImageDisk {
  tags: string[];
  uniqueBytes: number;
}

/** Labels every svc workload carries, so that the engine's state can be matched to the store. */
export const LABELS = {
  managed: 'svc.managed',
  /** The svc installation (one store) that owns the workload: several may share an engine. */
  installation: 'svc.installation',
  tenant: 'svc.tenant',
  kind: 'svc.kind',
  resource: 'svc.resource',
  deployment: 'svc.deployment',
} as const;

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
   * Start it unassigned, on svc's internal warm-pool network (no way out, none to its peers),
   * labelled for no tenant; assignWorkload hands it to one later. tenantId is not used.
   */
  warmPool?: boolean;
  /** A minimal init as PID 1 that reaps orphaned processes (environments, where exec starts many). */
  init?: boolean;
  /**
   * It runs a tenant's own code (services, environments): under svc-init as PID 1, which holds
   * its output to the installation's log rate (tenant-init.ts) and reaps orphans.
   */
  tenantCode?: boolean;
  /** Run as this user of the image (name or uid) instead of the image's default. */
  user?: string;
  /** Named volumes (created with the workload's labels when missing) and where they mount. */
  volumes?: Array<{ name: string; target: string }>;
  /** Extra names the workload answers to on its tenant network. */
  aliases?: string[];
  /** Publish `port` on this address and port of the host (databases: loopback; boards: --kanban-address). */
  publish?: { address: string; port: number };
  /** Let the engine restart it when it exits (workloads svc does not watch for crashes itself). */
  engineRestarts?: boolean;
}

export type WorkloadState = 'created' | 'running' | 'paused' | 'restarting' | 'removing' | 'exited' | 'dead';

export interface WorkloadInfo {
  id: string;
  name: string;
  state: WorkloadState;
  exitCode: number | null;
  labels: Record<string, string>;
  /** Where the workload answers on its tenant network, as seen from the host. */
  address: { host: string; port: number } | null;
  /** When it last stopped (ms), if it ever did; inspect only. */
  finishedAtMs?: number | null;
}

/** An image build from a context directory (Dockerfile at its root). */
export interface ImageBuildSpec {
  contextDir: string;
  tag: string;
  /** Whose build: its RUN steps use the tenant's network. Null: an operator image, no network. */
  tenantId: string | null;
  /** The build's store id. */
  resourceId: string;
  /** For the build's RUN steps (pids: a process limit inside each step). */
  limits: { memoryMb: number; cpus: number; pids: number };
  /** Pull every image FROM names, even when the engine has one of that name (tenant builds). */
  pullBaseImages: boolean;
  signal: AbortSignal;
  /** The engine's output, line by line, as it comes. */
  onOutput(line: string): void;
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
  /** Fed to the process's stdin, which closes when it ends. */
  stdin?: NodeJS.ReadableStream;
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

export interface Runtime {
  /** Engine version and capabilities; throws RuntimeUnavailableError when no engine answers. */
  info(): Promise<EngineInfo>;
  /** The version string of the sandbox runtime when the engine has it, else null. */
  sandboxVersion(): Promise<string | null>;
  storage(): Promise<EngineStorage>;
  /**
   * What svc's workloads of this installation take on disk, one entry per container or unmounted
   * volume, and the images on the engine with their tags and the bytes only they hold.
   */
  diskUsage(): Promise<{ workloads: WorkloadDisk[]; images: ImageDisk[] }>;
  countNetworks(prefix: string): Promise<number>;

  /** The tenant's own network (tenant-<tenantID>), created on first use. */
  ensureTenantNetwork(tenantId: string): Promise<void>;
  /**
   * Removes the tenant's network, and its CPU group, when nothing is attached to it any more;
   * true when removed.
   */
  releaseTenantIfUnused(tenantId: string): Promise<boolean>;
  hasImage(image: string): Promise<boolean>;
  /** The ID of the local image of that name, or null when there is none. */
  imageId(image: string): Promise<string | null>;
  /** The ONBUILD triggers a local image carries (empty when none). */
  imageTriggers(image: string): Promise<string[]>;
  /** Pulls an image; rejects with the registry's message. */
  pullImage(image: string, signal?: AbortSignal): Promise<void>;
  /**
   * Builds an image; rejects with the engine's error (a failed step, a bad Dockerfile) or when
   * the signal aborts (which stops the build in the engine).
   */
  buildImage(spec: ImageBuildSpec): Promise<void>;
  /** Pushes a tagged image to the registry its name starts with; rejects with the registry's error. */
  pushImage(image: string, signal: AbortSignal, onOutput: (line: string) => void): Promise<void>;
  /** Removes a named volume and its data; a missing one is fine. */
  removeVolume(name: string): Promise<void>;
  /** Removes one image tag; a missing one, or one a container still uses, is left as it is. */
  removeImage(reference: string): Promise<void>;
  /** Removes every tag of an image repository (e.g. all builds of a service). */
  removeRepository(repository: string): Promise<void>;
  /** Creates and starts a workload; returns its engine id. */
  runWorkload(spec: WorkloadSpec): Promise<string>;
  startWorkload(id: string): Promise<void>;
  /** Stops gracefully (SIGTERM, then SIGKILL after timeoutSeconds). Missing workloads are fine. */
  stopWorkload(id: string, timeoutSeconds?: number): Promise<void>;
  /** Removes a workload and its anonymous volumes. Missing workloads are fine. */
  removeWorkload(id: string): Promise<void>;
  inspectWorkload(id: string): Promise<WorkloadInfo | null>;
  /** svc workloads, optionally of one tenant or kind. */
  listWorkloads(filter?: { tenantId?: string; kind?: WorkloadKind }): Promise<WorkloadInfo[]>;
  /** One reading of a running workload's counters (one-shot: no wait for a second reading); null when it is gone. */
  stats(id: string): Promise<WorkloadStats | null>;
  /** Moves a warm-pool workload onto the tenant's network; returns its address there. */
  assignWorkload(id: string, tenantId: string): Promise<string | null>;
  /** Runs a command in a running workload and collects its output. */
  exec(id: string, spec: ExecSpec): Promise<ExecOutcome>;
  /**
   * stdout and stderr as text; with follow, open until the workload ends or the stream is
   * destroyed. Rejects with WorkloadNotRunningError when the engine is removing the workload.
   */
  logs(id: string, opts: LogOptions): Promise<NodeJS.ReadableStream>;
  /** Exits of svc workloads as the engine reports them, until the signal aborts. */
  exits(signal: AbortSignal): AsyncIterable<WorkloadExit>;
}

export class RuntimeUnavailableError extends Error {}

/** Whether the engine answers now (its info call succeeds). */
export async function engineAnswers(engine: Pick<Runtime, 'info'>): Promise<boolean> {
  try {
    await engine.info();
    return true;
  } catch {
    return false;
  }
}

/**
 * Connect errors of an engine that is not there (stopped, restarting, its socket gone). Only a
 * connect counts: a reset or timeout mid-request is a slow engine (the client's idle timeout),
 * and ENOENT without a connect is a file of svc's own.
 */
const ENGINE_GONE_CODES = new Set(['ENOENT', 'ECONNREFUSED', 'ETIMEDOUT', 'EHOSTUNREACH']);

/**
 * Whether an error is the engine's absence, not the tenant's fault: no engine answers (stopped,
 * restarting, its socket gone). Follows `cause` through errors that wrap the engine client's.
 * An engine's server error (5xx) is not counted: this engine answers 500 to a tenant's image
 * whose command does not exist under gVisor as much as to its own trouble.
 */
export function isEngineFault(err: unknown): boolean {
  for (let e: unknown = err, depth = 0; e instanceof Error && depth < 5; e = e.cause, depth++) {
    if (e instanceof RuntimeUnavailableError) return true;
    const { code, syscall } = e as { code?: unknown; syscall?: unknown };
    if (syscall === 'connect' && typeof code === 'string' && ENGINE_GONE_CODES.has(code)) return true;
  }
  return false;
}

/** The engine could not start an exec's process (e.g. its working directory is missing). */
export class ExecNotStartedError extends Error {}

/** The workload is not running (stopped, or stopping right now): nothing can be run in it. */
export class WorkloadNotRunningError extends Error {}

export function tenantNetworkName(tenantId: string): string {
  return `${TENANT_NETWORK_PREFIX}${tenantId}`;
}
