import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import Docker from 'dockerode';
import { Readable, Writable } from 'node:stream';
import { join } from 'node:path';
import { pack as packDirectory } from 'tar-fs';
import { systemClock, systemTimers, type Clock, type Timers } from '../../clock.js';
import { applyInOrder } from '../apply-sequence.js';
import type { Socket } from 'node:net';
import { KEPT_ANSWER_LOCAL_MAX_AGE_MS, KEPT_ANSWER_MAX_AGE_MS, KeptAnswer } from '../kept-answer.js';
import { consumeProgress, demuxedLog, lastLinesOf } from './engine-streams.js';
import { tenantBridgeName, WARM_POOL_BRIDGE } from '../host-firewall.js';
import { tenantCgroupPath, type TenantCgroups } from '../tenant-cgroups.js';
import { TENANT_INIT_PATH, tenantCommand, type ImageCommand, type TenantInit } from '../tenant-init.js';
import {
  AGENT_TOKEN_ENV,
  LABELS,
  ExecNotStartedError,
  WorkloadNotRunningError,
  RuntimeUnavailableError,
  SANDBOX_RUNTIME,
  TENANT_NETWORK_PREFIX,
  WARM_POOL_NETWORK,
  WARM_POOL_TENANT,
  tenantNetworkName,
  onWarmPoolNetwork,
  workloadLabels,
  type EngineInfo,
  type EngineStorage,
  type ExecOutcome,
  type ExecSpec,
  type ImageBuildSpec,
  type LogOptions,
  type Runtime,
  type Applied,
  type ApplyRequest,
  type DriverCapabilities,
  type Endpoint,
  type WorkloadInfo,
  type WorkloadKind,
  type WorkloadSpec,
  type WorkloadState,
  type WorkloadStats,
  type WorkloadExit,
  type WorkloadDisk,
  type ImageDisk,
} from '../port.js';

const execFileAsync = promisify(execFile);
/**
 * Under gVisor the container's pids group holds the sandbox's own host threads beside the
 * tenant's processes: the sentry's and the gofer's (a Go thread for each blocking file call) and a
 * stub process per address space. A postgres recovering after a crash syncs every file of its data
 * directory, the gofer's threads went past the 256 of the limit, and the sandbox died ("error
 * initializing first thread: resource temporarily unavailable") on every start. The tenant's own
 * processes stay bounded, by the limit plus this much.
 */
const SANDBOX_PIDS_HEADROOM = 768;
/**
 * The period over which a workload's CPU limit is enforced, builds' RUN steps included (the
 * engine's own default is 100 ms). A start is a burst: gVisor's own start runs inside the
 * container's CPU group (about 130 ms of CPU here), then svc-init and the image's runtime. Over
 * 100 ms periods a service at the default 0.4 cores (40 ms of CPU a period) was throttled one to
 * three times before its first answer; over 500 ms periods (200 ms of CPU) the start fits in the
 * first one, and the limit on average is the same. What it costs: a workload that keeps its whole
 * limit busy spends a period's quota and is then paused for the rest of it (one busy thread at 0.4
 * cores: 300 ms at a time instead of 60; two threads: 400), and a tenant's services busy at once
 * can hold the cores five times longer before the kernel holds them back (the tenants' CPU group
 * and its low weight still put svcd first: tenant-cgroups.ts). Not a longer period for the start
 * alone: Debian's runsc has no `update`, and writing the container's cgroup files after its start
 * would be undone by any start the engine makes itself (a restart policy, the engine's own
 * restart), which recreates the group with the period the container was created with.
 */
const CPU_PERIOD_US = 500_000;
/** The engine's least CPU quota a period (1 ms). */
const CPU_QUOTA_MIN_US = 1_000;

/** A workload's CPU limit of `cpus` cores as the engine's HostConfig takes it (the benches' bare containers get the same). */
export function engineCpuLimit(cpus: number): { CpuPeriod: number; CpuQuota: number } {
  return { CpuPeriod: CPU_PERIOD_US, CpuQuota: Math.max(CPU_QUOTA_MIN_US, Math.round(cpus * CPU_PERIOD_US)) };
}
/** How long past an exec's deadline its output may stay open before svcd stops reading. */
const EXEC_GRACE_MS = 5_000;

/** How long a remove waits for another call's removal of the same container, and how often it looks. */
const REMOVAL_WAIT_MS = 30_000;
const REMOVAL_POLL_MS = 100;

/** Keeps the first `max` bytes written to it; the rest is counted as truncated and dropped. */
export class CappedText extends Writable {
  private readonly chunks: Buffer[] = [];
  private size = 0;
  truncated = false;

  constructor(private readonly max: number) {
    super();
  }

  override _write(chunk: Buffer, _encoding: BufferEncoding, done: () => void): void {
    const room = this.max - this.size;
    if (chunk.length > room) this.truncated = true;
    if (room > 0) {
      const kept = chunk.subarray(0, room);
      this.chunks.push(kept);
      this.size += kept.length;
    }
    done();
  }

  text(): string {
    return Buffer.concat(this.chunks).toString('utf8');
  }
}

/** An image's Entrypoint or Cmd: an array, null, or a lone string, which the engine reads as a one-word argv (its StrSlice). */
function asArgv(value: string[] | string | null | undefined): string[] | null {
  if (value === null || value === undefined) return null;
  return typeof value === 'string' ? [value] : value;
}

/** A disk usage reading walks every volume and layer: it may take long, not forever. */
const DF_TIMEOUT_MS = 120_000;
/** How soon a df the engine refused (another client's is running) is asked again. */
const DF_BUSY_RETRY_MS = 500;
/** The engine's refusal of a df while another runs (a 500, not a 409: matched by its text). */
const DF_BUSY = /disk usage operation is already running/;

/**
 * TLS material for an engine reached at https:// (PEM, as Docker names the files: ca.pem, the CA
 * that signed the engine's certificate; cert.pem and key.pem, svcd's client certificate for the
 * engine's --tlsverify).
 */
export interface EngineTls {
  ca: string;
  cert: string;
  key: string;
}

/** Parses `unix:///var/run/docker.sock`, `tcp://host:port` or `https://host:port` (with its TLS material) into dockerode options. */
export function dockerOptions(host: string, timeoutMs: number, tls: EngineTls | null = null): Docker.DockerOptions {
  if (host.startsWith('unix://')) return { socketPath: host.slice('unix://'.length), timeout: timeoutMs };
  if (host.startsWith('https://')) {
    // The engine's certificate is checked against the CA and the address (Node's TLS), and the
    // engine checks svcd's.
    if (!tls) throw new Error(`the engine at ${host} is reached over TLS, and svcd has no TLS material for it`);
    const url = new URL(host);
    return { host: url.hostname, port: Number(url.port || 2376), protocol: 'https', ca: tls.ca, cert: tls.cert, key: tls.key, timeout: timeoutMs };
  }
  const url = new URL(host.replace(/^tcp:/, 'http:'));
  return { host: url.hostname, port: Number(url.port || 2375), protocol: 'http', timeout: timeoutMs };
}

