// What every workload of a tenant runs with, whoever starts it (services, builds, databases, the
// task board, environments): its share of the tenant's quota, and whether it runs under gVisor.
// The rules live beside the engine code they configure, not in one of the domain modules that use
// them.
import type { Clock } from '../clock.js';
import type { WorkloadDriver } from './driver.js';

const PIDS_LIMIT = 256;
const MIN_MEMORY_MB = 64;
/** How long the driver's answer is trusted (the engine's runtimes change only when it restarts). */
const CAPABILITIES_TTL_MS = 60_000;

/** The tenant's quota fields a workload's limits come from (the store's tenant row has them). */
export interface TenantQuota {
  max_services: number;
  max_memory_mb: number;
  max_cpu_cores: number;
}

export interface WorkloadLimits {
  memoryMb: number;
  cpus: number;
  pids: number;
}

/**
 * Each workload's share of the tenant's quota: memory and CPU divided by the service quota, so
 * that all of a tenant's services together never exceed what the tenant was given.
 */
export function workloadLimits(t: TenantQuota): WorkloadLimits {
  const share = Math.max(1, t.max_services);
  return {
    memoryMb: Math.max(MIN_MEMORY_MB, Math.floor(t.max_memory_mb / share)),
    cpus: Math.round((t.max_cpu_cores / share) * 1000) / 1000,
    pids: PIDS_LIMIT,
  };
}

/** --sandbox: auto uses gVisor when the engine has it, required always, off never. */
export type SandboxMode = 'auto' | 'required' | 'off';

/** Whether workloads run under gVisor now: the operator's mode and what the driver can (cached). */
export class SandboxPolicy {
  private known: { atMs: number; available: boolean } | null = null;

  constructor(
    private readonly mode: SandboxMode,
    private readonly driver: Pick<WorkloadDriver, 'capabilities'>,
    private readonly clock: Clock,
  ) {}

  async use(): Promise<boolean> {
    if (this.mode === 'off') return false;
    if (this.mode === 'required') return true;
    const now = this.clock.now();
    if (!this.known || now - this.known.atMs > CAPABILITIES_TTL_MS) {
      this.known = { atMs: now, available: (await this.driver.capabilities()).sandbox };
    }
    return this.known.available;
  }
}
