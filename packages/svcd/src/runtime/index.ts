// The runtime: what svc's domain asks of a container engine (port.ts, types and the errors the
// domain maps) and the Docker Engine code behind it. The types live in port.ts so that the engine
// code imports them from there, not from this index that re-exports the engine code (a cycle).
export * from './port.js';
export { DockerRuntime, engineCpuLimit, workloadStats, type DockerRuntimeOptions } from './docker/docker-runtime.js';
export { SwarmRuntime, type SwarmRuntimeOptions } from './swarm/swarm-runtime.js';
export { probePasses } from './ready-wait.js';
export { DEFAULT_LOG_RATE, TenantInitMissingError, builtTenantInit, installTenantInit, type LogRate, type TenantInit } from './tenant-init.js';
export { FirewallError, HostFirewall, type EgressAllowance, type Iptables } from './host-firewall.js';
export { EGRESS_NODE_LABEL, NodeFirewalls, SANDBOX_NODE_LABEL, readNodeTenantInit, sandboxedByDefault, tenantInitNodeLabel, type NodeFirewallsOptions } from './swarm/node-firewall.js';
export { DEFAULT_TENANT_CPU_WEIGHT, TenantCgroupError, TenantCgroups, type CgroupInstall } from './tenant-cgroups.js';
export { SandboxPolicy, workloadLimits, type SandboxMode, type TenantQuota, type WorkloadLimits } from './workload-policy.js';