interface DfResponse {
  LayersSize?: number;
  Containers?: Array<{ Id: string; SizeRw?: number; Labels?: Record<string, string> | null; Mounts?: Array<{ Type?: string; Name?: string }> | null }> | null;
  Volumes?: Array<{ Name: string; Labels?: Record<string, string> | null; UsageData?: { Size?: number } | null }> | null;
  Images?: Array<{ RepoTags?: string[] | null; Size?: number; SharedSize?: number }> | null;
  BuildCache?: Array<{ Size?: number }> | null;
}

export interface DockerRuntimeOptions {
  /** The engine's address: unix:///var/run/docker.sock, tcp://host:port or https://host:port (with `tls`). */
  host: string;
  /** For an https:// address. */
  tls?: EngineTls | null;
  /**
   * Labels every workload this runtime creates, and scopes what it lists and reports to them:
   * another svc installation on the same engine is invisible to this one.
   */
  installation: string;
  /**
   * Puts every tenant workload in its tenant's CPU group of `groups` (tenant-cgroups.ts);
   * `unplaced` hears once that the engine's cgroup driver does not allow it. null: off.
   */
  placement?: { groups: TenantCgroups; unplaced: (driver: string) => void } | null;
  /** svc-init for workloads that run tenant code (tenant-init.ts); null: they run as the image says. */
  tenantInit?: TenantInit | null;
  /** Idle timeout of the API calls (not of streams). */
  timeoutMs?: number;
  /**
   * Where builds' RUN steps run: on the tenant's network (one engine), or on a bridge network of
   * the tenant's builds of their own (`tenant-<id>-build`; a swarm's manager, where the tenant's
   * network is an overlay for its tasks on other nodes, which a drained manager cannot even join).
   */
  buildNetwork?: 'tenant' | 'own';
  /** For the readiness wait of apply. */
  clock?: Clock;
  timers?: Timers;
}

/** When an idle watch's connection is first probed for a peer that went (TCP keepalive). */
const ENGINE_WATCH_KEEPALIVE_MS = 30_000;

/** Runtime over a Docker Engine's HTTP API (dockerode), never the docker CLI. */
export class DockerRuntime implements Runtime {
  private readonly docker: Docker;
  /** Long-lived streams (followed logs) must not be cut by the request timeout. */
  private readonly streaming: Docker;
  private readonly networkCreations = new Map<string, Promise<void>>();
  private sandboxVersionCache: { path: string; version: string } | null = null;
  private readonly defaultRuntime: KeptAnswer<string>;
  /** The df request under way, shared by whoever asks meanwhile (df()). */
  private dfInFlight: Promise<DfResponse> | null = null;
  /** The engine's cgroup driver, asked once: tenant groups are placed only under cgroupfs. */
  private cgroupDriver: Promise<string> | null = null;

  private readonly installation: string;
  private readonly buildNetwork: 'tenant' | 'own';
  private readonly placement: DockerRuntimeOptions['placement'];
  private readonly tenantInit: TenantInit | null;
  /** Read by a tenant workload's create, filled by imageId: the deploy's own inspect of the image. */
  private readonly imageCommands = new ImageCommands();
  private readonly clock: Clock;
  private readonly timers: Timers;
  private readonly timeoutMs: number;

  constructor(o: DockerRuntimeOptions) {
    const timeoutMs = o.timeoutMs ?? 5_000;
    this.timeoutMs = timeoutMs;
    this.buildNetwork = o.buildNetwork ?? 'tenant';
    this.clock = o.clock ?? systemClock;
    this.timers = o.timers ?? systemTimers;
    this.installation = o.installation;
    this.placement = o.placement ?? null;
    this.tenantInit = o.tenantInit ?? null;
    this.docker = new Docker(dockerOptions(o.host, timeoutMs, o.tls ?? null));
    this.streaming = new Docker({ ...dockerOptions(o.host, timeoutMs, o.tls ?? null), timeout: undefined });
    this.defaultRuntime = new KeptAnswer(
      async () => engineString(((await this.docker.info()) as EngineInfoBody).DefaultRuntime, 'runc'),
      (onChange, onEnd, signal) => this.watchEngine(onChange, onEnd, signal),
      // A connection over a network can go silent sooner than a socket on this host.
      { clock: this.clock, maxAgeMs: o.host.startsWith('unix://') ? KEPT_ANSWER_LOCAL_MAX_AGE_MS : KEPT_ANSWER_MAX_AGE_MS },
    );
  }

  async stepRuntime(): Promise<string> {
    try {
      return await this.defaultRuntime.get();
    } catch (err) {
      throw engineUnavailable(err);
    }
  }

  close(): Promise<void> {
    this.defaultRuntime.close();
    return Promise.resolve();
  }

  /**
   * A watch of the engine's own events (ChangeWatch): a reload of its configuration (SIGHUP, the
   * default runtime among what it may change) is one, and a restart ends the stream. The engine
   * answers a watch's headers before it subscribes it, so the watch asks for the events the engine
   * still holds too (the daemon's among its last 256 events of any kind, whatever either clock
   * says: `since` 1): one that fell between counts as a change. Its connection does not keep
   * svcd's process alive, is probed when idle (a lost peer is noticed in minutes; KeptAnswer's age
   * bounds the rest), and must open within the engine calls' time.
   */
  async watchEngine(onChange: () => void, onEnd: () => void, signal: AbortSignal): Promise<void> {
    const opening = new AbortController();
    const stop = () => opening.abort();
    signal.addEventListener('abort', stop, { once: true });
    // Real time, as the engine calls' own timeouts: this waits on the engine.
    const tooLong = setTimeout(() => opening.abort(new Error('the engine opened no event stream in time')), this.timeoutMs);
    let stream: NodeJS.ReadableStream & { destroy(): void; socket?: Socket | null };
    try {
      stream = (await this.streaming.getEvents({
        since: 1,
        filters: { type: ['daemon'] },
        abortSignal: opening.signal,
      })) as typeof stream;
    } catch (err) {
      signal.removeEventListener('abort', stop);
      throw err;
    } finally {
      clearTimeout(tooLong);
    }
    stream.socket?.setKeepAlive(true, ENGINE_WATCH_KEEPALIVE_MS);
    stream.socket?.unref();
    let ended = false;
    const end = () => {
      if (ended) return;
      ended = true;
      signal.removeEventListener('abort', stop);
      onEnd();
    };
    stream.on('data', onChange);
    stream.on('end', end);
    stream.on('close', end);
    stream.on('error', end);
    if (signal.aborted) stream.destroy();
  }

