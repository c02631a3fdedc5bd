// CPU fairness on the engine's host (issue 18). A tenant's CPU quota (2.0 cores by default) can
// be the whole machine, and the limits of its containers are caps, not priorities: one tenant
// busy at its quota took the cores from svcd and from everyone else (bench/soak). So every
// tenant workload (service, database, board, environment, build step) runs in a cgroup of its
// tenant, and all of those sit under one parent that svcd gives a low CPU weight:
//
//   <cgroup root>/svc-tenants            weight --tenant-cpu-weight (10; the host's default is 100)
//   <cgroup root>/svc-tenants/<tenant>   default weight: tenants share equally, whatever their
//                                        number of containers
//   .../<tenant>/<container>             the engine's own group, with the workload's CPU limit
//
// Weights only matter under contention: an idle machine is the tenants' to use up to their
// quota. When svcd, the engine or anything else outside the tenants' part wants CPU, it comes
// first (ten to one by default), and what is left is shared by tenant, not by container.
//
// The engine creates the groups (its `CgroupParent`, the build API's `cgroupparent`) under its
// cgroupfs driver; svcd, on the engine's host like the egress firewall (host-firewall.ts), sets
// the parent's weight and removes a tenant's empty group when the tenant's last workload is gone
// (the engine leaves it behind). Under the systemd cgroup driver the parent would have to be a
// slice; svc does not place workloads then and says so once (README, Resource safety, "CPU
// by tenant, after svcd"). Nor does it when the parent could not be set up (svcd not root in
// --dev): a tenant group under the default weight would only leave directories behind.
import { access, mkdir, readdir, readFile, rmdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';

export const TENANT_CGROUP_PARENT = 'svc-tenants';
/** The weight svcd gives the tenants' parent by default, on cgroup v2's scale (the host's default is 100). */
export const DEFAULT_TENANT_CPU_WEIGHT = 10;
/** cgroup v2's range of cpu.weight. */
export const CPU_WEIGHT_RANGE = { min: 1, max: 10_000 } as const;

/** What install() found and did, for svcd's start-up log. */
export interface CgroupInstall {
  layout: 'v1' | 'v2';
  /** The parent's directory in the cpu hierarchy and the value written there. */
  path: string;
  setting: string;
}

export class TenantCgroupError extends Error {}

/** A tenant's group as the engine names it under its cgroupfs driver (a path from the hierarchy's root). */
export function tenantCgroupPath(tenantId: string): string {
  // Tenant ids are hex (ids.ts), and the warm pool's pseudo-tenant a plain word: never a path.
  if (!/^[a-z0-9-]+$/.test(tenantId)) throw new TenantCgroupError(`not a tenant id: ${JSON.stringify(tenantId)}`);
  return `/${TENANT_CGROUP_PARENT}/${tenantId}`;
}

/** cgroup v1's cpu.shares for a cgroup v2 cpu.weight (1024 is v1's default as 100 is v2's). */
export function sharesForWeight(weight: number): number {
  return Math.max(2, Math.round((weight * 1024) / 100));
}

export class TenantCgroups {
  /** Set once install() succeeded: workloads are placed in tenant groups only then. */
  installed = false;

  constructor(
    readonly weight: number,
    /** Where the host mounts its cgroups; a directory of the same shape in the unit tests. */
    private readonly root = '/sys/fs/cgroup',
  ) {
    if (!Number.isInteger(weight) || weight < CPU_WEIGHT_RANGE.min || weight > CPU_WEIGHT_RANGE.max) {
      throw new TenantCgroupError(`tenant CPU weight must be an integer from ${CPU_WEIGHT_RANGE.min} to ${CPU_WEIGHT_RANGE.max}`);
    }
  }

  /**
   * Creates the tenants' parent and sets its weight. Idempotent: every svcd on the host writes
   * the same value at start. Throws TenantCgroupError naming what could not be done.
   */
  async install(): Promise<CgroupInstall> {
    try {
      let done: CgroupInstall | null = null;
      if (await exists(join(this.root, 'cgroup.controllers'))) done = await this.installV2();
      else if (await exists(join(this.root, 'cpu', 'cpu.shares'))) done = await this.installV1();
      if (done) {
        this.installed = true;
        return done;
      }
    } catch (err) {
      throw new TenantCgroupError(`the tenants' CPU group could not be set up under ${this.root}: ${(err as Error).message}`);
    }
    throw new TenantCgroupError(`no cgroup cpu controller found under ${this.root}`);
  }

  /**
   * Removes the tenant's group from every hierarchy once it is empty: the engine removes a
   * container's own group but not the parent it created for it. A group still in use (a
   * workload started meanwhile) is refused by the kernel and stays; so is nothing to remove.
   * Never throws: it runs after a delete has removed everything else, and an empty directory
   * left behind (EACCES, EROFS) must not turn that delete into an error.
   */
  async releaseTenant(tenantId: string): Promise<void> {
    const relative = tenantCgroupPath(tenantId).slice(1);
    const hierarchies = (await exists(join(this.root, 'cgroup.controllers')))
      ? [this.root]
      : await readdir(this.root).then(
          (names) => names.map((h) => join(this.root, h)),
          () => [],
        );
    for (const hierarchy of hierarchies) await rmdir(join(hierarchy, relative)).catch(() => {});
  }

  private async installV1(): Promise<CgroupInstall> {
    // `cpu` may be a link to a joint `cpu,cpuacct` mount: the same directory either way.
    const path = join(this.root, 'cpu', TENANT_CGROUP_PARENT);
    await mkdir(path, { recursive: true });
    const setting = `cpu.shares=${sharesForWeight(this.weight)}`;
    await writeFile(join(path, 'cpu.shares'), String(sharesForWeight(this.weight)));
    return { layout: 'v1', path, setting };
  }

  private async installV2(): Promise<CgroupInstall> {
    // The cpu controller must be handed down to the parent and from it to the tenants' groups.
    await enableCpuController(this.root);
    const path = join(this.root, TENANT_CGROUP_PARENT);
    await mkdir(path, { recursive: true });
    await enableCpuController(path);
    await writeFile(join(path, 'cpu.weight'), String(this.weight));
    return { layout: 'v2', path, setting: `cpu.weight=${this.weight}` };
  }
}

async function enableCpuController(dir: string): Promise<void> {
  const enabled = (await readFile(join(dir, 'cgroup.subtree_control'), 'utf8')).split(/\s+/);
  if (!enabled.includes('cpu')) await writeFile(join(dir, 'cgroup.subtree_control'), '+cpu');
}

async function exists(path: string): Promise<boolean> {
  return access(path).then(
    () => true,
    () => false,
  );
}
