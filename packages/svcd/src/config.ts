// svcd's configuration: every flag has an SVC_* environment variable (see main.ts for the flag
// table). Secrets (bootstrap, admin and master keys) come from the environment only, so they
// never show in `ps`. Start-up refusals live here and are tested on the built binary.
import { Resolver } from 'node:dns';
import { closeSync, constants, existsSync, fstatSync, openSync, readFileSync, statSync } from 'node:fs';
import { X509Certificate, createPrivateKey } from 'node:crypto';
import { createSecureContext } from 'node:tls';
import { join, resolve } from 'node:path';
import { isIP } from 'node:net';
import type { TemplateId } from '@svc/contract';
import { asciiHostname, isDnsName } from './domains/hostnames.js';
import { parseMasterKey } from './secrets/sealer.js';
import { isLoopbackRegistry } from './services/images.js';
import { BASE_IMAGE_REUSE_S } from './builds/recent-pulls.js';
import { parseEgressAllow, type EgressAllowance } from './runtime/host-firewall.js';
import type { EngineTls } from './runtime/docker/docker-runtime.js';
import { CPU_WEIGHT_RANGE, DEFAULT_TENANT_CPU_WEIGHT } from './runtime/tenant-cgroups.js';
import { DEFAULT_LOG_RATE, builtTenantInit, type LogRate } from './runtime/tenant-init.js';
import type { SandboxMode } from './runtime/workload-policy.js';
import { DEFAULT_RETENTION, RETENTION_DAYS_MAX, RETENTION_DAYS_MIN, type RetentionWindows } from './retention/rules.js';


export interface RateSetting {
  perSecond: number;
  burst: number;
}

export interface Config {
  listen: { host: string; port: number };
  dataDir: string;
  /** postgres://... selects PostgreSQL; otherwise SQLite in dataDir. */
  databaseUrl: string | null;
  baseDomain: string | null;
  /** Public reverse proxy: svcd runs Caddy bound here (--proxy-listen). */
  proxyListen: string | null;
  /** An operator's Caddy admin API instead (--caddy-admin). */
  caddyAdmin: string | null;
  /**
   * Where svcd answers its Caddy's questions: each route's address (DNS over UDP) and the page of
   * a route that does not answer (HTTP over TCP), on one loopback port (--proxy-answers-listen;
   * port 0: one picked at start).
   */
  proxyAnswersListen: { host: string; port: number };
  /** HTTPS on the proxy (--tls on): null when off. */
  tls: TlsConfig | null;
  /** The DNS servers asked for custom domains' TXT records (--dns-server); null: the system's. */
  dnsServers: string[] | null;
  dev: boolean;
  openRegistration: boolean;
  sandbox: SandboxMode;
  dockerHost: string;
  /** docker: one Docker Engine (--docker-host); swarm: a Docker Swarm whose manager --docker-host is. */
  runtime: 'docker' | 'swarm';
  /** With swarm: each node's own Engine API by its host name (--swarm-node NAME=URL,...), for exec and stats. */
  swarmNodes: Record<string, string>;
  /**
   * TLS material of the engines reached at https:// (--docker-host, --swarm-node), by their
   * address: read at start-up from <data-dir>/engine-tls/docker-host/ and .../nodes/<name>/.
   */
  engineTls: Record<string, EngineTls>;
  /** With swarm: the ports services and environments' agents are published on, on the node that runs them (--swarm-ports FROM-TO); one per service or environment. */
  swarmPorts: { from: number; to: number };
  /** With swarm: the image of the helper container svcd keeps on every node for its egress rules (--swarm-helper-image; runtime/swarm/node-firewall.ts). */
  swarmHelperImage: string;
  /**
   * With swarm: the IPv4 networks that reach the services' and databases' ports on the nodes
   * (--swarm-published-from: where every svcd and its proxy run); nobody else does
   * (runtime/swarm/published-ports.ts).
   */
  swarmPublishedFrom: string[];
  bootstrapTokens: string[];
  adminTokens: string[];
  /** SVC_MASTER_KEY; null means the key file in the data dir. */
  masterKey: string | null;
  logLevel: string;
  /** Builds may clone from loopback hosts (--dev, or --allow-loopback-git). */
  allowLoopbackGit: boolean;
  /** A loopback registry (HOST:PORT) that builds are pushed to (--build-registry). */
  buildRegistry: string | null;
  /** How long a tenant's pull of a base image serves its next builds (--base-image-reuse; 0: every build pulls). */
  baseImageReuseSeconds: number;
  /** Operator images of the managed databases (--postgres-image, --redis-image). */
  databaseImages: { postgres: string; redis: string };
  /** Loopback host ports databases are published on (--database-ports FROM-TO). */
  databasePorts: { from: number; to: number };
  /** The board's Node base image (--kanban-image). */
  kanbanImage: string;
  /** The built dashboard served at / (--dashboard-dir; default packages/dashboard/dist beside svcd). */
  dashboardDir: string;
  /** Host ports task boards are published on (--kanban-ports FROM-TO). */
  kanbanPorts: { from: number; to: number };
  /** The host address boards are published on and their url names (--kanban-address). */
  kanbanAddress: string;
  /** Operator images of the environment templates (--env-image-<template>). */
  environmentImages: Record<TemplateId, string>;
  /** Warm environments kept ready per template (--env-warm-pool). */
  environmentWarmPool: number;
  /** Warm environments kept for tenants that took one, at most, in all (--env-warm-reserve). */
  environmentWarmReserve: number;
  /** Extra CA certificates trusted for HTTPS git: builds and environment sync (--git-ca-file). */
  gitCaFile: string | null;
  /** The Prometheus endpoint's address (--metrics-listen; null: off). */
  metricsListen: { host: string; port: number } | null;
  /** A PostgreSQL of its own for usage samples and rollups (--metering-database-url; null: svc's store). */
  meteringDatabaseUrl: string | null;
  /** How often running containers are sampled (--metering-interval, seconds). */
  meteringIntervalMs: number;
  /** Rollups are kept this many days (--metering-retention-days). */
  meteringRetentionDays: number;
  /** How long activity, deployments, build logs and revoked keys are kept (--*-retention-days). */
  retention: RetentionWindows;
  /** Clones of builds and syncs (--scratch-dir, --scratch-budget-gb): outside the data dir, one budget. */
  scratch: { dir: string; budgetBytes: number };
  /** Private destinations tenant workloads may reach after all (--egress-allow CIDR[:PORT],...). */
  egressAllow: EgressAllowance[];
  /**
   * The CPU weight of all tenant workloads together against svcd, the engine and the rest of the
   * host (--tenant-cpu-weight, cgroup v2's scale 1-10000; null: off, runtime/tenant-cgroups.ts).
   */
  tenantCpuWeight: number | null;
  /**
   * svc-init, PID 1 of services and environments (--tenant-init), and the output a second their
   * logs take (--log-lines-per-second, --log-kib-per-second; runtime/tenant-init.ts).
   */
  tenantInit: { binary: string; rate: LogRate };
  /** Spec 8; only `--dev` may change them (benchmarks), production always uses the spec's. */
  rateLimits: { tenant: RateSetting; global: RateSetting };
  /**
   * A streamed answer (followed logs, a streamed exec) whose client has taken none of it for this
   * long, with more waiting, is ended (--stalled-reader-seconds; api/streaming.ts).
   */
  stalledReaderMs: number;
  /** Connections one client address may hold open to the API at once (--connections-per-client; api/connection-cap.ts). */
  connectionsPerClient: number;
  /**
   * How long the workload controller's claim on a workload holds without renewal: another svcd
   * takes a dead one's work over this long after it died (--workload-lease-seconds).
   */
  workloadLeaseMs: number;
}