  async info(): Promise<EngineInfo> {
    try {
      const [version, info] = await Promise.all([this.docker.version(), this.docker.info() as Promise<EngineInfoBody>]);
      const runtimes = Object.keys(info.Runtimes ?? {});
      const defaultRuntime = engineString(info.DefaultRuntime, 'runc');
      return {
        version: version.Version,
        runtimes,
        defaultRuntime,
        dataRoot: engineString(info.DockerRootDir, ''),
        cgroupDriver: engineString(info.CgroupDriver, ''),
      };
    } catch (err) {
      throw engineUnavailable(err);
    }
  }

  async sandboxVersion(): Promise<string | null> {
    const info = (await this.docker.info()) as { Runtimes?: Record<string, { path?: string }> };
    const entry = info.Runtimes?.[SANDBOX_RUNTIME];
    if (!entry) return null;
    const path = entry.path ?? SANDBOX_RUNTIME;
    if (this.sandboxVersionCache?.path === path) return this.sandboxVersionCache.version;
    // The Engine API names the runtime but not its version; ask the binary it registered.
    let version = 'unknown';
    try {
      const { stdout } = await execFileAsync(path, ['--version'], { timeout: 5_000 });
      version = /runsc version (\S+)/.exec(stdout)?.[1] ?? (stdout.split('\n')[0]?.trim() || 'unknown');
    } catch {
      // Registered but not runnable from here (e.g. a remote engine): still available to the engine.
    }
    this.sandboxVersionCache = { path, version };
    return version;
  }

  async storage(): Promise<EngineStorage> {
    const df = await this.df();
    const sum = (xs: number[]) => xs.reduce((a, b) => a + (b > 0 ? b : 0), 0);
    return {
      imagesBytes: df.LayersSize ?? 0,
      containersBytes: sum((df.Containers ?? []).map((c) => c.SizeRw ?? 0)),
      volumesBytes: sum((df.Volumes ?? []).map((v) => v.UsageData?.Size ?? 0)),
      buildCacheBytes: sum((df.BuildCache ?? []).map((b) => b.Size ?? 0)),
    };
  }

  /**
   * The engine's disk usage. One df at a time: the engine walks every volume and writable layer
   * for it (seconds on a busy host), and refuses a second one while one runs (500 "a disk usage
   * operation is already running": the health detail's beside the metering pass's made the health
   * detail report no gVisor). Callers at once share one request; a df another client of the
   * engine runs is waited out. On the client without an idle timeout, bounded as a whole instead.
   */
  private df(): Promise<DfResponse> {
    this.dfInFlight ??= this.dfWaitingOutOthers().finally(() => (this.dfInFlight = null));
    return this.dfInFlight;
  }

  private async dfWaitingOutOthers(): Promise<DfResponse> {
    // dockerode passes abortSignal on to the request (its typings do not list options for df).
    const dfWithOptions = this.streaming.df.bind(this.streaming) as (opts: object) => Promise<unknown>;
    const deadline = this.clock.now() + DF_TIMEOUT_MS;
    for (;;) {
      try {
        return (await dfWithOptions({ abortSignal: AbortSignal.timeout(Math.max(1, deadline - this.clock.now())) })) as DfResponse;
      } catch (err) {
        if (!DF_BUSY.test((err as Error).message) || this.clock.now() >= deadline) throw err;
        await new Promise<void>((resolve) => this.timers.setTimeout(resolve, DF_BUSY_RETRY_MS));
      }
    }
  }

  async diskUsage(): Promise<{ workloads: WorkloadDisk[]; images: ImageDisk[] }> {
    // Runs on the metering pass, not per request (df is slow).
    const df = await this.df();
    const ours = (labels: Record<string, string> | null | undefined) => labels?.[LABELS.installation] === this.installation;
    const volumeBytes = new Map<string, number>();
    for (const v of df.Volumes ?? []) if (ours(v.Labels)) volumeBytes.set(v.Name, Math.max(0, v.UsageData?.Size ?? 0));
    const mounted = new Set<string>();
    const usage: WorkloadDisk[] = [];
    for (const c of df.Containers ?? []) {
      if (!ours(c.Labels)) continue;
      let bytes = Math.max(0, c.SizeRw ?? 0);
      for (const m of c.Mounts ?? []) {
        if (m.Type !== 'volume' || !m.Name || !volumeBytes.has(m.Name) || mounted.has(m.Name)) continue;
        mounted.add(m.Name);
        bytes += volumeBytes.get(m.Name) ?? 0;
      }
      usage.push({ containerId: c.Id, labels: c.Labels ?? {}, bytes });
    }
    for (const v of df.Volumes ?? []) {
      if (ours(v.Labels) && !mounted.has(v.Name)) usage.push({ containerId: null, labels: v.Labels ?? {}, bytes: volumeBytes.get(v.Name) ?? 0 });
    }
    const images = (df.Images ?? []).map((i) => ({ tags: i.RepoTags ?? [], uniqueBytes: Math.max(0, (i.Size ?? 0) - Math.max(0, i.SharedSize ?? 0)) }));
    return { workloads: usage, images };
  }

  private async ensureTenantNetwork(tenantId: string, name: string = tenantNetworkName(tenantId)): Promise<void> {
    // One creation per network at a time in this process: the engine does not reliably refuse a
    // second network of the same name, and two would make the name ambiguous.
    const pending = this.networkCreations.get(name);
    if (pending) return pending;
    const p = this.createTenantNetwork(tenantId, name).finally(() => this.networkCreations.delete(name));
    this.networkCreations.set(name, p);
    return p;
  }

  private async createTenantNetwork(tenantId: string, name: string): Promise<void> {
    const existing = await this.networksNamed(name);
    if (existing.length === 1) return;
    if (existing.length > 1) return this.dropDuplicateNetworks(existing);
    try {
      await this.docker.createNetwork({
        Name: name,
        Driver: 'bridge',
        CheckDuplicate: true,
        Labels: { [LABELS.managed]: 'true', [LABELS.tenant]: tenantId },
        // Bridges of different networks cannot reach each other (the engine's isolation rules);
        // inter-container traffic inside the tenant's own network stays allowed. The bridge's
        // name lets one host firewall rule cover every tenant (host-firewall.ts).
        Options: { 'com.docker.network.bridge.enable_icc': 'true', 'com.docker.network.bridge.name': tenantBridgeName(tenantId) },
      });
    } catch (err) {
      // Another svcd created it meanwhile.
      if ((err as { statusCode?: number }).statusCode !== 409) throw tenantNetworkError(err);
    }
    // Another svcd may have created one at the same moment: keep the oldest, drop the rest.
    const after = await this.networksNamed(name);
    if (after.length > 1) await this.dropDuplicateNetworks(after);
  }

  private async removeUnusedLocalNetwork(name: string): Promise<void> {
    for (const n of await this.networksNamed(name)) {
      if (n.Scope === 'local' && n.Driver === 'bridge') await this.docker.getNetwork(n.Id).remove().catch(() => {});
    }
  }

