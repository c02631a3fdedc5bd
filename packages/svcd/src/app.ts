// The dependency object: everything svcd needs, built once at start-up. Nothing in svcd keeps
// module-level state; limiters, caches and the clock belong to this object, so two servers in one
// process (the tests) are fully independent.
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import type { Logger } from 'pino';
import { Activity } from './activity/activity.js';
import { ApiKeys } from './auth/api-keys.js';
import { Authenticator } from './auth/authenticator.js';
import { KeyCache } from './auth/key-cache.js';
import { OperatorTokens } from './auth/operator.js';
import { WebSessions } from './auth/web-sessions.js';
import { type Clock, type Timers, systemClock, systemTimers } from './clock.js';
import { REQUEST_TIMEOUT_MS, type Config } from './config.js';
import { hexId } from './ids.js';
import { PeriodicJobs, type JobDefinition } from './jobs/periodic.js';
import { RateLimits } from './ratelimit/index.js';
import { DockerRuntime, EGRESS_NODE_LABEL, HostFirewall, NodeFirewalls, SANDBOX_NODE_LABEL, SwarmRuntime, TenantCgroups, SandboxPolicy, installTenantInit, readNodeTenantInit, tenantInitNodeLabel, type Runtime } from './runtime/index.js';
import { BaseImagePrefetch } from './builds/base-image-prefetch.js';
import { RecentPulls } from './builds/recent-pulls.js';
import { Builds } from './builds/builds.js';
import { SourceUploads } from './builds/source-uploads.js';
import { Databases } from './databases/databases.js';
import { Kanban } from './kanban/kanban.js';
import { MOVING_RECONCILE_EVERY_MS, RECONCILE_EVERY_MS, WorkloadController } from './workloads/controller.js';
import { KanbanImage } from './kanban/image.js';
import { Environments } from './environments/environments.js';
import { EnvironmentFiles } from './environments/files.js';
import { previewRouteTargets } from './environments/previews.js';
import { WarmPool } from './environments/warm-pool.js';
import { writeCaBundle } from './sources/git.js';
import { BuildRunner, type BuildRunnerOptions } from './builds/runner.js';
import { checkSourceUrl, resolveWithSystem, type ResolveHost, type SourceCheck } from './sources/sources.js';
import { openStore, type Store } from './store/index.js';
import { Cluster } from './system/cluster.js';
import { Health, type DiskReader } from './system/health.js';
import { Tenants, type TenantResources } from './tenants/tenants.js';
import type { Platform } from './platform.js';
import { loadMasterKey, Sealer } from './secrets/sealer.js';
import { Deployer } from './services/deployer.js';
import { Services } from './services/services.js';
import { Snapshots } from './services/snapshots.js';
import { CrashHandler } from './services/crashes.js';
import { loadInstanceId } from './instance.js';
import { CaddyProxy, ROUTE_FOLLOW_MS } from './proxy/caddy.js';
import { CertificateOrders } from './domains/certificate-orders.js';
import { Domains } from './domains/domains.js';
import { DnsTxtLookup, type TxtLookup } from './domains/txt-records.js';
import { apiRouteTargets, routeTargets } from './services/routing.js';
import { Metering } from './metering/metering.js';
import { Sampler } from './metering/sampler.js';
import { OperatorMetrics } from './observability/operator-metrics.js';
import { createLogger } from './observability/logger.js';
import { MetricsListener } from './observability/metrics-listener.js';
import { openMeteringStore, type MeteringStore } from './store/index.js';
import { Retention, RETENTION_EVERY_MS, RETENTION_JOB } from './retention/retention.js';
import { HeldWaits } from './sessions/held-waits.js';
import { SessionLimits, type SessionLimitsOptions } from './sessions/session-limits.js';
import { DiskMeter, DiskQuota } from './disk/disk-quota.js';
import { ScratchSpace } from './scratch/scratch-space.js';

