// A whole Runtime for svcd with no engine: the in-memory workload driver (held to the same
// contract as the Docker one, driver-conformance.ts) and an image store of its images. Builds are
// refused: tests that need them run on the real engine.
import { MemoryDriver, type MemoryImage } from '../src/runtime/memory/memory-driver.js';
import type { Runtime } from '../src/runtime/index.js';
import type { Clock, Timers } from '../src/clock.js';

/** `time`: the driver's clock and timers (a running ManualClock: its starts, exits and readiness deadlines in less real time); real time by default. */
export function memoryRuntime(registry: Record<string, MemoryImage>, time?: Clock & Timers): { runtime: Runtime; driver: MemoryDriver } {
  const driver = new MemoryDriver({ images: {}, registry, ...(time ? { clock: time, timers: time } : {}) });
  const refused = () => Promise.reject(new Error('the memory runtime builds and pushes nothing'));
  const runtime: Runtime = {
    // The driver's own methods, bound: they read its private state.
    capabilities: () => driver.capabilities(),
    apply: (r) => driver.apply(r),
    start: (ref) => driver.start(ref),
    stop: (ref) => driver.stop(ref),
    remove: (ref) => driver.remove(ref),
    removeVolume: (name) => driver.removeVolume(name),
    releaseTenant: (id) => driver.releaseTenant(id),
    inspect: (ref) => driver.inspect(ref),
    list: (filter) => driver.list(filter),
    events: (signal) => driver.events(signal),
    exec: (ref, spec) => driver.exec(ref, spec),
    logs: (ref, opts) => driver.logs(ref, opts),
    stats: (ref) => driver.stats(ref),
    assign: (ref, tenantId) => driver.assign(ref, tenantId),
    hasImage: (image) => driver.hasImage(image),
    imageId: (image) => driver.imageId(image),
    baseImage: (image) => Promise.resolve({ id: `sha256:memory-${image}`, triggers: [] }),
    stepRuntime: () => Promise.resolve('runc'),
    pullImage: (image) => driver.pullImage(image),
    buildImage: refused,
    pushImage: refused,
    removeImage: () => Promise.resolve(),
    removeRepository: () => Promise.resolve(),
    info: () => Promise.resolve({ version: 'memory', runtimes: ['runc'], defaultRuntime: 'runc', dataRoot: '/', cgroupDriver: 'cgroupfs' }),
    sandboxVersion: () => Promise.resolve(null),
    storage: () => Promise.resolve({ imagesBytes: 0, containersBytes: 0, volumesBytes: 0, buildCacheBytes: 0 }),
    diskUsage: () => Promise.resolve({ workloads: [], images: [] }),
    countNetworks: () => Promise.resolve(0),
    close: () => Promise.resolve(),
  };
  return { runtime, driver };
}