  private async networksNamed(name: string): Promise<Docker.NetworkInspectInfo[]> {
    const nets = await this.docker.listNetworks({ filters: { name: [name] } });
    return nets.filter((n) => n.Name === name);
  }

  private async dropDuplicateNetworks(nets: Docker.NetworkInspectInfo[]): Promise<void> {
    const [, ...extra] = [...nets].sort((a, b) => a.Created.localeCompare(b.Created) || a.Id.localeCompare(b.Id));
    for (const n of extra) await this.docker.getNetwork(n.Id).remove().catch(() => {});
  }

  async releaseTenant(tenantId: string): Promise<boolean> {
    const net = this.docker.getNetwork(tenantNetworkName(tenantId));
    try {
      const info = (await net.inspect()) as { Containers?: Record<string, unknown> };
      if (Object.keys(info.Containers ?? {}).length > 0) return false;
      await net.remove();
      // Its CPU group goes with it when it is empty (the kernel refuses otherwise).
      await this.placement?.groups.releaseTenant(tenantId);
      return true;
    } catch (err) {
      if (isNotFound(err)) {
        // The network went earlier, while the group was still busy (a build step ending): try again.
        await this.placement?.groups.releaseTenant(tenantId);
        return false;
      }
      // 403/409: something attached meanwhile.
      if ([403, 409].includes((err as { statusCode?: number }).statusCode ?? 0)) return false;
      throw err;
    }
  }

  async hasImage(image: string): Promise<boolean> {
    return (await this.imageId(image)) !== null;
  }

  async baseImage(image: string): Promise<{ id: string; triggers: string[] }> {
    const info = (await this.docker.getImage(image).inspect()) as { Id: string; Config?: { OnBuild?: string[] | null } };
    return { id: info.Id, triggers: info.Config?.OnBuild ?? [] };
  }

  async imageId(image: string): Promise<string | null> {
    try {
      const info = await this.docker.getImage(image).inspect();
      this.imageCommands.keep(info);
      return info.Id;
    } catch (err) {
      if (isNotFound(err)) return null;
      throw err;
    }
  }

  async pullImage(image: string, signal?: AbortSignal): Promise<void> {
    const stream = await this.docker.pull(image, { abortSignal: signal });
    await consumeProgress(stream, undefined, signal);
  }

  async buildImage(spec: ImageBuildSpec): Promise<void> {
    // A tenant's RUN steps need the network, and the tenant's own network keeps them as far from
    // other tenants and from svcd as the tenant's services are. Operator images (the task
    // board) are built without one.
    const network = spec.tenantId === null ? 'none' : this.buildNetwork === 'own' ? `${tenantNetworkName(spec.tenantId)}-build` : tenantNetworkName(spec.tenantId);
    if (spec.tenantId !== null) {
      // An older svcd's builds used a local `tenant-<id>` here, whose bridge has the name this one wants: it goes, unless in use.
      if (this.buildNetwork === 'own') await this.removeUnusedLocalNetwork(tenantNetworkName(spec.tenantId));
      await this.ensureTenantNetwork(spec.tenantId, network);
    }
    const cgroup = await this.tenantCgroup(spec.tenantId);
    const context = packDirectory(spec.contextDir, { ignore: (name) => name === join(spec.contextDir, '.git') });
    // Each RUN step starts a sandbox of its own: the start's burst, as a workload's (CPU_PERIOD_US).
    const cpu = engineCpuLimit(spec.limits.cpus);
    // The streaming client: the API client's idle timeout would cut a build whose step prints
    // nothing for a few seconds (an npm install, a sleep). The build's own deadline and its
    // signal bound it instead.
    const stream = await this.streaming.buildImage(context, {
      t: spec.tag,
      // No labels: the classic builder adds a step (and a container) per label. The tag,
      // svc/<tenant>/<service>:<build>, says whose image it is.
      networkmode: network,
      memory: spec.limits.memoryMb * 1024 * 1024,
      memswap: spec.limits.memoryMb * 1024 * 1024,
      cpuperiod: cpu.CpuPeriod,
      cpuquota: cpu.CpuQuota,
      // The build API has no pids limit: a process rlimit per step instead (inside gVisor it
      // counts the sandbox's own processes). Passed as JSON text: the query takes it so.
      pull: spec.pullBaseImages,
      rm: true,
      forcerm: true,
      // The RUN steps count as the tenant's CPU, under the tenants' low weight (tenant-cgroups.ts).
      ...(cgroup ? { cgroupparent: cgroup } : {}),
      // dockerode passes both on to the request (its typings do not list them).
      ...({ abortSignal: spec.signal, ulimits: JSON.stringify([{ Name: 'nproc', Soft: spec.limits.pids, Hard: spec.limits.pids }]) } as object),
    });
    await consumeProgress(
      stream,
      (event) => {
        const text = event.stream ?? event.status ?? (event.error ? `error: ${event.error}` : '');
        for (const line of text.split('\n')) if (line.trim()) spec.onOutput(line);
      },
      spec.signal,
    );
  }

  async pushImage(image: string, signal: AbortSignal, onOutput: (line: string) => void): Promise<void> {
    // An empty auth header: the engine insists on one, a loopback registry needs no credentials.
    // The streaming client, as for builds: a registry slow to take a large layer is no idle connection. The signal bounds it.
    const stream = await this.streaming.getImage(image).push({ authconfig: {}, abortSignal: signal } as object);
    await consumeProgress(
      stream,
      (event) => {
        if (event.status && !event.progressDetail?.current) onOutput(`${event.id ? `${event.id}: ` : ''}${event.status}`);
      },
      signal,
    );
  }

  private async ensureVolume(name: string, labels: Record<string, string>): Promise<void> {
    try {
      await this.docker.getVolume(name).inspect();
    } catch {
      await this.docker.createVolume({ Name: name, Labels: labels });
    }
  }

  async removeVolume(name: string): Promise<void> {
    await this.docker.getVolume(name).remove().catch((err: unknown) => {
      if ((err as { statusCode?: number }).statusCode !== 404) throw err;
    });
  }

  async removeImage(reference: string): Promise<void> {
    await this.docker.getImage(reference).remove().catch((err: unknown) => {
      const code = (err as { statusCode?: number }).statusCode;
      if (code !== 404 && code !== 409) throw err;
    });
  }

  async removeRepository(repository: string): Promise<void> {
    for (const img of await this.docker.listImages({ filters: { reference: [repository] } })) {
      for (const tag of img.RepoTags ?? []) {
        if (!tag.startsWith(`${repository}:`)) continue;
        await this.docker.getImage(tag).remove().catch((err: unknown) => {
          // Gone already, or still used by a container that is going away: not worth failing a delete.
          const code = (err as { statusCode?: number }).statusCode;
          if (code !== 404 && code !== 409) throw err;
        });
      }
    }
  }