export interface Deps {
  config: Config;
  clock: Clock;
  timers: Timers;
  log: Logger;
  /** Audit lines (reveals, operator actions): the same stream, marked audit: true. */
  audit: Logger;
  store: Store;
  runtime: Runtime;
  /** This process's lease holder id (instance/boot), on the leases it takes. */
  holder: string;
  keyCache: KeyCache;
  authenticator: Authenticator;
  /** Dashboard sign-in sessions (cookie authentication). */
  webSessions: WebSessions;
  operatorTokens: OperatorTokens;
  rateLimits: RateLimits;
  activity: Activity;
  apiKeys: ApiKeys;
  tenants: Tenants;
  health: Health;
  cluster: Cluster;
  sealer: Sealer;
  deployer: Deployer;
  services: Services;
  snapshots: Snapshots;
  crashes: CrashHandler;
  builds: Builds;
  sourceUploads: SourceUploads;
  buildRunner: BuildRunner;
  /** Base images pulled ahead of builds, from an upload's start (a hint kept in this process). */
  baseImagePrefetch: BaseImagePrefetch;
  databases: Databases;
  workloads: WorkloadController;
  kanban: Kanban;
  environments: Environments;
  /** Containers started ahead of environments' creates (its refill is a periodic job). */
  warmPool: WarmPool;
  /** Environments' files, through their agents (beyond the spec). */
  environmentFiles: EnvironmentFiles;
  /** Usage samples and rollups: svc's store, or a database of its own. */
  meteringStore: MeteringStore;
  metering: Metering;
  sampler: Sampler;
  /** Prunes what is kept no longer (activity, deployments, build logs, keys, idempotent answers). */
  retention: Retention;
  /** Log streams, execs and syncs open at once: per tenant (store) and per svcd. */
  sessions: SessionLimits;
  /** ?wait requests held open (a service's deploy, a build): per tenant and per svcd. */
  waits: HeldWaits;
  /** The disk quota's refusals (measured by diskMeter on the metering interval). */
  disk: DiskQuota;
  diskMeter: DiskMeter;
  /** Clones of builds and syncs, under one budget, outside the data dir. */
  scratch: ScratchSpace;
  /** Prometheus metrics for operators, served by metricsListener on --metrics-listen. */
  metrics: OperatorMetrics;
  metricsListener: MetricsListener;
  /** The public reverse proxy, when --proxy-listen is set. */
  proxy: CaddyProxy | null;
  /** Where the API listens (set once it does): the proxy routes api.<base-domain> there. */
  apiRoute: ApiRoute;
  /** Custom domains of services (beyond the spec). */
  domains: Domains;
  /** Tenant egress: the host's ports and private networks closed to tenant workloads. */
  hostFirewall: HostFirewall;
  /** On a swarm: the same rules on every node (runtime/swarm/node-firewall.ts); null on one engine. */
  nodeFirewalls: NodeFirewalls | null;
  /** Their periodic install (null on one engine), also run once at start. */
  nodeFirewallJob: JobDefinition | null;
  /** The tenants' CPU group (null: --tenant-cpu-weight off). */
  tenantCgroups: TenantCgroups | null;
  jobs: PeriodicJobs;
  /** Bring records and engine together: every 30 s, and once at start. */
  reconcileJobs: JobDefinition[];
  requestTimeoutMs: number;
}

/** How often svcd checks every swarm node's egress rules and puts back what is missing (a node that rebooted or joined). */
const NODE_FIREWALL_EVERY_MS = 30_000;