export const DEFAULT_STALLED_READER_S = 60;
/** Connections one client address may hold open to the API at once (api/connection-cap.ts). */
export const DEFAULT_CONNECTIONS_PER_CLIENT = 256;
export const DEFAULT_WORKLOAD_LEASE_S = 30;

export class ConfigError extends Error {}

export const SPEC_RATE_LIMITS = {
  tenant: { perSecond: 100, burst: 200 },
  global: { perSecond: 500, burst: 1000 },
} as const;

export const MIN_TOKEN_LENGTH = 32;

/** Spec 8: a route that has not answered after this gets 503 (api/timeouts.ts; tests shorten it). */
export const REQUEST_TIMEOUT_MS = 30_000;

/** Let's Encrypt's production directory: --acme-ca's default. */
export const LETS_ENCRYPT_DIRECTORY = 'https://acme-v02.api.letsencrypt.org/directory';

export interface TlsConfig {
  /** The proxy's HTTPS address (--proxy-https-listen); --proxy-listen redirects to it. */
  httpsListen: string;
  acme: { directory: string; email: string | null; caRoot: string | null };
  /** Where svcd answers Caddy's on-demand question (--tls-ask-listen). */
  askListen: { host: string; port: number };
  /**
   * Where Caddy keeps certificates and the ACME account (--tls-storage; default <data-dir>/caddy-tls).
   * svcd processes that share one (a shared file system) share certificates: Caddy's lock files
   * in it make one order per name among them.
   */
  storageDir: string | null;
}

/** The raw option values as commander hands them over (flags, or their SVC_* variables). */
export interface RawOptions {
  listen: string;
  dataDir: string;
  databaseUrl?: string;
  baseDomain?: string;
  proxyListen?: string;
  caddyAdmin?: string;
  proxyAnswersListen?: string;
  tls?: string;
  proxyHttpsListen?: string;
  acmeCa?: string;
  acmeEmail?: string;
  acmeCaRoot?: string;
  tlsAskListen?: string;
  tlsStorage?: string;
  dnsServer?: string;
  dev?: boolean;
  openRegistration?: boolean;
  sandbox: string;
  dockerHost: string;
  runtime?: string;
  swarmNode?: string;
  logLevel: string;
  devRateLimit?: string;
  allowLoopbackGit?: boolean;
  buildRegistry?: string;
  baseImageReuse?: string;
  postgresImage?: string;
  redisImage?: string;
  databasePorts?: string;
  swarmPorts?: string;
  swarmHelperImage?: string;
  swarmPublishedFrom?: string;
  kanbanImage?: string;
  dashboardDir?: string;
  kanbanPorts?: string;
  kanbanAddress?: string;
  envImageDefault?: string;
  envImageNode?: string;
  envImagePython?: string;
  envImageGo?: string;
  envWarmPool?: string;
  envWarmReserve?: string;
  gitCaFile?: string;
  metricsListen?: string;
  meteringDatabaseUrl?: string;
  meteringInterval?: string;
  meteringRetentionDays?: string;
  scratchDir?: string;
  scratchBudgetGb?: string;
  activityRetentionDays?: string;
  deploymentRetentionDays?: string;
  buildLogRetentionDays?: string;
  keyRetentionDays?: string;
  egressAllow?: string;
  tenantCpuWeight?: string;
  tenantInit?: string;
  logLinesPerSecond?: string;
  stalledReaderSeconds?: string;
  connectionsPerClient?: string;
  workloadLeaseSeconds?: string;
  logKibPerSecond?: string;
}