  async capabilities(): Promise<DriverCapabilities> {
    const info = await this.info();
    return { sandbox: info.runtimes.includes(SANDBOX_RUNTIME), warmPool: true, agent: this.tenantInit !== null, addressable: true, allocatedPorts: false, setAside: true, replicas: false };
  }

  /** The steps of apply in their one order (apply-sequence.ts), on the Docker Engine. */
  apply(request: ApplyRequest): Promise<Applied> {
    return applyInOrder(request, {
      clock: this.clock,
      timers: this.timers,
      ensureNetwork: async (spec) => {
        // The warm pool's own network is made by run(): it belongs to no tenant.
        if (!onWarmPoolNetwork(spec)) await this.ensureTenantNetwork(spec.tenantId);
      },
      hasImage: (image) => this.hasImage(image),
      pullImage: (image, signal) => this.pullImage(image, signal),
      remove: (ref) => this.remove(ref),
      rename: async (ref, name) => {
        await this.docker.getContainer(ref).rename({ name });
      },
      run: (spec) => this.run(spec),
      inspect: (ref) => this.inspect(ref),
      logTail: (ref) => this.logTail(ref),
    });
  }

  async start(id: string): Promise<Endpoint | null> {
    await this.startContainer(id);
    const info = await this.inspect(id);
    return info?.address ? { host: info.address.host, port: info.address.port || null } : null;
  }

  /** The last few lines a container printed, on one line, for an error message. */
  private async logTail(id: string): Promise<string> {
    return lastLinesOf(await this.logs(id, { tail: 5, follow: false }));
  }

  /** Creates and starts the spec's container; returns its engine id. */
  private async run(spec: WorkloadSpec): Promise<string> {
    const pooled = onWarmPoolNetwork(spec);
    if (pooled) await this.ensureWarmPoolNetwork();
    const network = pooled ? WARM_POOL_NETWORK : tenantNetworkName(spec.tenantId);
    const labels = workloadLabels(spec, this.installation);
    for (const v of spec.volumes ?? []) await this.ensureVolume(v.name, labels);
    // One kept for a tenant runs in the tenant's CPU group, as the environment it becomes.
    const cgroup = await this.tenantCgroup(pooled ? WARM_POOL_TENANT : spec.tenantId);
    const command = await this.command(spec);
    const mounts: Docker.MountSettings[] = (spec.volumes ?? []).map((v) => ({ Type: 'volume' as const, Source: v.name, Target: v.target }));
    if (command.underInit) mounts.push({ Type: 'bind', Source: command.underInit, Target: TENANT_INIT_PATH, ReadOnly: true });
    const container = await this.docker.createContainer({
      name: spec.name,
      Image: spec.image,
      Env: Object.entries(spec.env).map(([k, v]) => `${k}=${v}`),
      ...(spec.port ? { ExposedPorts: { [`${spec.port}/tcp`]: {} } } : {}),
      Labels: labels,
      ...(command.cmd ? { Cmd: command.cmd } : {}),
      ...(command.entrypoint ? { Entrypoint: command.entrypoint } : {}),
      ...(spec.user ? { User: spec.user } : {}),
      HostConfig: {
        Mounts: mounts,
        // svc-init reaps orphans itself; the engine's init is for the others that ask for one.
        ...(spec.init && !command.underInit ? { Init: true } : {}),
        ...(spec.publish && spec.port ? { PortBindings: { [`${spec.port}/tcp`]: [{ HostIp: spec.publish.address, HostPort: String(spec.publish.port) }] } } : {}),
        NetworkMode: network,
        // Hardening (DECISIONS.md): no capabilities, no privilege gain, bounded processes,
        // memory and CPU from the tenant's quota.
        CapDrop: ['ALL'],
        SecurityOpt: ['no-new-privileges'],
        PidsLimit: spec.sandbox ? spec.limits.pids + SANDBOX_PIDS_HEADROOM : spec.limits.pids,
        Memory: spec.limits.memoryMb * 1024 * 1024,
        MemorySwap: spec.limits.memoryMb * 1024 * 1024,
        ...engineCpuLimit(spec.limits.cpus),
        // Always named: the engine's default runtime is gVisor for the builder's sake
        // (scripts/ensure-docker.sh), and `off` must mean runc whatever the default.
        Runtime: spec.sandbox ? SANDBOX_RUNTIME : 'runc',
        // svc restarts crashed services itself (with backoff and a circuit breaker); the
        // others are left to the engine.
        RestartPolicy: { Name: spec.engineRestarts ? 'unless-stopped' : 'no' },
        LogConfig: { Type: 'json-file', Config: { 'max-size': '10m', 'max-file': '3' } },
        // The tenant's CPU group (tenant-cgroups.ts); a warm workload stays in the pool's once taken.
        ...(cgroup ? { CgroupParent: cgroup } : {}),
      },
      NetworkingConfig: { EndpointsConfig: { [network]: { Aliases: spec.aliases ?? [] } } },
    });
    try {
      await container.start();
    } catch (err) {
      await container.remove({ force: true, v: true }).catch(() => {});
      throw err;
    }
    return container.id;
  }

  /**
   * The ENTRYPOINT and CMD to create the container with: for tenant code, the image's own command
   * (or the spec's overrides) behind svc-init, read from the image (pulled by now); otherwise the
   * spec's overrides as they are.
   */
  private async command(spec: WorkloadSpec): Promise<{ entrypoint?: string[]; cmd?: string[]; underInit: string | null }> {
    if (!spec.tenantCode || !this.tenantInit) return { entrypoint: spec.entrypoint, cmd: spec.cmd, underInit: null };
    return { ...tenantCommand(await this.imageCommands.of(this.docker, spec.image), spec, this.tenantInit.rate), underInit: this.tenantInit.binary };
  }

  async assign(id: string, tenantId: string): Promise<string | null> {
    const network = tenantNetworkName(tenantId);
    // On no other tenant's network, whatever handed it here (one kept for a tenant offered to
    // another by an svcd of before kept ones, during an upgrade): left before it joins this one.
    const before: EngineContainer = await this.docker.getContainer(id).inspect();
    for (const other of Object.keys(before.NetworkSettings.Networks ?? {}).filter((n) => n.startsWith(TENANT_NETWORK_PREFIX) && n !== network)) {
      await this.docker.getNetwork(other).disconnect({ Container: id, Force: true });
    }
    await this.ensureTenantNetwork(tenantId);
    await this.docker.getNetwork(network).connect({ Container: id });
    // Leaving the pool network is not waited for (it is half of a hand-over's time): until it is
    // done the workload is also on a network with no way out and no traffic between its members.
    void this.docker.getNetwork(WARM_POOL_NETWORK).disconnect({ Container: id, Force: true }).catch(() => {});
    const after: EngineContainer = await this.docker.getContainer(id).inspect();
    return after.NetworkSettings.Networks?.[network]?.IPAddress || null;
  }