/** What tests (and later a multi-host runtime) may replace. */
export interface DepsOverrides {
  clock?: Clock;
  timers?: Timers;
  log?: Logger;
  store?: Store;
  runtime?: Runtime;
  hostFirewall?: HostFirewall;
  /** Build worker settings (tests: short deadlines, few workers). */
  buildRunner?: Partial<Omit<BuildRunnerOptions, 'scratch'>>;
  databaseReadyTimeoutMs?: number;
  kanbanReadyTimeoutMs?: number;
  /** How often the environment lease reaper runs (tests: short). */
  environmentReapEveryMs?: number;
  /** Name resolution for build sources (tests). */
  resolveHost?: ResolveHost;
  maxActiveTenants?: number;
  requestTimeoutMs?: number;
  /** How full a path's disk is, for health detail (tests: any figure). */
  readDisk?: DiskReader;
  /** Extra per-tenant resources (tests); the real ones are always wired. */
  tenantResources?: TenantResources[];
  /** Deploy timing (tests). */
  deployDeadlineMs?: number;
  readyTimeoutMs?: number;
  /** How long a rolling redeploy's old container serves on after the route moved (tests: 0 with no proxy on the store). */
  routeFollowMs?: number;
  /** Crash restart backoff base (tests). */
  crashBackoffMs?: number;
  /** How long an exit waits before it is judged a crash (tests of crash loops: short). */
  exitSettleMs?: number;
  /** How often rollups are recomputed (tests: short). */
  rollupEveryMs?: number;
  /** Session caps (tests: small). */
  sessions?: SessionLimitsOptions;
  /** How often the custom domains' checker runs (tests: short). */
  domainCheckEveryMs?: number;
  /** The soonest an active custom domain is checked again, in seconds (tests of renewal: short). */
  domainSoonestRecheckS?: number;
  /** The TXT lookups of custom domains (tests of the rules without a DNS server). */
  txtLookup?: TxtLookup;
}

/** The API's own address, for its route at api.<base-domain>: null until svcd listens. */
export interface ApiRoute {
  upstream: string | null;
}

/** The custom domains' checker runs this often (each domain has its own pace, domains.ts). */
export const DOMAIN_CHECK_EVERY_MS = 15_000;

export const PRUNE_EVERY_MS = 60_000;
/** Lease ends are acted on within this long. */
export const ENVIRONMENT_REAP_EVERY_MS = 10_000;
/** The warm pool is checked this often (and right after a container is taken). */
export const WARM_POOL_EVERY_MS = 5_000;
const WARM_POOL_REFILL_DELAY_MS = 1_000;
/** Rollups of the current hour and day are recomputed this often. */
export const ROLLUP_EVERY_MS = 60_000;
/** Stats calls in flight at once during a sampling pass. */
const SAMPLER_CONCURRENCY = 4;