/** Public defaults of the operator images (DECISIONS.md) and of the database port range. */
export const DEFAULT_POSTGRES_IMAGE = 'postgres:16-alpine';
export const DEFAULT_REDIS_IMAGE = 'redis:7-alpine';
export const DEFAULT_DATABASE_PORTS = '21000-21999';
/** Kubernetes' NodePort range, which operators keep out of their nodes' own services already. */
export const DEFAULT_SWARM_PORTS = '30000-32767';
/** busybox: sleep and chroot, all the node firewall's helper runs (runtime/swarm/node-firewall.ts). */
export const DEFAULT_SWARM_HELPER_IMAGE = 'busybox:1.36';
/** Node 24, the LTS svc itself runs on (DECISIONS.md named node:22 before Node 20's end of life). */
export const DEFAULT_KANBAN_IMAGE = 'node:24-bookworm-slim';
/** packages/dashboard/dist, from svcd's src or dist folder alike. */
export const DEFAULT_DASHBOARD_DIR = resolve(import.meta.dirname, '../../dashboard/dist');
/** The spec's range for task-board ports. */
export const DEFAULT_KANBAN_PORTS = '7100-9100';
export const DEFAULT_KANBAN_ADDRESS = '127.0.0.1';
/**
 * DECISIONS.md: the templates' public images. The node template stays on Node 22: it is the
 * tenants' development image (Node 22 is still maintained), not a runtime of svc's own.
 */
export const DEFAULT_ENVIRONMENT_IMAGES: Record<TemplateId, string> = {
  default: 'ubuntu:24.04',
  node: 'node:22-bookworm',
  python: 'python:3.12-bookworm',
  go: 'golang:1.23-bookworm',
};
export const DEFAULT_ENV_WARM_POOL = '0';
/** Each an idle container (~30 MB under gVisor here), and only with a pool. */
export const DEFAULT_ENV_WARM_RESERVE = '10';
/** Loopback: the operator's Prometheus scrapes from this host (or through a tunnel) unless told otherwise. */
export const DEFAULT_METRICS_LISTEN = '127.0.0.1:9464';
export const DEFAULT_METERING_INTERVAL_S = '30';
export const DEFAULT_METERING_RETENTION_DAYS = '90';
/** A disk of its own is best; /var/tmp survives reboots less often than it is cleaned (tmpfiles). */
export const DEFAULT_SCRATCH_DIR = '/var/tmp/svc-scratch';
/** Four build workers and two syncs at their 500 MB clone caps, with room to spare. */
export const DEFAULT_SCRATCH_BUDGET_GB = '8';

export function parseListen(value: string): { host: string; port: number } {
  const m = /^(.*):(\d+)$/.exec(value);
  if (!m) throw new ConfigError(`listen address must be HOST:PORT, got ${JSON.stringify(value)}`);
  const port = Number(m[2]);
  if (port > 65535) throw new ConfigError(`listen port out of range: ${port}`);
  const host = (m[1] ?? '').replace(/^\[(.*)\]$/, '$1') || '0.0.0.0';
  return { host, port };
}

export function parseTokenList(name: string, value: string | undefined): string[] {
  if (value === undefined || value.trim() === '') return [];
  const tokens = value.split(',').map((t) => t.trim()).filter((t) => t !== '');
  for (const t of tokens) {
    if (t.length < MIN_TOKEN_LENGTH) {
      throw new ConfigError(`${name}: every token must be at least ${MIN_TOKEN_LENGTH} characters`);
    }
  }
  return tokens;
}

/** `--dev-rate-limit TENANT_RPS:BURST,GLOBAL_RPS:BURST`, accepted only with --dev. */
function parseDevRateLimit(value: string): Config['rateLimits'] {
  const parts = value.split(',').map((p) => p.split(':').map(Number));
  const [tenant, global] = parts;
  const ok = (p: number[] | undefined): p is [number, number] =>
    p !== undefined && p.length === 2 && p.every((n) => Number.isFinite(n) && n > 0);
  if (parts.length !== 2 || !ok(tenant) || !ok(global)) {
    throw new ConfigError('--dev-rate-limit must be TENANT_RPS:BURST,GLOBAL_RPS:BURST with positive numbers');
  }
  return {
    tenant: { perSecond: tenant[0], burst: tenant[1] },
    global: { perSecond: global[0], burst: global[1] },
  };
}