  private async ensureWarmPoolNetwork(): Promise<void> {
    if ((await this.docker.listNetworks({ filters: { name: [WARM_POOL_NETWORK] } })).some((n) => n.Name === WARM_POOL_NETWORK)) return;
    await this.docker
      .createNetwork({
        Name: WARM_POOL_NETWORK,
        Driver: 'bridge',
        // No route out and no traffic between waiting workloads: they belong to nobody yet.
        Internal: true,
        Labels: { [LABELS.managed]: 'true' },
        // Named like the tenant bridges: the egress rules cover its workloads too.
        Options: { 'com.docker.network.bridge.enable_icc': 'false', 'com.docker.network.bridge.name': WARM_POOL_BRIDGE },
      })
      .catch((err: unknown) => {
        if ((err as { statusCode?: number }).statusCode !== 409) throw err; // created meanwhile
      });
  }

  /** The cgroup parent of a tenant's work, or null (off or not set up, operator work, or not the cgroupfs driver). */
  private async tenantCgroup(tenantId: string | null): Promise<string | null> {
    if (this.placement?.groups.installed !== true || tenantId === null) return null;
    const { unplaced } = this.placement;
    this.cgroupDriver ??= (this.docker.info() as Promise<EngineInfoBody>).then(
      (info) => {
        const driver = engineString(info.CgroupDriver, '');
        if (driver !== 'cgroupfs') unplaced(driver);
        return driver;
      },
      (err: unknown) => {
        this.cgroupDriver = null; // asked again next time
        throw err;
      },
    );
    return (await this.cgroupDriver) === 'cgroupfs' ? tenantCgroupPath(tenantId) : null;
  }

  private async startContainer(id: string): Promise<void> {
    try {
      await this.docker.getContainer(id).start();
    } catch (err) {
      // 304: already running.
      if ((err as { statusCode?: number }).statusCode !== 304) throw err;
    }
  }

  async stop(id: string, timeoutSeconds = 10): Promise<void> {
    try {
      await this.docker.getContainer(id).stop({ t: timeoutSeconds });
    } catch (err) {
      const code = (err as { statusCode?: number }).statusCode;
      if (code !== 304 && code !== 404) throw err;
    }
  }

  async remove(id: string): Promise<void> {
    for (let waited = 0; ; waited += REMOVAL_POLL_MS) {
      try {
        await this.docker.getContainer(id).remove({ force: true, v: true });
        return;
      } catch (err) {
        const code = (err as { statusCode?: number }).statusCode;
        if (code === 404) return; // gone already
        if (code !== 409) throw err;
      }
      // 409: another call is removing it. Returning now would let the caller's next step find it
      // still there (a database started again empty removes its volume next: "volume is in
      // use"), so this asks again until the engine says it is gone (404), removing it itself
      // should the other removal have failed.
      if (waited >= REMOVAL_WAIT_MS) throw new Error(`the container ${id} was still being removed after ${String(REMOVAL_WAIT_MS / 1000)} s`);
      // Real timers: this waits on the engine, like every other call here.
      await new Promise((resolve) => setTimeout(resolve, REMOVAL_POLL_MS));
    }
  }

  async stats(id: string): Promise<WorkloadStats | null> {
    try {
      // one-shot: the engine answers with one reading at once instead of waiting a second for a
      // CPU delta it computes itself; svc takes its deltas between its own samples.
      const s = (await this.docker.getContainer(id).stats({ stream: false, 'one-shot': true } as { stream: false })) as EngineStats;
      return workloadStats(s);
    } catch (err) {
      if (isNotFound(err)) return null;
      throw err;
    }
  }