export async function createDeps(config: Config, o: DepsOverrides = {}): Promise<Deps> {
  const clock = o.clock ?? systemClock;
  const timers = o.timers ?? systemTimers;
  const log = o.log ?? createLogger(config.logLevel);
  const audit = log.child({ audit: true });
  // First: an instance id svcd did not write stops the start before anything is opened.
  const instance = loadInstanceId(config.dataDir);
  const store =
    o.store ??
    (await openStore({
      databaseUrl: config.databaseUrl,
      dataDir: config.dataDir,
      onConnectionError: (err) => log.warn({ err }, 'idle database connection failed; the pool replaces it'),
      onCheckpointerFailure: (err) => log.error({ err }, 'the SQLite checkpoint worker failed: checkpoints run in commits again'),
    }));
  // One id per store: it labels every workload, so installations sharing an engine stay apart.
  const installation = await store.settings.getOrCreate('installation_id', hexId(8));
  const tenantCgroups = config.tenantCpuWeight === null ? null : new TenantCgroups(config.tenantCpuWeight);
  // On a swarm, the runtime is also the cluster's nodes (operators list and drain them).
  // svc-init as the nodes get it (node-firewall.ts); one engine's host mounts it from the data dir.
  const nodeTenantInit = config.runtime === 'swarm' && !o.runtime ? await readNodeTenantInit(config.tenantInit.binary) : null;
  const swarm = nodeTenantInit
    ? new SwarmRuntime({ manager: config.dockerHost, nodes: new Map(Object.entries(config.swarmNodes)), tls: config.engineTls, installation, clock, timers, tenantInit: { sha256: nodeTenantInit.sha256, rate: config.tenantInit.rate } })
    : null;
  // What svc cannot do on a swarm here, said where the operator reads (README, Docker Swarm).
  if (swarm) log.warn("on a swarm, tenants' overlay traffic between nodes is not encrypted: keep the nodes on a network of their own");
  const cluster = new Cluster(swarm);
  const runtime =
    o.runtime ??
    swarm ??
    new DockerRuntime({
      host: config.dockerHost,
      tls: config.engineTls[config.dockerHost] ?? null,
      installation,
      placement: tenantCgroups && {
        groups: tenantCgroups,
        // Said once, when the first workload would have been placed.
        unplaced: (driver) => log.warn({ driver }, "the engine's cgroup driver is not cgroupfs: tenant workloads stay in the engine's own CPU group"),
      },
      tenantInit: { binary: await installTenantInit(config.tenantInit.binary, config.dataDir), rate: config.tenantInit.rate },
    });
  const hostFirewall = o.hostFirewall ?? new HostFirewall({ allow: config.egressAllow, owner: instance });
  const nodeFirewalls = swarm && nodeTenantInit
    ? new NodeFirewalls({
        nodes: new Map(Object.entries(config.swarmNodes)),
        tls: config.engineTls,
        clusterNodes: async () => (await swarm.nodes()).map((n) => ({ id: n.id, hostname: n.hostname, address: n.address, state: n.state })),
        markNode: (node, ready, sandboxed) => {
          const value = ready ? 'installed' : null;
          const labels: Record<string, string | null> = { [EGRESS_NODE_LABEL]: value, [tenantInitNodeLabel(nodeTenantInit.sha256)]: value };
          if (sandboxed !== undefined) labels[SANDBOX_NODE_LABEL] = sandboxed ? 'gvisor' : null;
          return swarm.labelNode(node, labels);
        },
        tenantInit: nodeTenantInit,
        // Services' and databases' ports; boards stay reachable at their url (--kanban-address's role).
        published: { ranges: [config.swarmPorts, config.databasePorts], allowFrom: config.swarmPublishedFrom },
        helperImage: config.swarmHelperImage,
        allow: config.egressAllow,
        log,
      })
    : null;
  // The health detail's egress line: svcd's host (builds run there), and on a swarm every node.
  const egress = {
    missing: async () => (await hostFirewall.missing()) ?? (await nodeFirewalls?.missing()) ?? null,
  };
  // Lease holder: this data dir's instance, this boot. Leases of earlier boots are ours and dead.
  const holder = `${instance}/${hexId(4)}`;
  await store.jobLocks.releaseEarlierBoots(instance, holder);
  await store.workloads.releaseEarlierBoots(instance, holder);
  const keyCache = new KeyCache(clock);
  const activity = new Activity(store, clock);
  const apiKeys = new ApiKeys({ store, cache: keyCache, activity, clock, audit });
  const jobs = new PeriodicJobs({ store, clock, timers, log, holder });
  const sealer = new Sealer(loadMasterKey(config.masterKey ?? undefined, config.dataDir));
  // What most domain modules are built from; each takes the part its Deps interface names.
  const core: Platform = { store, runtime, sealer, activity, clock, timers, log, audit, holder };
  const routing = { baseDomain: config.baseDomain, proxyListen: config.proxyListen, httpsListen: config.tls?.httpsListen ?? null };
  // An environment's agent token, for its previews' routes on a swarm: one that does not open
  // (a damaged row) leaves that preview unrouted, never every route unread.
  const unopened = new Set<string>();
  const openPreviewToken = (sealed: string): string | null => {
    try {
      return sealer.open(sealed);
    } catch (err) {
      // Once per token: the routes are read every half second.
      if (!unopened.has(sealed)) log.warn({ err }, "an environment's agent token could not be opened: its previews are not routed");
      unopened.add(sealed);
      return null;
    }
  };
  const apiRoute: ApiRoute = { upstream: null };
  const proxy = config.proxyListen
    ? new CaddyProxy(
        {
          listen: config.proxyListen,
          adminUrl: config.caddyAdmin,
          answersListen: config.proxyAnswersListen,
          dataDir: config.dataDir,
          ...(config.tls ? { tls: config.tls, certificateOrders: new CertificateOrders({ jobLocks: store.jobLocks, clock, holder }) } : {}),
        },
        async () => {
          const domains = (await store.serviceDomains.routed()).map((d) => ({ service_id: d.service_id, hostname: d.hostname, awaitingCertificate: d.certificate_expires_at === null }));
          return [
            ...routeTargets(await store.services.listAll(), routing, domains),
            ...previewRouteTargets(await store.environments.previewRoutes(), routing, openPreviewToken, config.runtime === 'swarm'),
            ...apiRouteTargets(apiRoute.upstream, config.baseDomain),
          ];
        },
        clock,
        timers,
        log,
      )
    : null;
  // Domain changes that move routes: push them to Caddy (pushes fold together while one runs).
  const routesChanged = () => void proxy?.sync().catch((err: unknown) => log.warn({ err }, 'proxy sync failed'));
  const sessions = new SessionLimits(store, clock, timers, holder, o.sessions);
  const waits = new HeldWaits(clock);
  // This instance's own folder: two svcd on one host never clear each other's clones.
  const scratch = new ScratchSpace(join(config.scratch.dir, instance), config.scratch.budgetBytes);
  // Before anything can clone (requests come once the server listens).
  await scratch.start();
  // Where clones lived before --scratch-dir: nothing uses them any more.
  for (const old of ['builds', 'env-sync']) rmSync(join(config.dataDir, old), { recursive: true, force: true });
  const disk = new DiskQuota(store);
  const sandbox = new SandboxPolicy(config.sandbox, runtime, clock);
  // Services, databases, boards and environments run under the workload controller (workloads/controller.ts).
  const workloads = new WorkloadController({ ...core, leaseMs: config.workloadLeaseMs });
  const crashes = new CrashHandler({ ...core, controller: workloads, backoffBaseMs: o.crashBackoffMs, exitSettleMs: o.exitSettleMs, routesChanged });
  const deployer = new Deployer({
    ...core,
    controller: workloads,
    crashes,
    sandbox,
    buildRegistry: config.buildRegistry,
    deadlineMs: o.deployDeadlineMs,
    readyTimeoutMs: o.readyTimeoutMs,
    // A redeploy's old container serves until every proxy routes to the new one: this svcd's, and
    // those of the other svcd on the store (so also when this one runs none).
    routeFollowMs: o.routeFollowMs ?? ROUTE_FOLLOW_MS,
    publishedPorts: config.swarmPorts,
    routesChanged,
  });
  const snapshots = new Snapshots(store, sealer, activity, clock);
  const services = new Services({ ...core, controller: workloads, snapshots, ...routing, routesChanged, buildRegistry: config.buildRegistry, sessions, waits, disk, ports: deployer });
  const domains = new Domains({
    ...core,
    routing,
    txt: o.txtLookup ?? new DnsTxtLookup(config.dnsServers),
    // Certificates are watched only where the proxy obtains them (--tls on).
    certificates: config.tls ? proxy : null,
    routesChanged,
    ...(o.domainSoonestRecheckS === undefined ? {} : { soonestRecheckS: o.domainSoonestRecheckS }),
  });
  jobs.schedule({ name: 'domains.check', everyMs: o.domainCheckEveryMs ?? DOMAIN_CHECK_EVERY_MS, run: (lease) => domains.checkDue(lease) });
  // HTTPS git trusts the system's CAs plus the operator's (--git-ca-file): builds and sync.
  const gitCaBundle = config.gitCaFile ? writeCaBundle(config.dataDir, config.gitCaFile) : null;
  // One set of source rules for builds: checked at create, and again by the runner before the clone.
  const checkBuildSource: SourceCheck = (raw) => checkSourceUrl(raw, { allowLoopback: config.allowLoopbackGit }, o.resolveHost ?? resolveWithSystem);
  const recentPulls = new RecentPulls(clock, config.baseImageReuseSeconds * 1000);
  const baseImagePrefetch = new BaseImagePrefetch({ store, runtime, clock, timers, buildRegistry: config.buildRegistry, recent: recentPulls });
  const buildRunner = new BuildRunner({
    ...core,
    services,
    prefetch: baseImagePrefetch,
    recentPulls,
    scratch,
    gitCaBundle,
    pushBuilds: config.buildRegistry !== null,
    buildRegistry: config.buildRegistry,
    sandbox: () => sandbox.use(),
    checkSource: checkBuildSource,
    ...o.buildRunner,
  });
  const databases = new Databases({
    ...core,
    workloads,
    images: config.databaseImages,
    ports: config.databasePorts,
    readyTimeoutMs: o.databaseReadyTimeoutMs,
    sandbox: () => sandbox.use(),
    disk,
    // On a swarm a database is published on the node its data is on.
    ...(swarm ? { nodeAddress: (node: string) => swarm.nodeAddress(node) } : {}),
  });
  // On a swarm the node that runs a board pulls its image from the cluster's registry.
  const kanbanImage = new KanbanImage(runtime, config.kanbanImage, join(config.dataDir, 'kanban-image'), log, swarm ? config.buildRegistry : null);
  const kanban = new Kanban({
    ...core,
    workloads,
    image: kanbanImage,
    ports: config.kanbanPorts,
    address: config.kanbanAddress,
    readyTimeoutMs: o.kanbanReadyTimeoutMs,
    // On a swarm a board is published on the node its data is on.
    ...(swarm ? { nodeAddress: (node: string) => swarm.nodeAddress(node) } : {}),
    sandbox: () => sandbox.use(),
  });
  const sourceUploads = new SourceUploads({ ...core, disk, prefetch: baseImagePrefetch });
  const builds = new Builds({ ...core, execution: buildRunner, uploads: sourceUploads, checkSource: checkBuildSource, buildRegistry: config.buildRegistry, sessions, waits, disk });
  const environments = new Environments({
    ...core,
    controller: workloads,
    images: config.environmentImages,
    sandbox: () => sandbox.use(),
    scratch,
    allowLoopbackGit: config.allowLoopbackGit,
    gitCaBundle,
    resolveHost: o.resolveHost,
    routing,
    routesChanged,
    sessions,
    disk,
    publishedPorts: config.swarmPorts,
  });
  const warmPoolJob = {
    name: 'environments.warm_pool',
    everyMs: WARM_POOL_EVERY_MS,
    run: () => warmPool.refill(),
  };
  const warmPool = new WarmPool({
    ...core,
    size: config.environmentWarmPool,
    kept: config.environmentWarmReserve,
    images: config.environmentImages,
    start: (workload, image, agentToken, keptFor, signal) => environments.runWarm(workload, image, agentToken, keptFor, signal),
    controller: workloads,
    agentSupported: () => environments.agentSupported(),
    // Refill soon rather than at the next tick (after a take, or a start that ended), under the
    // job's lease like every run; not at once: starting a container takes both cores here for a
    // moment, and the new owner's first commands come right after the hand-over.
    taken: () => void timers.setTimeout(() => void jobs.runOnce(warmPoolJob), WARM_POOL_REFILL_DELAY_MS),
  });
  environments.useWarmPool(warmPool);
  jobs.schedule(warmPoolJob);
  jobs.schedule({ name: 'environments.reap', everyMs: o.environmentReapEveryMs ?? ENVIRONMENT_REAP_EVERY_MS, run: () => environments.reap() });
  const reconcileJobs = [{ name: 'workloads.reconcile', everyMs: config.runtime === 'swarm' ? MOVING_RECONCILE_EVERY_MS : RECONCILE_EVERY_MS, run: () => workloads.reconcile() }];
  for (const job of reconcileJobs) jobs.schedule(job);
  const nodeFirewallJob = nodeFirewalls ? { name: 'swarm.node-firewalls', everyMs: NODE_FIREWALL_EVERY_MS, run: () => nodeFirewalls.install() } : null;
  if (nodeFirewallJob) jobs.schedule(nodeFirewallJob);
  const meteringStore = config.meteringDatabaseUrl
    ? openMeteringStore(config.meteringDatabaseUrl, (err) => log.warn({ err }, 'idle metering database connection failed; the pool replaces it'))
    : store.metering;
  const metering = new Metering(store, meteringStore, clock, { retentionDays: config.meteringRetentionDays });
  const sampler = new Sampler({ ...core, metering: meteringStore, intervalMs: config.meteringIntervalMs, concurrency: SAMPLER_CONCURRENCY });
  jobs.schedule({ name: 'metering.sample', everyMs: config.meteringIntervalMs, run: async (lease) => { await sampler.pass(() => lease.assertHeld()); } });
  const diskMeter = new DiskMeter({ ...core, halts: [services, environments], buildRegistry: config.buildRegistry });
  jobs.schedule({ name: 'disk.measure', everyMs: config.meteringIntervalMs, run: async () => { await diskMeter.pass(); } });
  jobs.schedule({ name: 'metering.rollup', everyMs: o.rollupEveryMs ?? ROLLUP_EVERY_MS, run: (lease) => metering.rollUp(() => lease.assertHeld()) });
  const metrics = new OperatorMetrics(() => sampler.status(), clock, () => diskMeter.status(), () => domains.operatorFigures(), () => deployer.publishedPortFigures());
  activity.observe((event) => metrics.activityRecorded(event));
  const retention = new Retention(store, clock, log, config.retention);
  jobs.schedule({ name: RETENTION_JOB, everyMs: RETENTION_EVERY_MS, run: async () => { await retention.sweep(); } });
  jobs.schedule({
    name: 'store.prune',
    everyMs: PRUNE_EVERY_MS,
    run: async () => {
      await retention.pruneIdempotency();
      await retention.pruneSourceArchives();
      await store.jobLocks.pruneExpired(clock.now());
    },
  });
  const authenticator = new Authenticator(store, keyCache, clock);
  return {
    config,
    clock,
    timers,
    log,
    audit,
    store,
    runtime,
    holder,
    keyCache,
    authenticator,
    webSessions: new WebSessions({ store, audit, clock, authenticator }),
    operatorTokens: new OperatorTokens(config.bootstrapTokens, config.adminTokens),
    rateLimits: new RateLimits(config.rateLimits, clock, timers),
    activity,
    apiKeys,
    tenants: new Tenants({
      ...core,
      keys: apiKeys,
      keyCache,
      resources: [services, builds, databases, kanban, environments, ...(o.tenantResources ?? [])],
      maxActiveTenants: o.maxActiveTenants,
    }),
    health: new Health({ store, runtime, clock, dataDir: config.dataDir, egress, log, readDisk: o.readDisk, cluster }),
    cluster,
    sealer,
    deployer,
    services,
    snapshots,
    crashes,
    builds,
    sourceUploads,
    baseImagePrefetch,
    buildRunner,
    databases,
    workloads,
    kanban,
    environments,
    warmPool,
    environmentFiles: new EnvironmentFiles({ ...core, environments, sessions }),
    meteringStore,
    metering,
    sampler,
    retention,
    sessions,
    waits,
    disk,
    diskMeter,
    scratch,
    metrics,
    metricsListener: new MetricsListener(metrics),
    proxy,
    apiRoute,
    domains,
    hostFirewall,
    nodeFirewalls,
    nodeFirewallJob,
    tenantCgroups,
    jobs,
    reconcileJobs,
    requestTimeoutMs: o.requestTimeoutMs ?? REQUEST_TIMEOUT_MS,
  };
}

