// The first 200 of a deployment, as a user's browser would get it: the benches poll for it every
// 5 ms (bench/deploy, bench/build's directory part), through svc's proxy (a Host header) or at a
// container's own address; and the baseline those benches set beside svc, a container started
// with the bare Engine API as svc would start a service.
import { request } from 'node:http';
import { dirname } from 'node:path';
import { docker } from '../packages/svcd/test/images.js';
import { engineCpuLimit, workloadLimits } from '../packages/svcd/src/runtime/index.js';
import { DEFAULT_TENANT_CPU_WEIGHT, TENANT_CGROUP_PARENT, TenantCgroups, tenantCgroupPath } from '../packages/svcd/src/runtime/tenant-cgroups.js';
import { DEFAULT_QUOTAS } from '../packages/svcd/src/tenants/tenants.js';

/** The status of one GET (0: no answer within 2 s, or the connection failed). */
export function answerStatus(host: string, port: number, path: string, hostHeader?: string): Promise<number> {
  return new Promise((resolve) => {
    const req = request({ host, port, path, agent: false, timeout: 2_000, headers: hostHeader ? { host: hostHeader } : {} }, (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode ?? 0));
    });
    req.on('timeout', () => req.destroy());
    req.on('error', () => resolve(0));
    req.end();
  });
}

/**
 * Requests one at a time, back to back, through the proxy to a host (a redeploy's load: each
 * answer other than 200 counts as failed), until `stop`, which resolves once the last one ended.
 * `counts` is live, for progress lines.
 */
export function backToBack(port: number, hostHeader: string, path = '/index.html'): { counts: { requests: number; failed: number }; stop(): Promise<void> } {
  const counts = { requests: 0, failed: 0 };
  const loading = { on: true };
  const running = (async () => {
    while (loading.on) {
      const status = await answerStatus('127.0.0.1', port, path, hostHeader);
      counts.requests++;
      if (status !== 200) counts.failed++;
    }
  })();
  return {
    counts,
    stop: async () => {
      loading.on = false;
      await running;
    },
  };
}

/** Resolves at the first 200 of `path` (at most 60 s). */
export async function until200(host: string, port: number, path: string, hostHeader?: string): Promise<void> {
  const deadline = Date.now() + 60_000;
  while ((await answerStatus(host, port, path, hostHeader)) !== 200) {
    if (Date.now() > deadline) throw new Error('no 200 within 60 s');
    await new Promise((r) => setTimeout(r, 5));
  }
}

/** What svc gives each service of a tenant on the default quota (runtime/workload-policy.ts). */
const limits = workloadLimits(DEFAULT_QUOTAS);

/** The bare side's stand-in tenant, for its CPU group. */
const BARE_TENANT = 'svc-bench-bare';

/**
 * The CPU group for the bare side's containers: a tenant's group beside the one svc put the
 * tenant's running container in (runtime/tenant-cgroups.ts: under `svc-tenants`, weighted 10
 * against the host's 100, so that svcd and the proxy come first), read from that container, so
 * that it is what svc does in this run (none when svc places none: not root, another cgroup
 * driver, --tenant-cpu-weight off). Like the CPU quota, it is part of what svc gives a service:
 * without it the bare container outweighs svc's ten to one while the bench polls svc's proxy
 * every 5 ms (bench/deploy in the README).
 */
export async function bareCpuGroup(tenantId: string): Promise<string | null> {
  const [running] = await docker.listContainers({ filters: { label: [`svc.tenant=${tenantId}`], status: ['running'] } });
  if (!running) throw new Error(`no running container of tenant ${tenantId} to read svc's CPU group from`);
  const parent = (await docker.getContainer(running.Id).inspect()).HostConfig.CgroupParent ?? '';
  if (parent === '') return null;
  // Where TenantCgroups.releaseTenant looks for it once the bare containers are gone.
  if (dirname(parent) !== `/${TENANT_CGROUP_PARENT}`) throw new Error(`svc's container is in CPU group ${parent}, not under /${TENANT_CGROUP_PARENT}`);
  return tenantCgroupPath(BARE_TENANT);
}

/**
 * By hand with the bare Engine API: create and start `image` on `network` with the runtime, the
 * capabilities, memory and CPU svc gives a service, then its first 200 of `path` on port 8000 at
 * its own address. Resolves to a function that removes it (not part of the measurement).
 */
export async function bareFirstAnswer(image: string, network: string, runtime: string, path: string, cgroup: string | null): Promise<() => Promise<void>> {
  const ct = await docker.createContainer({
    Image: image,
    HostConfig: {
      NetworkMode: network,
      Runtime: runtime,
      CapDrop: ['ALL'],
      SecurityOpt: ['no-new-privileges'],
      // The memory and CPU a tenant's service gets under the default quota, the CPU quota over
      // svc's period: it also holds gVisor's own start (the sandbox's processes are in the
      // container's group).
      Memory: limits.memoryMb * 1024 * 1024,
      MemorySwap: limits.memoryMb * 1024 * 1024,
      ...engineCpuLimit(limits.cpus),
      ...(cgroup ? { CgroupParent: cgroup } : {}),
    },
  });
  await ct.start();
  const ip = Object.values((await ct.inspect()).NetworkSettings.Networks)[0]?.IPAddress ?? '';
  await until200(ip, 8000, path);
  return async () => {
    await ct.remove({ force: true });
    // The engine leaves the tenant's group behind, as for svc's tenants (svcd removes theirs).
    if (cgroup) await new TenantCgroups(DEFAULT_TENANT_CPU_WEIGHT).releaseTenant(BARE_TENANT);
  };
}
