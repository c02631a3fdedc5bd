// The runtime: the only module that talks to the container engine. Domain code sees this
// interface, never dockerode, so that a Docker Swarm implementation can stand in later.

export const SANDBOX_RUNTIME = 'runsc';
/** Every tenant gets its own bridge network named with this prefix. */
export const TENANT_NETWORK_PREFIX = 'tenant-';

export interface EngineInfo {
  version: string;
  /** OCI runtimes the engine has registered (runc, runsc, ...). */
  runtimes: string[];
  /** The engine's data root, e.g. /var/lib/docker. */
  dataRoot: string;
}

export interface EngineStorage {
  imagesBytes: number;
  containersBytes: number;
  volumesBytes: number;
  buildCacheBytes: number;
}

export interface Runtime {
  /** Engine version and capabilities; throws RuntimeUnavailableError when no engine answers. */
  info(): Promise<EngineInfo>;
  /** The version string of the sandbox runtime when the engine has it, else null. */
  sandboxVersion(): Promise<string | null>;
  storage(): Promise<EngineStorage>;
  countNetworks(prefix: string): Promise<number>;
}

export class RuntimeUnavailableError extends Error {}

export { DockerRuntime } from './docker.js';
