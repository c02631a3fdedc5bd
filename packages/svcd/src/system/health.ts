import { statfs } from 'node:fs/promises';
import type { HealthDetail } from '@svc/contract';
import type { Logger } from 'pino';
import type { Clock } from '../clock.js';
import { TENANT_NETWORK_PREFIX, type Runtime } from '../runtime/index.js';
import type { Store } from '../store/index.js';

/** What health detail asks of the tenant egress rules. */
export interface EgressRules {
  /** null when installed; otherwise what is missing. */
  missing(): Promise<string | null>;
}

export const HEALTH_CACHE_MS = 30_000;
export const DISK_DEGRADED_PERCENT = 90;
export const MAX_HEALTHY_TENANT_NETWORKS = 200;

const GB = 1024 ** 3;
type Disk = HealthDetail['disk'];
/** What health detail reports for a disk it could not read (the contract has no "unknown"). */
const UNREAD_DISK: Disk = { total_gb: 0, free_gb: 0, used_percent: 0 };

/** How full the disk holding a path is; rejects when it cannot be read. */
export type DiskReader = (path: string) => Promise<Disk>;

/** statfs of the path's file system, as the health detail reports it. */
export const statfsDisk: DiskReader = async (path) => {
  const s = await statfs(path);
  const total = s.blocks * s.bsize;
  // bavail (what an unprivileged writer may use) rather than bfree: it is what fills up first.
  const free = s.bavail * s.bsize;
  const round = (n: number) => Math.round(n * 100) / 100;
  return {
    total_gb: round(total / GB),
    free_gb: round(free / GB),
    used_percent: total === 0 ? 0 : round(((total - free) / total) * 100),
  };
};

export interface HealthOptions {
  store: Store;
  runtime: Runtime;
  clock: Clock;
  /** svcd's data dir: the disk its store and builds write to. */
  dataDir: string;
  egress: EgressRules;
  log?: Logger;
  /** statfs unless a test gives another. */
  readDisk?: DiskReader;
  /** The cluster's nodes (Swarm): how many, and how many are not ready. */
  cluster?: { health(): Promise<{ total: number; down: number }> };
}

/** GET /v1/system/health/detailed: gathered at most every 30 s unless asked fresh. */
export class Health {
  private cached: { atMs: number; detail: HealthDetail } | null = null;
  private inFlight: Promise<HealthDetail> | null = null;
  private readonly readDisk: DiskReader;

  constructor(private readonly o: HealthOptions) {
    this.readDisk = o.readDisk ?? statfsDisk;
  }

  async detail(fresh: boolean): Promise<HealthDetail> {
    if (!fresh && this.cached && this.o.clock.now() - this.cached.atMs < HEALTH_CACHE_MS) return this.cached.detail;
    // Concurrent callers share one gathering instead of each pinging the engine and the disk.
    this.inFlight ??= this.gather().finally(() => {
      this.inFlight = null;
    });
    return this.inFlight;
  }

  private async gather(): Promise<HealthDetail> {
    const { store, runtime: engine, clock, dataDir, egress, log } = this.o;
    const atMs = clock.now();
    const storeOk = await store.ping().then(
      () => true,
      () => false,
    );
    // svcd's own disk not readable is degraded: nothing says it is not full. (The engine's data
    // root below is read from svcd's host and may not be there: an engine elsewhere.)
    const disk = await this.readDisk(dataDir).catch((err: unknown) => {
      log?.warn({ err, dataDir }, 'the data dir disk could not be read');
      return null;
    });

    let runtime = { available: false, version: '' };
    let sandbox = { available: false, version: '' };
    let runtimeDisk: Disk = UNREAD_DISK;
    let storage = { images_size_bytes: 0, containers_size_bytes: 0, volumes_size_bytes: 0, build_cache_size_bytes: 0, total_size_gb: 0 };
    let networks = 0;
    try {
      const info = await engine.info();
      runtime = { available: true, version: info.version };
      // Each part on its own: one the engine refuses (a df while another runs) leaves the others true.
      const [sandboxVersion, usage, nets, rdisk] = await Promise.allSettled([
        engine.sandboxVersion(),
        engine.storage(),
        engine.countNetworks(TENANT_NETWORK_PREFIX),
        this.readDisk(info.dataRoot),
      ]);
      if (sandboxVersion.status === 'fulfilled') sandbox = { available: sandboxVersion.value !== null, version: sandboxVersion.value ?? '' };
      if (usage.status === 'fulfilled') {
        const u = usage.value;
        const total = u.imagesBytes + u.containersBytes + u.volumesBytes + u.buildCacheBytes;
        storage = {
          images_size_bytes: u.imagesBytes,
          containers_size_bytes: u.containersBytes,
          volumes_size_bytes: u.volumesBytes,
          build_cache_size_bytes: u.buildCacheBytes,
          total_size_gb: Math.round((total / GB) * 1000) / 1000,
        };
      } else log?.warn({ err: usage.reason }, 'the engine storage could not be read');
      if (nets.status === 'fulfilled') networks = nets.value;
      if (rdisk.status === 'fulfilled') runtimeDisk = rdisk.value;
    } catch {
      // The engine not answering is reported as available: false, not as an error of this route.
    }

    // Every tenant reads this detail: what iptables said (paths, host addresses) goes to the log.
    const egressMissing = await egress.missing().catch((err: unknown) => {
      log?.warn({ err }, 'egress firewall rules could not be read');
      return 'rules could not be read (see the svcd log)';
    });

    const nodes = (await this.o.cluster?.health().catch((err: unknown) => {
      log?.warn({ err }, 'the cluster nodes could not be read');
      return null;
    })) ?? { total: 0, down: 0 };

    const degraded =
      nodes.down > 0 ||
      egressMissing !== null ||
      !storeOk ||
      disk === null ||
      disk.used_percent > DISK_DEGRADED_PERCENT ||
      runtimeDisk.used_percent > DISK_DEGRADED_PERCENT ||
      networks > MAX_HEALTHY_TENANT_NETWORKS;
    const detail: HealthDetail = {
      status: degraded ? 'degraded' : 'ok',
      runtime,
      sandbox,
      store: { available: storeOk, dialect: store.dialect },
      disk: disk ?? UNREAD_DISK,
      runtime_disk: runtimeDisk,
      runtime_storage: storage,
      proxy_networks: networks,
      egress_firewall: { installed: egressMissing === null, detail: egressMissing ?? 'tenant workloads reach the internet and their own network only' },
      nodes,
      checked_at: Math.floor(atMs / 1000),
    };
    this.cached = { atMs, detail };
    return detail;
  }
}