/** Where the proxy reaches the API: a wildcard listen on loopback; other addresses not at all. */
function apiUpstream(address: string, port: number): string | null {
  if (address === '0.0.0.0') return `127.0.0.1:${port}`;
  if (address.startsWith('127.')) return `${address}:${port}`;
  if (address === '::' || address === '::1') return `[::1]:${port}`;
  return null;
}

/**
 * Starts the work that runs without requests: the tenant egress rules, the proxy, crash
 * watching, a first reconcile and the build runner.
 */
export async function startBackground(deps: Deps, api?: { address: string; port: number }): Promise<void> {
  // The proxy routes api.<base-domain> to the API only where svcd sees it as a loopback peer: its
  // X-Real-Ip and X-Forwarded-Proto are trusted from loopback only (api/client-ip.ts, guards.ts).
  if (api) deps.apiRoute.upstream = apiUpstream(api.address, api.port);
  // Before any workload starts (the reconcile below may start some). Production refuses to run
  // tenants without the rules; development goes on and says so (health detail too).
  try {
    await deps.hostFirewall.install();
  } catch (err) {
    if (!deps.config.dev) throw err;
    deps.log.warn({ err }, 'tenant egress rules are not installed: tenant workloads can reach the host and private networks');
  }
  // An earlier svc's allowances (before each svcd's carried its name): a running one removes its
  // own at its stop, a killed one's stay open until deleted by hand.
  const unowned = deps.hostFirewall.unownedAllowances;
  if (unowned.length > 0) deps.log.warn({ rules: unowned.slice(0, 20) }, `${String(unowned.length)} egress allowance rules of an earlier svc version: unless an svcd of that version still runs here, delete them by hand (iptables -D with their words); no svcd of this version removes them`);
  // On a swarm, every node's rules, as the periodic job puts them (under its lease: one install at
  // a time among the svcd, or the moves of FORWARD's jump could cross). A node without them runs
  // no task (node-firewall.ts); the job logs what failed and tries again every 30 s.
  if (deps.nodeFirewallJob) await deps.jobs.runOnce(deps.nodeFirewallJob);
  // Also before any workload starts, and refused alike: without it one tenant's CPU load slows
  // svcd and every other tenant (runtime/tenant-cgroups.ts).
  if (deps.tenantCgroups) {
    try {
      deps.log.info(await deps.tenantCgroups.install(), 'tenant workloads share one CPU group under a low weight');
    } catch (err) {
      if (!deps.config.dev) throw err;
      deps.log.warn({ err }, 'the tenants\' CPU weight is not set: tenant workloads compete with svcd for CPU as equals');
    }
  }
  if (deps.config.metricsListen) {
    const at = await deps.metricsListener.listen(deps.config.metricsListen);
    deps.log.info({ metrics: `http://${at.host}:${at.port}/metrics` }, 'Prometheus metrics listening');
  }
  await deps.proxy?.start();
  deps.crashes.watch();
  await deps.sessions.start();
  for (const job of deps.reconcileJobs) await deps.jobs.runOnce(job);
  deps.workloads.start();
  await deps.buildRunner.start();
}

/** At a stop, or after a start that failed: what this svcd opened or started goes (another svcd's rules stay). */
export async function closeDeps(deps: Deps): Promise<void> {
  deps.rateLimits.close();
  deps.sessions.close();
  await deps.buildRunner.close();
  deps.baseImagePrefetch.close();
  await deps.workloads.close();
  await deps.crashes.close();
  await deps.jobs.close();
  await deps.metricsListener.close();
  await deps.meteringStore.close();
  await deps.proxy?.close();
  await deps.hostFirewall.close().catch((err: unknown) => deps.log.warn({ err }, 'could not remove all of this svcd\'s egress allowances'));
  await deps.runtime.close();
  await deps.nodeFirewalls?.close();
  // Last: the builds and the requests (environment syncs) that clone into it have ended.
  const removed = await deps.scratch.close().catch((err: unknown) => deps.log.warn({ err, dir: deps.scratch.root }, 'could not remove the scratch folder'));
  if (removed === false) deps.log.info({ dir: deps.scratch.root }, 'a clone still runs in the scratch folder: it stays until the next start clears it');
  await deps.store.close();
}
