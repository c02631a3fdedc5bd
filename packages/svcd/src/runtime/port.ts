// The runtime's ports: what svc's domain asks of a container engine. Domain code sees these
// interfaces, never dockerode, so that a Docker Swarm implementation can stand in later.
import type { WorkloadDriver, WorkloadSpec } from './driver.js';
import type { ImageBuilder } from './image-builder.js';

export type * from './driver.js';
export type * from './image-builder.js';

export const SANDBOX_RUNTIME = 'runsc';
/** Every tenant gets its own bridge network named with this prefix. */
export const TENANT_NETWORK_PREFIX = 'tenant-';
/** Where warm-pool workloads wait for a tenant. */
export const WARM_POOL_NETWORK = 'svc-warm-pool';
/** The tenant label of warm-pool workloads (their labels cannot change when a tenant gets one). */
export const WARM_POOL_TENANT = 'warm-pool';

/** The name a workload set aside by a rolling apply goes by: its spec's name and a short id. */
export function setAsideName(name: string, id: string): string {
  return `${name}-${id.slice(0, 12)}`;
}

/** Whether `name` is a workload of `specName` set aside by a rolling apply (and left behind if its svcd died). */
export function isSetAside(name: string, specName: string): boolean {
  return name.startsWith(`${specName}-`) && /^[0-9a-z]{12}$/.test(name.slice(specName.length + 1));
}

/** The variable svc-init takes its agent's token from (`WorkloadSpec.agentPort`). */
export const AGENT_TOKEN_ENV = 'SVC_AGENT_TOKEN';

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

/** A warm-pool workload waiting on the pool's own network (not one kept for a tenant, on the tenant's). */
export function onWarmPoolNetwork(spec: Pick<WorkloadSpec, 'warmPool' | 'tenantId'>): boolean {
  return spec.warmPool === true && spec.tenantId === '';
}

/** The labels of a workload svc runs: the spec's own, and svc's, by which the engine's state is matched to the store. */
export function workloadLabels(spec: Pick<WorkloadSpec, 'labels' | 'warmPool' | 'tenantId' | 'kind' | 'resourceId'>, installation: string): Record<string, string> {
  return {
    ...spec.labels,
    [LABELS.managed]: 'true',
    [LABELS.installation]: installation,
    // A warm-pool workload's labels cannot change when a tenant gets it: it is labelled for none.
    [LABELS.tenant]: spec.warmPool ? WARM_POOL_TENANT : spec.tenantId,
    [LABELS.kind]: spec.kind,
    [LABELS.resource]: spec.resourceId,
  };
}

/** What svc asks of the engine's host as a whole: health, capacity, disk. */
export interface EngineHost {
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
  /** Ends what the runtime holds open between calls (its watch of the engine); at svcd's close. */
  close(): Promise<void>;
}

/** A node of a cluster (Swarm), as operators see it. */
export interface ClusterNodeInfo {
  id: string;
  hostname: string;
  role: 'manager' | 'worker';
  /** ready, down, unknown or disconnected. */
  state: string;
  availability: 'active' | 'pause' | 'drain';
  address: string;
  engineVersion: string;
  /** svc's tasks running on it. */
  tasks: number;
  memoryBytes: number;
  cpus: number;
}

/** The nodes of a cluster runtime (Swarm); a single engine has none. */
export interface ClusterNodes {
  nodes(): Promise<ClusterNodeInfo[]>;
  /** Drains a node (its tasks move elsewhere) or makes it take tasks again; null when no node has that id or host name. */
  setAvailability(node: string, availability: 'active' | 'drain'): Promise<ClusterNodeInfo | null>;
}

/** One engine behind the three ports: workloads (driver.ts), images (image-builder.ts) and the host. */
export interface Runtime extends WorkloadDriver, ImageBuilder, EngineHost {}

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
 * Connect errors of an engine that is not there (stopped, restarting, its socket gone). These
 * count only on a connect: ENOENT without one is a file of svc's own.
 */
const ENGINE_GONE_CODES = new Set(['ENOENT', 'ECONNREFUSED', 'ETIMEDOUT', 'EHOSTUNREACH']);
/** A connection dropped mid-request (connectionDropped()). */
const DROPPED_CODES = new Set(['ECONNRESET', 'EPIPE']);

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

/**
 * Whether the engine's connection dropped in the middle of a request ("socket hang up"): an
 * engine restarting under it (a board's start once failed for good so while dockerd restarted),
 * or the engine client's idle timeout giving up on a slow answer, which a tenant can cause (an
 * image whose VOLUME makes the engine copy a large directory at create). So it is neither the
 * engine's absence nor the tenant's fault for sure: the controller tries a few times.
 */
export function connectionDropped(err: unknown): boolean {
  for (let e: unknown = err, depth = 0; e instanceof Error && depth < 5; e = e.cause, depth++) {
    const { code } = e as { code?: unknown };
    if (typeof code === 'string' && DROPPED_CODES.has(code)) return true;
  }
  return false;
}

/** The engine could not start an exec's process (e.g. its working directory is missing). */
export class ExecNotStartedError extends Error {}

/**
 * A workload pinned to a node (`WorkloadSpec.placement`) cannot run now: the node is down,
 * drained or gone from the cluster. Neither the tenant's fault nor for good: the controller tries
 * again, and the resource says which node it waits for.
 */
export class NodeUnavailableError extends Error {}

/** The workload is not running (stopped, or stopping right now): nothing can be run in it. */
export class WorkloadNotRunningError extends Error {}

/**
 * A readiness probe that reached the workload and got a wrong answer (an HTTP status): a wait
 * that ends unready names the last such answer rather than a connection failure after it, which
 * says less (a server that drops a connection now and then).
 */
export class ProbeAnsweredError extends Error {}

export function tenantNetworkName(tenantId: string): string {
  return `${TENANT_NETWORK_PREFIX}${tenantId}`;
}
