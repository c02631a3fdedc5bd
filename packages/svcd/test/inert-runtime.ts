// A container engine that runs nothing, for tests about records rather than containers (quotas,
// host names): every call answers at once, a workload "exits" as soon as it is started (so a
// service's deploy fails fast, with nothing left to clean up), and an environment's container
// counts as started (its create answers 201).
import { Readable } from 'node:stream';
import type { Runtime, WorkloadInfo } from '../src/runtime/index.js';

export function inertRuntime(): Runtime {
  let started = 0;
  const exited = (id: string): WorkloadInfo => ({ id, name: id, state: 'exited', exitCode: 1, labels: {}, address: null });
  return {
    info: async () => ({ version: 'inert', runtimes: ['runc'], defaultRuntime: 'runc', dataRoot: '/', cgroupDriver: 'cgroupfs' }),
    sandboxVersion: async () => null,
    storage: async () => ({ imagesBytes: 0, containersBytes: 0, volumesBytes: 0, buildCacheBytes: 0 }),
    diskUsage: async () => ({ workloads: [], images: [] }),
    countNetworks: async () => 0,
    close: async () => {},
    releaseTenant: async () => true,
    hasImage: async () => true,
    imageId: async (image: string) => `sha256:inert-${image}`,
    baseImage: async (image: string) => ({ id: `sha256:inert-${image}`, triggers: [] }),
    stepRuntime: async () => 'runc',
    pullImage: async () => {},
    buildImage: async () => {
      throw new Error('the inert engine builds nothing');
    },
    pushImage: async () => {
      throw new Error('the inert engine pushes nothing');
    },
    removeVolume: async () => {},
    removeImage: async () => {},
    removeRepository: async () => {},
    capabilities: async () => ({ sandbox: false, warmPool: false, agent: false, addressable: true, allocatedPorts: false, setAside: true, replicas: false }),
    // A workload with a port "exits" before it is ready; one without (an environment) runs.
    apply: async ({ spec }) => {
      const ref = `inert-${++started}`;
      if (spec.port !== undefined) throw new Error('container exited with code 1 before it was ready');
      return { ref, endpoint: { host: '192.0.2.1', port: null } };
    },
    start: async () => null,
    stop: async () => {},
    remove: async () => {},
    inspect: async (id) => exited(id),
    list: async () => [],
    stats: async () => null,
    assign: async () => null,
    exec: async () => ({ exitCode: 0, stdout: '', stderr: '', truncated: false, timedOut: false, durationMs: 0 }),
    logs: async () => Readable.from([]),
    events: (signal) => ({
      async *[Symbol.asyncIterator]() {
        await new Promise<void>((resolve) => signal.addEventListener('abort', () => resolve(), { once: true }));
      },
    }),
  };
}
