import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import Docker from 'dockerode';
import {
  RuntimeUnavailableError,
  SANDBOX_RUNTIME,
  type EngineInfo,
  type EngineStorage,
  type Runtime,
} from './index.js';

const execFileAsync = promisify(execFile);

/** Parses `unix:///var/run/docker.sock` or `tcp://host:port` into dockerode options. */
export function dockerOptions(host: string, timeoutMs: number): Docker.DockerOptions {
  if (host.startsWith('unix://')) return { socketPath: host.slice('unix://'.length), timeout: timeoutMs };
  const url = new URL(host.replace(/^tcp:/, 'http:'));
  return { host: url.hostname, port: Number(url.port || 2375), protocol: 'http', timeout: timeoutMs };
}

interface DfResponse {
  LayersSize?: number;
  Containers?: Array<{ SizeRw?: number }> | null;
  Volumes?: Array<{ UsageData?: { Size?: number } | null }> | null;
  BuildCache?: Array<{ Size?: number }> | null;
}

/** Runtime over a Docker Engine's HTTP API (dockerode), never the docker CLI. */
export class DockerRuntime implements Runtime {
  private readonly docker: Docker;
  private sandboxVersionCache: { path: string; version: string } | null = null;

  constructor(host: string, timeoutMs = 5_000) {
    this.docker = new Docker(dockerOptions(host, timeoutMs));
  }

  async info(): Promise<EngineInfo> {
    try {
      const [version, info] = await Promise.all([this.docker.version(), this.docker.info()]);
      const runtimes = Object.keys((info as { Runtimes?: Record<string, unknown> }).Runtimes ?? {});
      return { version: version.Version, runtimes, dataRoot: String(info.DockerRootDir ?? '') };
    } catch (err) {
      throw new RuntimeUnavailableError(`container engine unavailable: ${(err as Error).message}`);
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
    const df = (await this.docker.df()) as DfResponse;
    const sum = (xs: number[]) => xs.reduce((a, b) => a + (b > 0 ? b : 0), 0);
    return {
      imagesBytes: df.LayersSize ?? 0,
      containersBytes: sum((df.Containers ?? []).map((c) => c.SizeRw ?? 0)),
      volumesBytes: sum((df.Volumes ?? []).map((v) => v.UsageData?.Size ?? 0)),
      buildCacheBytes: sum((df.BuildCache ?? []).map((b) => b.Size ?? 0)),
    };
  }

  async countNetworks(prefix: string): Promise<number> {
    // The engine's name filter matches substrings; keep only true prefixes.
    const nets = await this.docker.listNetworks({ filters: { name: [prefix] } });
    return nets.filter((n) => n.Name.startsWith(prefix)).length;
  }
}