  async inspect(id: string): Promise<WorkloadInfo | null> {
    try {
      const c: EngineContainer = await this.docker.getContainer(id).inspect();
      // Its tenant network (a warm-pool workload handed to a tenant keeps its pool label), or
      // the pool's network while it waits there unassigned.
      const networks = Object.entries(c.NetworkSettings.Networks ?? {});
      const net = (networks.find(([name]) => name.startsWith(TENANT_NETWORK_PREFIX)) ?? networks.find(([name]) => name === WARM_POOL_NETWORK))?.[1];
      const port = Object.keys(c.Config.ExposedPorts ?? {})[0];
      return {
        id: c.Id,
        name: c.Name.replace(/^\//, ''),
        state: c.State.Status as WorkloadState,
        exitCode: c.State.Running ? null : c.State.ExitCode,
        labels: c.Config.Labels ?? {},
        address: net?.IPAddress ? { host: net.IPAddress, port: port ? Number.parseInt(port, 10) : 0 } : null,
        finishedAtMs: finishedAtMs(c.State.FinishedAt),
      };
    } catch (err) {
      if (isNotFound(err)) return null;
      throw err;
    }
  }

  async list(filter: { tenantId?: string; kind?: WorkloadKind } = {}): Promise<WorkloadInfo[]> {
    const label = [`${LABELS.installation}=${this.installation}`];
    if (filter.tenantId) label.push(`${LABELS.tenant}=${filter.tenantId}`);
    if (filter.kind) label.push(`${LABELS.kind}=${filter.kind}`);
    const list = await this.docker.listContainers({ all: true, filters: { label } });
    return list.map((c) => ({
      id: c.Id,
      name: (c.Names[0] ?? '').replace(/^\//, ''),
      state: c.State as WorkloadState,
      exitCode: null,
      labels: c.Labels,
      address: null,
    }));
  }

  async logs(id: string, opts: LogOptions): Promise<NodeJS.ReadableStream> {
    // Both kinds arrive as a stream read at the reader's pace: a tail of 10,000 long lines is never
    // held whole, and a followed log waits for a client that stops reading instead of piling up.
    const raw = await this.openLogs(id, opts).catch((err: unknown) => {
      // Dead, being removed or already removed (a redeploy or a halt replacing it, between the
      // caller's look and this read): no log to give any more.
      const { statusCode, message } = err as { statusCode?: number; message?: string };
      if (statusCode === 409 || statusCode === 404) throw new WorkloadNotRunningError(message ?? 'container is being removed');
      throw err;
    });
    return demuxedLog(raw);
  }

  /**
   * The engine's multiplexed log stream. dockerode hands a tail (no follow) over as one buffer, so
   * that one is dialled here as a stream, the way dockerode dials the followed one. Both on the
   * client without an idle timeout: a reader may pause longer than the API calls' 5 s.
   */
  private openLogs(id: string, opts: LogOptions): Promise<NodeJS.ReadableStream & { destroy(): void }> {
    const options = { stdout: true, stderr: true, tail: opts.tail, timestamps: false, follow: opts.follow };
    const modem = this.streaming.modem;
    return new Promise((resolve, reject) => {
      modem.dial(
        { path: `/containers/${encodeURIComponent(id)}/logs?`, method: 'GET', isStream: true, statusCodes: { 200: true, 404: 'no such container', 409: 'container is dead or being removed', 500: 'server error' }, options },
        (err: Error | null, stream?: unknown) => (err ? reject(err) : resolve(stream as NodeJS.ReadableStream & { destroy(): void })),
      );
    });
  }

  async exec(id: string, spec: ExecSpec): Promise<ExecOutcome> {
    // A container stopped between the caller's check and here: the engine says so with a 409, or
    // with a 500 when it stops while the exec starts.
    const notRunning = (err: unknown): never => {
      const e = err as { statusCode?: number; message?: string };
      if (e.statusCode === 409 || (e.statusCode === 500 && /not running|is paused|stopped/i.test(e.message ?? ''))) throw new WorkloadNotRunningError(e.message ?? 'not running');
      throw err;
    };
    const exec = await this.streaming.getContainer(id).exec({
      // The engine has no call that kills an exec: coreutils' timeout (in every template image)
      // runs the command in its own process group and kills the group at the deadline.
      Cmd: ['timeout', '--signal=KILL', `${spec.timeoutSeconds}s`, ...spec.cmd],
      WorkingDir: spec.workDir,
      // An exec gets the container's environment, which holds the agent's token for svc-init: a
      // name without a value takes it out (svc-init takes it out of its own children's).
      Env: [AGENT_TOKEN_ENV, ...Object.entries(spec.env ?? {}).map(([k, v]) => `${k}=${v}`)],
      AttachStdin: spec.stdin !== undefined,
      AttachStdout: true,
      AttachStderr: true,
      Tty: false,
    }).catch(notRunning);
    const started = performance.now();
    const stream = (await exec.start({ hijack: true, stdin: spec.stdin !== undefined }).catch(notRunning)) as NodeJS.ReadWriteStream & { destroy(): void };
    // The end of the input half-closes the connection: the process sees the end of its stdin.
    if (spec.stdin !== undefined) (Buffer.isBuffer(spec.stdin) ? Readable.from([spec.stdin]) : spec.stdin).pipe(stream);
    const stdout = new CappedText(spec.maxOutputBytes);
    const stderr = new CappedText(spec.maxOutputBytes);
    this.docker.modem.demuxStream(stream, stdout, stderr);
    let pastDeadline = false;
    let abandoned = false;
    // Real timers: this waits on the engine, like every other call here.
    const deadline = setTimeout(() => (pastDeadline = true), spec.timeoutSeconds * 1000);
    // A process that left children holding the output open (`cmd &`) would keep the stream
    // open past the kill: give up on it a little after the deadline.
    const grace = setTimeout(() => {
      abandoned = true;
      stream.destroy();
    }, spec.timeoutSeconds * 1000 + EXEC_GRACE_MS);
    try {
      await new Promise<void>((resolve) => {
        stream.on('end', resolve);
        stream.on('close', resolve);
        stream.on('error', resolve);
      });
    } finally {
      clearTimeout(deadline);
      clearTimeout(grace);
    }
    const info = await exec.inspect();
    // The engine reports a process it could not start on the output stream, with code 126.
    const startFailure = /^OCI runtime exec failed: (.*)/.exec(stdout.text())?.[1];
    if (info.ExitCode === 126 && startFailure) throw execStartFailure(startFailure.trim());
    return {
      exitCode: info.ExitCode ?? -1,
      stdout: stdout.text(),
      stderr: stderr.text(),
      truncated: stdout.truncated || stderr.truncated,
      // eslint-disable-next-line @typescript-eslint/no-unnecessary-condition -- set by the deadline's timer while the output was read
      timedOut: pastDeadline || abandoned,
      durationMs: Math.round(performance.now() - started),
    };
  }

  async *events(signal: AbortSignal): AsyncIterable<WorkloadExit> {
    const stream = (await this.streaming.getEvents({
      filters: { type: ['container'], event: ['die'], label: [`${LABELS.installation}=${this.installation}`] },
    })) as NodeJS.ReadableStream & { destroy(): void };
    // The abort may have come while the stream was being opened: then no listener would fire.
    if (signal.aborted) {
      stream.destroy();
      return;
    }
    const stop = () => stream.destroy();
    signal.addEventListener('abort', stop, { once: true });
    let buffered = '';
    try {
      for await (const chunk of stream) {
        buffered += chunk.toString();
        let nl: number;
        while ((nl = buffered.indexOf('\n')) >= 0) {
          const line = buffered.slice(0, nl).trim();
          buffered = buffered.slice(nl + 1);
          if (line === '') continue;
          const e = JSON.parse(line) as { id: string; Actor?: { Attributes?: Record<string, string> } };
          const attrs = e.Actor?.Attributes ?? {};
          const code = attrs.exitCode === undefined ? null : Number(attrs.exitCode);
          yield { id: e.id, labels: attrs, exitCode: Number.isNaN(code) ? null : code };
        }
      }
    } catch (err) {
      // eslint-disable-next-line @typescript-eslint/no-unnecessary-condition -- the signal may have fired while the events were read
      if (!signal.aborted) throw err;
    } finally {
      signal.removeEventListener('abort', stop);
      stream.destroy();
    }
  }

  async countNetworks(prefix: string): Promise<number> {
    // The engine's name filter matches substrings; keep only true prefixes.
    const nets = await this.docker.listNetworks({ filters: { name: [prefix] } });
    return nets.filter((n) => n.Name.startsWith(prefix)).length;
  }
}

/**
 * The parts of the Engine's info answer that svc reads (dockerode gives it untyped): any may be
 * missing, and the strings are taken as the engine sent them, whatever they are.
 */
interface EngineInfoBody {
  Runtimes?: Record<string, unknown>;
  DefaultRuntime?: unknown;
  DockerRootDir?: unknown;
  CgroupDriver?: unknown;
}

/** The error of an engine question that got no answer (info, the step runtime): a 503 to clients. */
function engineUnavailable(err: unknown): RuntimeUnavailableError {
  return new RuntimeUnavailableError(`container engine unavailable: ${(err as Error).message}`);
}

/** A string of the engine's info answer: what it sent, as a string, or the fallback when it sent nothing. */
function engineString(value: unknown, fallback: string): string {
  // eslint-disable-next-line @typescript-eslint/no-base-to-string -- the engine's JSON, stringified as it came (the API documents a string)
  return String(value ?? fallback);
}

/** The parts of the Engine's image answer that svc reads (dockerode's types make Config required). */
interface EngineImage {
  Id: string;
  Config?: { Entrypoint?: string[] | string | null; Cmd?: string[] | string | null; StopSignal?: string | null } | null;
}

/** What an image on this engine says to run (its ENTRYPOINT and CMD) and its STOPSIGNAL; the image must be there. */
export async function imageCommand(docker: Docker, image: string): Promise<ImageCommand> {
  return commandOf(await docker.getImage(image).inspect());
}

/** What an inspect of an image says it runs. */
function commandOf(image: EngineImage): ImageCommand {
  // An image's config may have no Config at all (an OCI image pushed without one).
  const config = image.Config ?? {};
  return { entrypoint: asArgv(config.Entrypoint), cmd: asArgv(config.Cmd), stopSignal: typeof config.StopSignal === 'string' ? config.StopSignal : null };
}

/** Image commands an ImageCommands keeps at most (the oldest goes first). */
const IMAGE_COMMANDS_KEPT = 256;
/**
 * A command larger than this is not kept (its words' characters, one more a word, and its stop
 * signal's): the image's own, a tenant's to make as large as it likes.
 */
const IMAGE_COMMAND_KEPT_MAX_SIZE = 16 * 1024;

/**
 * What images say to run, kept by image ID. An image's ID is a digest of its content (of its
 * configuration; with the containerd image store, of its manifest or index, which name the
 * configuration by its digest), so what an ID says to run never changes: a kept answer cannot be
 * stale. A deploy resolves its image to an ID (imageId) and creates the container from that ID a
 * moment later: the command comes from the first answer instead of a second inspect (1-2 ms of
 * every deploy's way to its container, bench/build). Whether the image is still there is the
 * create's to find, as the inspect's was. At most IMAGE_COMMANDS_KEPT of at most
 * IMAGE_COMMAND_KEPT_MAX_SIZE each: a few megabytes whatever tenants' images say.
 */
export class ImageCommands {
  private readonly byId = new Map<string, ImageCommand>();

  constructor(private readonly max = IMAGE_COMMANDS_KEPT) {}

  /** Keeps what an inspect of an image answered; returns its command. */
  keep(image: EngineImage): ImageCommand {
    const command = commandOf(image);
    const size = [...(command.entrypoint ?? []), ...(command.cmd ?? [])].reduce((n, word) => n + 1 + word.length, command.stopSignal?.length ?? 0);
    if (size > IMAGE_COMMAND_KEPT_MAX_SIZE) return command;
    this.byId.delete(image.Id);
    this.byId.set(image.Id, command);
    for (const oldest of this.byId.keys()) {
      if (this.byId.size <= this.max) break;
      this.byId.delete(oldest);
    }
    return command;
  }

  /** The command of `image`: the kept one when `image` is an ID already answered, else the engine's (then kept). */
  async of(docker: Docker, image: string): Promise<ImageCommand> {
    return this.byId.get(image) ?? this.keep(await docker.getImage(image).inspect());
  }
}

/**
 * Why a tenant's network could not be made, said so that its tenant and the operator can act:
 * the engine's own words when its address pools are full name neither the cause nor the fix.
 */
export function tenantNetworkError(err: unknown): unknown {
  // Engine 20.10's words, and those of later engines (25 and on).
  if (!(err instanceof Error) || !/could not find an available, non-overlapping IPv4 address pool|all predefined address pools have been fully subnetted/i.test(err.message)) return err;
  return new Error(
    "the host's container engine has no address range left for another tenant network (one per tenant; Docker's default pools hold about 30): the operator widens default-address-pools in the engine's daemon.json (README, Resource safety)",
    { cause: err },
  );
}

/**
 * The parts of the Engine's container answer that svc reads. The engine leaves out (or sends
 * null for) what a container does not have, such as exposed ports or labels, where dockerode's
 * types say they are always there.
 */
interface EngineContainer {
  Id: string;
  Name: string;
  State: { Status: string; Running: boolean; ExitCode: number; FinishedAt?: string };
  Config: { ExposedPorts?: Record<string, unknown> | null; Labels?: Record<string, string> | null };
  NetworkSettings: { Networks?: Record<string, { IPAddress?: string }> | null };
}

/** The parts of the Engine's stats answer that svc reads (cgroup v1 and v2 alike). */
interface EngineStats {
  cpu_stats?: { cpu_usage?: { total_usage?: number } };
  memory_stats?: { usage?: number; stats?: Record<string, number> };
  networks?: Record<string, { rx_bytes?: number; tx_bytes?: number }>;
  blkio_stats?: { io_service_bytes_recursive?: Array<{ op: string; value: number }> | null };
}

export function workloadStats(s: EngineStats): WorkloadStats {
  const mem = s.memory_stats ?? {};
  // The working set, as `docker stats` shows it: page cache that can be dropped is not counted
  // (inactive_file on cgroup v2, total_inactive_file on v1).
  const inactive = mem.stats?.inactive_file ?? mem.stats?.total_inactive_file ?? 0;
  let rx = 0;
  let tx = 0;
  for (const n of Object.values(s.networks ?? {})) {
    rx += n.rx_bytes ?? 0;
    tx += n.tx_bytes ?? 0;
  }
  let read = 0;
  let write = 0;
  for (const e of s.blkio_stats?.io_service_bytes_recursive ?? []) {
    const op = e.op.toLowerCase();
    if (op === 'read') read += e.value;
    else if (op === 'write') write += e.value;
  }
  return {
    cpuMicros: Math.floor((s.cpu_stats?.cpu_usage?.total_usage ?? 0) / 1000),
    memoryBytes: Math.max(0, (mem.usage ?? 0) - inactive),
    netRxBytes: rx,
    netTxBytes: tx,
    blockReadBytes: read,
    blockWriteBytes: write,
  };
}

/** The Engine API's 404 (no such container, image, volume, service...). */
export function isNotFound(err: unknown): boolean {
  return (err as { statusCode?: number }).statusCode === 404;
}

/**
 * What the engine's "OCI runtime exec failed: ..." means for the caller. A container stopped or
 * paused under the exec is not running (runc: "in state stopped"); so is a gVisor sandbox torn down
 * while the exec started: the runtime's control connection to it is reset or closed ("urpc method
 * "containerManager.ExecuteAsync" failed: connection reset by peer", EOF, broken pipe), which is
 * how a stop racing an exec arrives under runsc (the sandbox is gone or going; there is nothing
 * left to exec in). Anything else (a missing working directory, a missing binary) is the exec's.
 * gVisor quotes the tenant's command in the message: it is cut out before matching, so that no
 * command can word its way into a 409.
 */
export function execStartFailure(message: string): WorkloadNotRunningError | ExecNotStartedError {
  const engineWords = message.replace(/executing command ".*" in sandbox:/s, 'executing command in sandbox:');
  if (/\bin state (stopped|paused)\b|\bnot running\b/i.test(engineWords)) return new WorkloadNotRunningError(message);
  if (/\burpc method "[^"]*" failed: (connection reset by peer|EOF|broken pipe)\b/.test(engineWords)) return new WorkloadNotRunningError(message);
  return new ExecNotStartedError(message);
}

/** The engine's FinishedAt: RFC 3339, or the zero time (0001-01-01) for a container that never stopped. */
function finishedAtMs(raw: string | undefined): number | null {
  const ms = raw ? Date.parse(raw) : Number.NaN;
  return Number.isFinite(ms) && ms > 0 ? ms : null;
}