export function buildConfig(raw: RawOptions, env: NodeJS.ProcessEnv): Config {
  const dev = raw.dev === true;
  const openRegistration = raw.openRegistration === true;
  if (openRegistration && !dev) throw new ConfigError('--open-registration is allowed only with --dev');
  if (!['auto', 'required', 'off'].includes(raw.sandbox)) {
    throw new ConfigError(`--sandbox must be auto, required or off, got ${JSON.stringify(raw.sandbox)}`);
  }
  const bootstrapTokens = parseTokenList('SVC_BOOTSTRAP_TOKEN', env.SVC_BOOTSTRAP_TOKEN);
  const adminTokens = parseTokenList('SVC_ADMIN_TOKEN', env.SVC_ADMIN_TOKEN);
  if (!dev && bootstrapTokens.length === 0) {
    throw new ConfigError(
      'SVC_BOOTSTRAP_TOKEN is required in production (set it, or run with --dev --open-registration for local use)',
    );
  }
  const masterKey = env.SVC_MASTER_KEY?.trim() || null;
  if (masterKey !== null) {
    try {
      parseMasterKey(masterKey);
    } catch (err) {
      throw new ConfigError((err as Error).message);
    }
  }
  if (raw.devRateLimit !== undefined && !dev) throw new ConfigError('--dev-rate-limit is allowed only with --dev');
  const databaseUrl = raw.databaseUrl?.trim() || null;
  if (databaseUrl !== null && !/^postgres(ql)?:\/\//.test(databaseUrl)) {
    throw new ConfigError('--database-url must be a postgres:// URL (leave it unset for the embedded SQLite store)');
  }
  if (raw.caddyAdmin && !/^https?:\/\//.test(raw.caddyAdmin)) throw new ConfigError('--caddy-admin must be an http:// URL');
  if (raw.caddyAdmin && !raw.proxyListen) throw new ConfigError('--caddy-admin needs --proxy-listen (the address that Caddy serves)');
  if (raw.proxyListen) parseListen(raw.proxyListen);
  const proxyAnswersListen = parseListen(raw.proxyAnswersListen?.trim() || '127.0.0.1:0');
  // Loopback: the questions are Caddy's, on svcd's host; the answers name tenants' addresses.
  if (proxyAnswersListen.host !== '127.0.0.1') throw new ConfigError('--proxy-answers-listen must be 127.0.0.1:PORT (loopback)');
  const tls = tlsConfig(raw);
  const buildRegistry = raw.buildRegistry?.trim() || null;
  // Images come only from Docker Hub or a loopback registry (DECISIONS.md): builds too.
  if (buildRegistry !== null && !isLoopbackRegistry(buildRegistry)) {
    throw new ConfigError('--build-registry must be a loopback registry address (127.0.0.1:PORT, localhost:PORT or [::1]:PORT)');
  }
  const databasePorts = parsePortRange('--database-ports', raw.databasePorts ?? DEFAULT_DATABASE_PORTS);
  const kanbanPorts = parsePortRange('--kanban-ports', raw.kanbanPorts ?? DEFAULT_KANBAN_PORTS);
  // Both are allocated by svcd, each from its own range: a shared port would collide.
  if (kanbanPorts.from <= databasePorts.to && databasePorts.from <= kanbanPorts.to) {
    throw new ConfigError('--kanban-ports and --database-ports must not overlap');
  }
  const swarmPorts = parsePortRange('--swarm-ports', raw.swarmPorts ?? DEFAULT_SWARM_PORTS);
  const runtime = runtimeConfig(raw);
  // On a swarm both are published on the nodes, from ranges svcd allocates each on its own.
  if (runtime.runtime === 'swarm') {
    for (const [flag, range] of [['--database-ports', databasePorts], ['--kanban-ports', kanbanPorts]] as const) {
      if (swarmPorts.from <= range.to && range.from <= swarmPorts.to) throw new ConfigError(`--swarm-ports and ${flag} must not overlap (on a swarm both are published on the nodes)`);
    }
    // The nodes' published-ports gate drops what peers send to these ranges: never the nodes' own
    // ssh, engines or Swarm.
    for (const [flag, range] of [['--swarm-ports', swarmPorts], ['--database-ports', databasePorts]] as const) {
      const held = NODE_PORTS.find((port) => port >= range.from && port <= range.to);
      if (held !== undefined) throw new ConfigError(`${flag} must not include port ${String(held)} (a node's own: ssh, the Docker Engine or Swarm), which the nodes' gate would close`);
    }
  }
  const swarmPublishedFrom = parseSwarmPublishedFrom(runtime.runtime, raw.swarmPublishedFrom);
  const kanbanAddress = raw.kanbanAddress?.trim() || DEFAULT_KANBAN_ADDRESS;
  // The board's url names this address, so it must be one a browser can go to.
  if (isIP(kanbanAddress) === 0 || kanbanAddress === '0.0.0.0' || kanbanAddress === '::') {
    throw new ConfigError(`--kanban-address must be one IP address of this host (boards' urls name it), got ${JSON.stringify(kanbanAddress)}`);
  }
  const warm = Number(raw.envWarmPool ?? DEFAULT_ENV_WARM_POOL);
  if (!Number.isInteger(warm) || warm < 0 || warm > 20) throw new ConfigError(`--env-warm-pool must be an integer from 0 to 20, got ${JSON.stringify(raw.envWarmPool)}`);
  // A warm container is handed to a tenant by joining it to the tenant's network, and an
  // environment on a swarm is pinned to the node of its workspace with a port of its own: a
  // pool would have to guess both.
  if (warm > 0 && runtime.runtime === 'swarm') throw new ConfigError('--env-warm-pool must be 0 with --runtime swarm: a swarm has no warm pool of environments');
  const warmReserve = Number(raw.envWarmReserve ?? DEFAULT_ENV_WARM_RESERVE);
  if (!Number.isInteger(warmReserve) || warmReserve < 0 || warmReserve > 100) throw new ConfigError(`--env-warm-reserve must be an integer from 0 to 100, got ${JSON.stringify(raw.envWarmReserve)}`);
  const gitCaFile = raw.gitCaFile?.trim() || null;
  if (gitCaFile !== null && !existsSync(gitCaFile)) throw new ConfigError(`--git-ca-file ${gitCaFile} does not exist`);
  const metricsListen = raw.metricsListen?.trim() || DEFAULT_METRICS_LISTEN;
  const meteringDatabaseUrl = raw.meteringDatabaseUrl?.trim() || null;
  if (meteringDatabaseUrl !== null && !/^postgres(ql)?:\/\//.test(meteringDatabaseUrl)) {
    throw new ConfigError('--metering-database-url must be a postgres:// URL (leave it unset to keep metering in svc\'s store)');
  }
  const meteringInterval = Number(raw.meteringInterval ?? DEFAULT_METERING_INTERVAL_S);
  if (!Number.isInteger(meteringInterval) || meteringInterval < 1 || meteringInterval > 3600) {
    throw new ConfigError(`--metering-interval must be whole seconds from 1 to 3600, got ${JSON.stringify(raw.meteringInterval)}`);
  }
  const retentionDays = Number(raw.meteringRetentionDays ?? DEFAULT_METERING_RETENTION_DAYS);
  if (!Number.isInteger(retentionDays) || retentionDays < 2 || retentionDays > 3650) {
    throw new ConfigError(`--metering-retention-days must be an integer from 2 to 3650, got ${JSON.stringify(raw.meteringRetentionDays)}`);
  }
  const retention: RetentionWindows = {
    activityDays: retentionWindow('--activity-retention-days', raw.activityRetentionDays, DEFAULT_RETENTION.activityDays),
    deploymentDays: retentionWindow('--deployment-retention-days', raw.deploymentRetentionDays, DEFAULT_RETENTION.deploymentDays),
    buildLogDays: retentionWindow('--build-log-retention-days', raw.buildLogRetentionDays, DEFAULT_RETENTION.buildLogDays),
    keyDays: retentionWindow('--key-retention-days', raw.keyRetentionDays, DEFAULT_RETENTION.keyDays),
  };
  const scratch = parseScratch(raw.scratchDir, raw.scratchBudgetGb, raw.dataDir);
  let egressAllow: EgressAllowance[];
  try {
    egressAllow = parseEgressAllow(raw.egressAllow);
  } catch (err) {
    throw new ConfigError((err as Error).message);
  }
  const tenantCpuWeight = parseTenantCpuWeight(raw.tenantCpuWeight);
  const tenantInitBinary = resolve(raw.tenantInit?.trim() || builtTenantInit());
  if (!existsSync(tenantInitBinary)) throw new ConfigError(`svc-init is missing at ${tenantInitBinary}: make build builds it (with Go), or name it with --tenant-init`);
  const tenantInit = {
    binary: tenantInitBinary,
    rate: {
      linesPerSecond: integerFlag('--log-lines-per-second', raw.logLinesPerSecond, DEFAULT_LOG_RATE.linesPerSecond, 10, 1_000_000),
      bytesPerSecond: 1024 * integerFlag('--log-kib-per-second', raw.logKibPerSecond, DEFAULT_LOG_RATE.bytesPerSecond / 1024, 16, 1_048_576),
    },
  };
  return {
    stalledReaderMs: 1000 * integerFlag('--stalled-reader-seconds', raw.stalledReaderSeconds, DEFAULT_STALLED_READER_S, 1, 3600),
    connectionsPerClient: integerFlag('--connections-per-client', raw.connectionsPerClient, DEFAULT_CONNECTIONS_PER_CLIENT, 1, 65_535),
    workloadLeaseMs: 1000 * integerFlag('--workload-lease-seconds', raw.workloadLeaseSeconds, DEFAULT_WORKLOAD_LEASE_S, 5, 300),
    listen: parseListen(raw.listen),
    dataDir: raw.dataDir,
    databaseUrl,
    // Host names are case-insensitive and a trailing dot names the same host: one spelling.
    baseDomain: baseDomainOf(raw.baseDomain),
    proxyListen: raw.proxyListen?.trim() || null,
    caddyAdmin: raw.caddyAdmin?.trim() || null,
    proxyAnswersListen,
    tls,
    dnsServers: dnsServers(raw.dnsServer),
    dev,
    openRegistration,
    sandbox: raw.sandbox as SandboxMode,
    dockerHost: raw.dockerHost,
    ...runtime,
    engineTls: engineTlsConfig(raw, runtime.swarmNodes),
    bootstrapTokens,
    adminTokens,
    masterKey,
    logLevel: raw.logLevel,
    allowLoopbackGit: dev || raw.allowLoopbackGit === true,
    buildRegistry,
    // At most an hour: beyond it, a tag moved in the registry would go unseen too long.
    baseImageReuseSeconds: integerFlag('--base-image-reuse', raw.baseImageReuse, BASE_IMAGE_REUSE_S, 0, 3600),
    databaseImages: { postgres: raw.postgresImage ?? DEFAULT_POSTGRES_IMAGE, redis: raw.redisImage ?? DEFAULT_REDIS_IMAGE },
    databasePorts,
    swarmPorts,
    swarmHelperImage: raw.swarmHelperImage?.trim() || DEFAULT_SWARM_HELPER_IMAGE,
    swarmPublishedFrom,
    kanbanImage: raw.kanbanImage?.trim() || DEFAULT_KANBAN_IMAGE,
    dashboardDir: raw.dashboardDir?.trim() ? resolve(raw.dashboardDir.trim()) : DEFAULT_DASHBOARD_DIR,
    kanbanPorts,
    kanbanAddress,
    environmentImages: {
      default: raw.envImageDefault?.trim() || DEFAULT_ENVIRONMENT_IMAGES.default,
      node: raw.envImageNode?.trim() || DEFAULT_ENVIRONMENT_IMAGES.node,
      python: raw.envImagePython?.trim() || DEFAULT_ENVIRONMENT_IMAGES.python,
      go: raw.envImageGo?.trim() || DEFAULT_ENVIRONMENT_IMAGES.go,
    },
    environmentWarmPool: warm,
    environmentWarmReserve: warmReserve,
    gitCaFile,
    metricsListen: metricsListen === 'off' ? null : parseListen(metricsListen),
    meteringDatabaseUrl,
    meteringIntervalMs: meteringInterval * 1000,
    meteringRetentionDays: retentionDays,
    retention,
    scratch,
    egressAllow,
    tenantCpuWeight,
    tenantInit,
    rateLimits: raw.devRateLimit !== undefined ? parseDevRateLimit(raw.devRateLimit) : SPEC_RATE_LIMITS,
  };
}

/**
 * The scratch directory must not be the data directory or inside it: clones that fill their disk
 * would otherwise fill the store's too.
 */
function parseScratch(dirRaw: string | undefined, budgetRaw: string | undefined, dataDir: string): { dir: string; budgetBytes: number } {
  const dir = resolve(dirRaw?.trim() || DEFAULT_SCRATCH_DIR);
  const data = resolve(dataDir);
  if (dir === data || dir.startsWith(`${data}/`) || data.startsWith(`${dir}/`)) {
    throw new ConfigError(`--scratch-dir ${dir} must lie outside --data-dir ${data} (and not contain it)`);
  }
  const gb = Number(budgetRaw ?? DEFAULT_SCRATCH_BUDGET_GB);
  if (!Number.isFinite(gb) || gb < 1 || gb > 10_000) throw new ConfigError(`--scratch-budget-gb must be a number from 1 to 10000, got ${JSON.stringify(budgetRaw)}`);
  return { dir, budgetBytes: Math.floor(gb * 1024 ** 3) };
}

/** `off`, or an integer on cgroup v2's cpu.weight scale. */
function parseTenantCpuWeight(raw: string | undefined): number | null {
  if (raw?.trim() === 'off') return null;
  const weight = raw === undefined ? DEFAULT_TENANT_CPU_WEIGHT : Number(raw.trim() === '' ? Number.NaN : raw);
  if (!Number.isInteger(weight) || weight < CPU_WEIGHT_RANGE.min || weight > CPU_WEIGHT_RANGE.max) {
    throw new ConfigError(`--tenant-cpu-weight must be off or an integer from ${CPU_WEIGHT_RANGE.min} to ${CPU_WEIGHT_RANGE.max}, got ${JSON.stringify(raw)}`);
  }
  return weight;
}

/** A flag's whole number within bounds, or its default when the flag is not given. */
function integerFlag(flag: string, value: string | undefined, fallback: number, min: number, max: number): number {
  const n = value === undefined ? fallback : Number(value.trim() === '' ? Number.NaN : value);
  if (!Number.isInteger(n) || n < min || n > max) throw new ConfigError(`${flag} must be an integer from ${min} to ${max}, got ${JSON.stringify(value)}`);
  return n;
}

/** Whole days within the bounds every retention window shares. */
function retentionWindow(flag: string, value: string | undefined, fallback: number): number {
  return integerFlag(flag, value, fallback, RETENTION_DAYS_MIN, RETENTION_DAYS_MAX);
}

/** FROM-TO, both 1024-65535, FROM <= TO. */
export function parsePortRange(flag: string, value: string): { from: number; to: number } {
  const m = /^(\d{1,5})-(\d{1,5})$/.exec(value.trim());
  const from = Number(m?.[1]);
  const to = Number(m?.[2]);
  if (!m || from < 1024 || to > 65535 || from > to) throw new ConfigError(`${flag} must be FROM-TO within 1024-65535, got ${JSON.stringify(value)}`);
  return { from, to };
}

/** --tls and the flags that go with it; null when off. */
function tlsConfig(raw: RawOptions): TlsConfig | null {
  const mode = (raw.tls ?? 'off').trim();
  if (mode !== 'on' && mode !== 'off') throw new ConfigError('--tls must be on or off');
  if (mode === 'off') return null;
  if (!raw.baseDomain?.trim()) throw new ConfigError('--tls on needs --base-domain (certificates are for hosts under it)');
  if (!raw.proxyListen?.trim() || !raw.proxyHttpsListen?.trim()) throw new ConfigError('--tls on needs --proxy-listen and --proxy-https-listen');
  // An operator's Caddy could not reach svcd's loopback question, nor store in svcd's data dir.
  if (raw.caddyAdmin?.trim()) throw new ConfigError("--tls on works with svcd's own Caddy only, not with --caddy-admin");
  const httpsPort = parseListen(raw.proxyHttpsListen).port;
  if (httpsPort === 0 || httpsPort === parseListen(raw.proxyListen).port) throw new ConfigError('--proxy-https-listen needs a port of its own (not 0, not --proxy-listen\'s)');
  if (raw.acmeCaRoot?.trim() && !existsSync(raw.acmeCaRoot.trim())) throw new ConfigError(`--acme-ca-root: no file at ${raw.acmeCaRoot.trim()}`);
  const directory = (raw.acmeCa ?? LETS_ENCRYPT_DIRECTORY).trim();
  if (!/^https:\/\//.test(directory)) throw new ConfigError('--acme-ca must be an https:// URL of an ACME directory');
  const askListen = parseListen(raw.tlsAskListen ?? '127.0.0.1:0');
  // Caddy asks it for any name a client sends: only svcd's own host may reach it.
  if (!['127.0.0.1', '::1', 'localhost'].includes(askListen.host)) throw new ConfigError('--tls-ask-listen must be a loopback address');
  return {
    httpsListen: raw.proxyHttpsListen.trim(),
    acme: { directory, email: raw.acmeEmail?.trim() || null, caRoot: raw.acmeCaRoot?.trim() || null },
    askListen,
    storageDir: raw.tlsStorage?.trim() ? resolve(raw.tlsStorage.trim()) : null,
  };
}

/** --base-domain as svc compares host names: lower case, no trailing dot, an internationalized one in its xn-- form. */
function baseDomainOf(value: string | undefined): string | null {
  const raw = value?.trim() ?? '';
  if (raw === '') return null;
  const name = asciiHostname(raw);
  if (name === '' || !isDnsName(name)) throw new ConfigError(`--base-domain must be a DNS name, got ${JSON.stringify(value)}`);
  return name;
}

/** --runtime and the flags that go with it. */
function runtimeConfig(raw: RawOptions): Pick<Config, 'runtime' | 'swarmNodes'> {
  const runtime = (raw.runtime ?? 'docker').trim();
  if (runtime !== 'docker' && runtime !== 'swarm') throw new ConfigError(`--runtime must be docker or swarm, got ${JSON.stringify(raw.runtime)}`);
  const swarmNodes: Record<string, string> = {};
  for (const entry of (raw.swarmNode ?? '').split(',').map((e) => e.trim()).filter(Boolean)) {
    // unix:// or https:// with a client certificate: a node's engine reached over TCP without
    // TLS is root on that node for whoever else reaches the port.
    const m = /^([A-Za-z0-9][A-Za-z0-9.-]*)=(unix:\/\/\S+|https:\/\/\S+)$/.exec(entry);
    if (!m?.[1] || !m[2]) throw new ConfigError(`--swarm-node must be NAME=unix:///path or NAME=https://HOST:PORT (TLS, never plain tcp://), got ${JSON.stringify(entry)}`);
    swarmNodes[m[1]] = m[2];
  }
  if (runtime === 'docker' && Object.keys(swarmNodes).length > 0) throw new ConfigError('--swarm-node needs --runtime swarm');
  if (runtime === 'swarm') {
    // Nodes pull built images from the cluster's registry: the manager's own images reach no other node.
    if (!raw.buildRegistry?.trim()) throw new ConfigError('--runtime swarm needs --build-registry (a registry every node pulls from)');
  }
  return { runtime, swarmNodes };
}

/** Ports a swarm node serves itself: ssh, the Docker Engine (2375, 2376), Swarm's management and gossip (2377, 7946). */
const NODE_PORTS = [22, 2375, 2376, 2377, 7946];

/**
 * --swarm-published-from CIDR,...: required on a swarm, where services' and databases' ports are
 * published on every node and only svcd's side may reach them; svc cannot tell where every svcd
 * and its proxy run (several may, on other hosts), so the operator names them. IPv4 (an address
 * alone is /32).
 */
function parseSwarmPublishedFrom(runtime: 'docker' | 'swarm', value: string | undefined): string[] {
  const entries = (value ?? '').split(',').map((e) => e.trim()).filter((e) => e !== '');
  if (runtime === 'docker') {
    if (entries.length > 0) throw new ConfigError('--swarm-published-from needs --runtime swarm');
    return [];
  }
  if (entries.length === 0) {
    throw new ConfigError("--runtime swarm needs --swarm-published-from CIDR,... (where svcd and its proxy run: only they reach the services' and databases' ports on the nodes)");
  }
  return entries.map((entry) => {
    const m = /^(\d{1,3}(?:\.\d{1,3}){3})(?:\/(\d{1,2}))?$/.exec(entry);
    const bits = m?.[2] === undefined ? 32 : Number(m[2]);
    if (!m?.[1] || m[1].split('.').some((o) => Number(o) > 255) || bits > 32) throw new ConfigError(`--swarm-published-from entries must be IPv4 CIDRs (10.0.0.5 or 10.0.0.0/24), got ${JSON.stringify(entry)}`);
    return `${m[1]}/${String(bits)}`;
  });
}

/** The files of an engine's TLS material, as Docker names them (DOCKER_CERT_PATH). */
const ENGINE_TLS_FILES = ['ca.pem', 'cert.pem', 'key.pem'] as const;

/**
 * TLS material for every engine address that is https://, from <data-dir>/engine-tls/docker-host/
 * (--docker-host) and <data-dir>/engine-tls/nodes/<name>/ (each --swarm-node): the CA that signed the
 * engine's certificate, and svcd's client certificate and key (the engine's --tlsverify). A file
 * missing, or a key group or others can read, is refused here rather than at the first call.
 */
function engineTlsConfig(raw: RawOptions, swarmNodes: Record<string, string>): Record<string, EngineTls> {
  const wanted: Array<[string, string]> = [];
  if (/^https:\/\//.test(raw.dockerHost)) wanted.push(['docker-host', raw.dockerHost]);
  for (const [name, url] of Object.entries(swarmNodes)) if (url.startsWith('https://')) wanted.push([join('nodes', name), url]);
  const material: Record<string, EngineTls> = {};
  for (const [name, url] of wanted) {
    const dir = join(raw.dataDir, 'engine-tls', name);
    const missing = ENGINE_TLS_FILES.filter((f) => !existsSync(join(dir, f)));
    if (missing.length > 0) throw new ConfigError(`the engine at ${url} is reached over TLS: put ${missing.join(', ')} in ${dir} (the engine's CA, svcd's client certificate and key)`);
    // Whoever can change these can make svcd trust another engine (root on a node) or speak as svcd.
    if ((statSync(dir).mode & 0o022) !== 0) throw new ConfigError(`${dir} must not be writable by group or others`);
    const [ca, cert, key] = ENGINE_TLS_FILES.map((f) => readOwnFile(join(dir, f), f === 'key.pem' ? 0o077 : 0o022));
    try {
      createSecureContext({ ca, cert, key });
      if (!new X509Certificate(cert ?? '').checkPrivateKey(createPrivateKey(key ?? ''))) throw new Error('cert.pem is not the certificate of key.pem');
    } catch (err) {
      throw new ConfigError(`the TLS material in ${dir} is not usable: ${(err as Error).message}`);
    }
    material[url] = { ca: ca ?? '', cert: cert ?? '', key: key ?? '' };
  }
  return material;
}

/**
 * A file of svcd's user, not a link, none of whose `forbidden` mode bits are set, read through
 * the descriptor its checks were made on (no swap between the check and the read).
 */
function readOwnFile(path: string, forbidden: number): string {
  let fd: number;
  try {
    fd = openSync(path, constants.O_RDONLY | constants.O_NOFOLLOW);
  } catch (err) {
    throw new ConfigError(`${path} cannot be opened (a symbolic link is refused): ${(err as Error).message}`);
  }
  try {
    const st = fstatSync(fd);
    if (!st.isFile()) throw new ConfigError(`${path} must be a regular file`);
    if (st.uid !== process.geteuid?.()) throw new ConfigError(`${path} must belong to the user svcd runs as`);
    if ((st.mode & forbidden) !== 0) throw new ConfigError(`${path} must be ${forbidden === 0o077 ? 'readable by its owner only (chmod 600)' : 'writable by its owner only'}`);
    return readFileSync(fd, 'utf8');
  } finally {
    closeSync(fd);
  }
}

/** --dns-server: the servers asked for custom domains' TXT records; null: the system's. */
function dnsServers(value: string | undefined): string[] | null {
  const list = (value ?? '').split(',').map((s) => s.trim()).filter(Boolean);
  if (list.length === 0) return null;
  try {
    // c-ares's own parser: an address it cannot use is refused here, not at the first lookup.
    new Resolver().setServers(list);
  } catch {
    throw new ConfigError(`--dns-server must be IP addresses with optional ports (1.1.1.1, [2606:4700::1111]:53), got ${JSON.stringify(value)}`);
  }
  return list;
}
