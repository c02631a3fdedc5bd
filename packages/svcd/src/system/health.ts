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

async function diskOf(path: string): Promise<Disk> {
  try {
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
  } catch {
    return { total_gb: 0, free_gb: 0, used_percent: 0 };
  }
}

/** GET /v1/system/health/detailed: gathered at most every 30 s unless asked fresh. */
export class Health {
  private cached: { atMs: number; detail: HealthDetail } | null = null;
  private inFlight: Promise<HealthDetail> | null = null;

  constructor(
    private readonly store: Store,
    private readonly runtime: Runtime,
    private readonly clock: Clock,
    private readonly dataDir: string,
    private readonly egress: EgressRules,
    private readonly log?: Logger,
  ) {}

  async detail(fresh: boolean): Promise<HealthDetail> {
    if (!fresh && this.cached && this.clock.now() - this.cached.atMs < HEALTH_CACHE_MS) return this.cached.detail;
    // Concurrent callers share one gathering instead of each pinging the engine and the disk.
    this.inFlight ??= this.gather().finally(() => {
      this.inFlight = null;
    });
    return this.inFlight;
  }

  private async gather(): Promise<HealthDetail> {
    const atMs = this.clock.now();
    const storeOk = await this.store.ping().then(
      () => true,
      () => false,
    );
    const disk = await diskOf(this.dataDir);

    let runtime = { available: false, version: '' };
    let sandbox = { available: false, version: '' };
    let runtimeDisk: Disk = { total_gb: 0, free_gb: 0, used_percent: 0 };
    let storage = { images_size_bytes: 0, containers_size_bytes: 0, volumes_size_bytes: 0, build_cache_size_bytes: 0, total_size_gb: 0 };
    let networks = 0;
    try {
      const info = await this.runtime.info();
      runtime = { available: true, version: info.version };
      const [sandboxVersion, usage, nets, rdisk] = await Promise.all([
        this.runtime.sandboxVersion(),
        this.runtime.storage(),
        this.runtime.countNetworks(TENANT_NETWORK_PREFIX),
        diskOf(info.dataRoot),
      ]);
      sandbox = { available: sandboxVersion !== null, version: sandboxVersion ?? '' };
      const total = usage.imagesBytes + usage.containersBytes + usage.volumesBytes + usage.buildCacheBytes;
      storage = {
        images_size_bytes: usage.imagesBytes,
        containers_size_bytes: usage.containersBytes,
        volumes_size_bytes: usage.volumesBytes,
        build_cache_size_bytes: usage.buildCacheBytes,
        total_size_gb: Math.round((total / GB) * 1000) / 1000,
      };
      networks = nets;
      runtimeDisk = rdisk;
    } catch {
      // The engine not answering is reported as available: false, not as an error of this route.
    }

    // Every tenant reads this detail: what iptables said (paths, host addresses) goes to the log.
    const egressMissing = await this.egress.missing().catch((err: unknown) => {
      this.log?.warn({ err }, 'egress firewall rules could not be read');
      return 'rules could not be read (see the svcd log)';
    });

    const degraded =
      egressMissing !== null ||
      !storeOk ||
      disk.used_percent > DISK_DEGRADED_PERCENT ||
      runtimeDisk.used_percent > DISK_DEGRADED_PERCENT ||
      networks > MAX_HEALTHY_TENANT_NETWORKS;
    const detail: HealthDetail = {
      status: degraded ? 'degraded' : 'ok',
      runtime,
      sandbox,
      store: { available: storeOk, dialect: this.store.dialect },
      disk,
      runtime_disk: runtimeDisk,
      runtime_storage: storage,
      proxy_networks: networks,
      egress_firewall: { installed: egressMissing === null, detail: egressMissing ?? 'tenant workloads reach the internet and their own network only' },
      checked_at: Math.floor(atMs / 1000),
    };
    this.cached = { atMs, detail };
    return detail;
  }
}
