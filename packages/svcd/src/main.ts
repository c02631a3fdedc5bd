#!/usr/bin/env node
// svcd's entry point: flags (each with its SVC_* variable) -> config -> dependencies -> server.
import type { AddressInfo } from 'node:net';
import { Command, Option } from 'commander';
import { buildServer } from './api/server.js';
import { closeDeps, createDeps, startBackground, type Deps } from './app.js';
import { DataDirLockedError, InstanceIdError, lockDataDir } from './instance.js';
import { buildConfig, ConfigError, DEFAULT_DATABASE_PORTS, DEFAULT_ENV_WARM_POOL, DEFAULT_ENV_WARM_RESERVE, DEFAULT_ENVIRONMENT_IMAGES, DEFAULT_KANBAN_ADDRESS, DEFAULT_KANBAN_IMAGE, DEFAULT_KANBAN_PORTS, DEFAULT_METERING_INTERVAL_S, DEFAULT_METERING_RETENTION_DAYS, DEFAULT_METRICS_LISTEN, DEFAULT_POSTGRES_IMAGE, DEFAULT_REDIS_IMAGE, DEFAULT_SCRATCH_BUDGET_GB, DEFAULT_SCRATCH_DIR, DEFAULT_STALLED_READER_S, DEFAULT_CONNECTIONS_PER_CLIENT, DEFAULT_WORKLOAD_LEASE_S, DEFAULT_SWARM_PORTS, DEFAULT_SWARM_HELPER_IMAGE, LETS_ENCRYPT_DIRECTORY, type RawOptions } from './config.js';
import { DEFAULT_LOG_RATE, DEFAULT_TENANT_CPU_WEIGHT, FirewallError, SANDBOX_RUNTIME, TenantCgroupError } from './runtime/index.js';
import { DEFAULT_RETENTION } from './retention/rules.js';
import { BASE_IMAGE_REUSE_S } from './builds/recent-pulls.js';

const program = new Command('svcd')
  .description('svc API server')
  .addOption(new Option('--listen <addr>', 'API listen address').env('SVC_LISTEN').default('127.0.0.1:8080'))
  .addOption(new Option('--data-dir <dir>', 'data directory (SQLite store, master key)').env('SVC_DATA_DIR').default('./data'))
  .addOption(new Option('--database-url <url>', 'PostgreSQL URL; unset means SQLite in --data-dir').env('SVC_DATABASE_URL'))
  .addOption(new Option('--base-domain <domain>', 'public base domain for service hosts').env('SVC_BASE_DOMAIN'))
  .addOption(new Option('--proxy-listen <addr>', 'public reverse proxy address; svcd runs Caddy there').env('SVC_PROXY_LISTEN'))
  .addOption(new Option('--caddy-admin <url>', "drive an operator's Caddy through this admin URL instead").env('SVC_CADDY_ADMIN'))
  .addOption(
    new Option('--proxy-answers-listen <addr>', "where svcd answers its Caddy for routes' addresses and pages (loopback, UDP and TCP; port 0: any free one; give a fixed port to an operator's Caddy)")
      .env('SVC_PROXY_ANSWERS_LISTEN')
      .default('127.0.0.1:0'),
  )
  .addOption(new Option('--tls <on|off>', 'HTTPS for every host the proxy serves, certificates from ACME on demand (needs --base-domain, --proxy-https-listen)').env('SVC_TLS').default('off'))
  .addOption(new Option('--proxy-https-listen <addr>', "the proxy's HTTPS address, with --tls on (--proxy-listen then redirects to it)").env('SVC_PROXY_HTTPS_LISTEN'))
  .addOption(new Option('--acme-ca <url>', 'ACME directory certificates come from').env('SVC_ACME_CA').default(LETS_ENCRYPT_DIRECTORY))
  .addOption(new Option('--acme-email <email>', "the ACME account's contact").env('SVC_ACME_EMAIL'))
  .addOption(new Option('--acme-ca-root <file>', "a PEM root to trust for the ACME server's own HTTPS (a private CA)").env('SVC_ACME_CA_ROOT'))
  .addOption(new Option('--tls-ask-listen <addr>', "where svcd answers Caddy's on-demand question (loopback; port 0: any free one)").env('SVC_TLS_ASK_LISTEN').default('127.0.0.1:0'))
  .addOption(new Option('--tls-storage <dir>', "where Caddy keeps certificates and the ACME account (default <data-dir>/caddy-tls); svcd processes sharing one directory order each name once").env('SVC_TLS_STORAGE'))
  .addOption(new Option('--dns-server <list>', "DNS servers (IP[:port], comma-separated) asked for custom domains' TXT records; default: the system's").env('SVC_DNS_SERVER'))
  .addOption(new Option('--dev', 'development mode: no HTTPS rule, no bootstrap token required').env('SVC_DEV'))
  .addOption(new Option('--open-registration', 'with --dev: registration needs no bootstrap token').env('SVC_OPEN_REGISTRATION'))
  .addOption(
    new Option('--sandbox <mode>', 'gVisor for tenant workloads: auto, required or off').env('SVC_SANDBOX').default('auto'),
  )
  .addOption(new Option('--docker-host <url>', 'Docker Engine address (with --runtime swarm: a manager\'s)').env('SVC_DOCKER_HOST').default('unix:///var/run/docker.sock'))
  .addOption(new Option('--runtime <kind>', 'docker (one engine) or swarm (a Docker Swarm cluster)').env('SVC_RUNTIME').default('docker'))
  .addOption(new Option('--swarm-ports <from-to>', 'with --runtime swarm: the ports services are published on, one per service, on the node that runs it').env('SVC_SWARM_PORTS').default(DEFAULT_SWARM_PORTS))
  .addOption(new Option('--swarm-helper-image <ref>', "with --runtime swarm: an image with sleep, chroot, sh, sha256sum and mv (busybox), run on every node to install svc's network rules and svc-init there").env('SVC_SWARM_HELPER_IMAGE').default(DEFAULT_SWARM_HELPER_IMAGE))
  .addOption(new Option('--swarm-published-from <cidrs>', "with --runtime swarm (required): the IPv4 networks where svcd and its proxy run, comma-separated; only they reach the services' and databases' ports on the nodes").env('SVC_SWARM_PUBLISHED_FROM'))
  .addOption(new Option('--swarm-node <list>', "with --runtime swarm: each node's Engine API, NAME=unix:///path or NAME=https://HOST:PORT, comma-separated").env('SVC_SWARM_NODE'))
  .addOption(new Option('--log-level <level>', 'pino log level').env('SVC_LOG_LEVEL').default('info'))
  .addOption(new Option('--allow-loopback-git', 'builds may clone from loopback hosts (always so with --dev)').env('SVC_ALLOW_LOOPBACK_GIT'))
  .addOption(new Option('--build-registry <host:port>', 'a loopback registry that built images are pushed to').env('SVC_BUILD_REGISTRY'))
  .addOption(new Option('--base-image-reuse <seconds>', "how long a tenant's pull of a base image serves its next builds without a pull (0: every build pulls)").env('SVC_BASE_IMAGE_REUSE').default(String(BASE_IMAGE_REUSE_S)))
  .addOption(new Option('--postgres-image <ref>', 'image of managed postgres databases').env('SVC_POSTGRES_IMAGE').default(DEFAULT_POSTGRES_IMAGE))
  .addOption(new Option('--redis-image <ref>', 'image of managed redis databases').env('SVC_REDIS_IMAGE').default(DEFAULT_REDIS_IMAGE))
  .addOption(new Option('--database-ports <from-to>', 'loopback host ports for databases').env('SVC_DATABASE_PORTS').default(DEFAULT_DATABASE_PORTS))
  .addOption(new Option('--dashboard-dir <dir>', 'the built dashboard served at / (make build writes it)').env('SVC_DASHBOARD_DIR'))
  .addOption(new Option('--kanban-image <ref>', "Node base image of the tenants' task boards").env('SVC_KANBAN_IMAGE').default(DEFAULT_KANBAN_IMAGE))
  .addOption(new Option('--kanban-ports <from-to>', 'host ports for task boards').env('SVC_KANBAN_PORTS').default(DEFAULT_KANBAN_PORTS))
  .addOption(new Option('--env-image-default <ref>', 'image of the default environment template').env('SVC_ENV_IMAGE_DEFAULT').default(DEFAULT_ENVIRONMENT_IMAGES.default))
  .addOption(new Option('--env-image-node <ref>', 'image of the node environment template').env('SVC_ENV_IMAGE_NODE').default(DEFAULT_ENVIRONMENT_IMAGES.node))
  .addOption(new Option('--env-image-python <ref>', 'image of the python environment template').env('SVC_ENV_IMAGE_PYTHON').default(DEFAULT_ENVIRONMENT_IMAGES.python))
  .addOption(new Option('--env-image-go <ref>', 'image of the go environment template').env('SVC_ENV_IMAGE_GO').default(DEFAULT_ENVIRONMENT_IMAGES.go))
  .addOption(new Option('--env-warm-pool <n>', 'environments kept started and unassigned per template, so that create is fast (0-20; 0 on a swarm)').env('SVC_ENV_WARM_POOL').default(DEFAULT_ENV_WARM_POOL))
  .addOption(new Option('--env-warm-reserve <n>', 'with a warm pool: containers kept, on its network already, for tenants that took one (the next of the template each, for 10 minutes), at most, in all (0-100)').env('SVC_ENV_WARM_RESERVE').default(DEFAULT_ENV_WARM_RESERVE))
  .addOption(new Option('--git-ca-file <path>', 'extra CA certificates (PEM) trusted for HTTPS git, besides the system ones: builds and environment sync').env('SVC_GIT_CA_FILE'))
  .addOption(new Option('--kanban-address <ip>', "the host address task boards are published on and their url names (the machine's public address to share them)").env('SVC_KANBAN_ADDRESS').default(DEFAULT_KANBAN_ADDRESS))
  .addOption(new Option('--metrics-listen <addr>', "Prometheus /metrics for operators (HOST:PORT, or off)").env('SVC_METRICS_LISTEN').default(DEFAULT_METRICS_LISTEN))
  .addOption(new Option('--metering-database-url <url>', "a PostgreSQL of its own for usage samples and rollups; unset: svc's store").env('SVC_METERING_DATABASE_URL'))
  .addOption(new Option('--metering-interval <seconds>', 'how often running containers are sampled').env('SVC_METERING_INTERVAL').default(DEFAULT_METERING_INTERVAL_S))
  .addOption(new Option('--egress-allow <cidr[:port],...>', 'private destinations tenant workloads may reach (an internal mirror, say); everything private is closed otherwise').env('SVC_EGRESS_ALLOW'))
  .addOption(new Option('--tenant-cpu-weight <weight|off>', "CPU weight of all tenant workloads together against svcd, the engine and the host (1-10000, the host's default is 100); tenants share it equally").env('SVC_TENANT_CPU_WEIGHT').default(String(DEFAULT_TENANT_CPU_WEIGHT)))
  .addOption(new Option('--tenant-init <path>', 'svc-init, the static binary that is PID 1 of services and environments (make build builds it)').env('SVC_TENANT_INIT'))
  .addOption(new Option('--stalled-reader-seconds <n>', 'end a streamed answer (followed logs, a streamed exec) whose client has taken none of it for this long while more waits, freeing its slot (1-3600)').env('SVC_STALLED_READER_SECONDS').default(String(DEFAULT_STALLED_READER_S)))
  .addOption(new Option('--connections-per-client <n>', 'connections one client address may hold open to the API at once; past them a new one is answered 429 and closed (a local proxy, from 127.0.0.1 or ::1, is not counted) (1-65535)').env('SVC_CONNECTIONS_PER_CLIENT').default(String(DEFAULT_CONNECTIONS_PER_CLIENT)))
  .addOption(new Option('--workload-lease-seconds <n>', "how long a svcd's claim on a workload it brings up holds without renewal: another svcd carries on a dead one's work this long after it died (5-300)").env('SVC_WORKLOAD_LEASE_SECONDS').default(String(DEFAULT_WORKLOAD_LEASE_S)))
  .addOption(new Option('--log-lines-per-second <n>', "lines of output a service's or environment's log takes a second; svc-init drops the rest and says how many (10-1000000)").env('SVC_LOG_LINES_PER_SECOND').default(String(DEFAULT_LOG_RATE.linesPerSecond)))
  .addOption(new Option('--log-kib-per-second <n>', "KiB of output a service's or environment's log takes a second (16-1048576)").env('SVC_LOG_KIB_PER_SECOND').default(String(DEFAULT_LOG_RATE.bytesPerSecond / 1024)))
  .addOption(new Option('--metering-retention-days <days>', 'how long hourly and daily rollups are kept').env('SVC_METERING_RETENTION_DAYS').default(DEFAULT_METERING_RETENTION_DAYS))
  .addOption(new Option('--activity-retention-days <days>', 'activity entries older than this are deleted (1-3650; each tenant also keeps only its newest 10000)').env('SVC_ACTIVITY_RETENTION_DAYS').default(String(DEFAULT_RETENTION.activityDays)))
  .addOption(new Option('--deployment-retention-days <days>', "finished deployments older than this are deleted (1-3650), except a service's newest 10 and the one it runs").env('SVC_DEPLOYMENT_RETENTION_DAYS').default(String(DEFAULT_RETENTION.deploymentDays)))
  .addOption(new Option('--build-log-retention-days <days>', 'logs of builds finished longer ago are deleted, the build records stay (1-3650)').env('SVC_BUILD_LOG_RETENTION_DAYS').default(String(DEFAULT_RETENTION.buildLogDays)))
  .addOption(new Option('--key-retention-days <days>', 'revoked API keys this long after revocation, and expired ones this long after expiry, are deleted (1-3650)').env('SVC_KEY_RETENTION_DAYS').default(String(DEFAULT_RETENTION.keyDays)))
  .addOption(new Option('--scratch-dir <dir>', 'where builds and environment syncs clone repositories; outside --data-dir (a disk of its own is best)').env('SVC_SCRATCH_DIR').default(DEFAULT_SCRATCH_DIR))
  .addOption(new Option('--scratch-budget-gb <gb>', 'clones in progress take at most this much of the scratch disk (each reserves its 500 MB cap)').env('SVC_SCRATCH_BUDGET_GB').default(DEFAULT_SCRATCH_BUDGET_GB))
  .addOption(
    new Option('--dev-rate-limit <spec>', 'with --dev only: TENANT_RPS:BURST,GLOBAL_RPS:BURST (benchmarks)').env(
      'SVC_DEV_RATE_LIMIT',
    ),
  );

/**
 * bin/svcd preloads jemalloc for svcd itself and names it in SVCD_PRELOADED (Makefile): the
 * programs svcd starts (Caddy, iptables, git) run on their own allocators, with only what the
 * operator's LD_PRELOAD held. Done before anything is spawned; svcd's own allocator is loaded.
 */
function keepPreloadToSvcd(env: NodeJS.ProcessEnv): void {
  const ours = env.SVCD_PRELOADED;
  if (ours === undefined) return;
  const theirs = (env.LD_PRELOAD ?? '').split(/[\s:]+/).filter((entry) => entry !== '' && entry !== ours);
  if (theirs.length > 0) env.LD_PRELOAD = theirs.join(' ');
  else delete env.LD_PRELOAD;
  delete env.SVCD_PRELOADED;
}

async function main(): Promise<void> {
  keepPreloadToSvcd(process.env);
  program.parse();
  let config;
  try {
    config = buildConfig(program.opts<RawOptions>(), process.env);
  } catch (err) {
    if (err instanceof ConfigError) {
      process.stderr.write(`svcd: ${err.message}\n`);
      process.exit(2);
    }
    throw err;
  }

  // First: one svcd per data directory (its instance is the directory's); the file goes as svcd exits.
  try {
    process.on('exit', lockDataDir(config.dataDir));
  } catch (err) {
    if (err instanceof DataDirLockedError) {
      process.stderr.write(`svcd: ${err.message}\n`);
      process.exit(2);
    }
    throw err;
  }

  let deps: Deps;
  try {
    deps = await createDeps(config);
  } catch (err) {
    if (err instanceof InstanceIdError) {
      process.stderr.write(`svcd: ${err.message}\n`);
      process.exit(2);
    }
    throw err;
  }
  if (config.sandbox === 'required') {
    const info = await deps.runtime.info().catch(() => null);
    if (!info?.runtimes.includes(SANDBOX_RUNTIME)) {
      process.stderr.write(`svcd: --sandbox required, but the engine has no ${SANDBOX_RUNTIME} runtime\n`);
      await closeDeps(deps);
      process.exit(2);
    }
  }
  if (config.dev) deps.log.warn('development mode: the HTTPS rule is off');
  if (config.adminTokens.length === 0 && config.bootstrapTokens.length > 0) {
    deps.log.warn('SVC_ADMIN_TOKEN is not set: operator routes accept the bootstrap token (deprecated)');
  }

  const app = await buildServer(deps);
  let address: string;
  try {
    address = await app.listen({ host: config.listen.host, port: config.listen.port });
    await startBackground(deps, app.server.address() as AddressInfo);
  } catch (err) {
    // Production runs no tenant workload without the egress rules (DECISIONS.md) or the tenants' CPU weight.
    const why =
      err instanceof FirewallError
        ? `${err.message} (svcd needs root or CAP_NET_ADMIN and iptables with Docker's DOCKER-USER chain; --dev runs without them)`
        : err instanceof TenantCgroupError
          ? `${err.message} (svcd needs root on the engine's host and a writable cgroup cpu controller; --tenant-cpu-weight off runs without it)`
          : null;
    if (why !== null) process.stderr.write(`svcd: ${why}\n`);
    // Whatever failed (a port taken, too), what started goes as at a stop (Caddy, the scratch
    // folder, this svcd's own egress allowances).
    await app.close().catch(() => {});
    await closeDeps(deps).catch((e: unknown) => deps.log.warn({ err: e }, 'closing after a failed start'));
    if (why !== null) process.exit(2);
    throw err;
  }

  let closing = false;
  const shutdown = async (signal: string) => {
    if (closing) return;
    closing = true;
    deps.log.info({ signal }, 'shutting down');
    await app.close();
    await closeDeps(deps);
    process.exit(0);
  };
  // Before the line below: whoever waits for it (a supervisor, a test) may stop svcd at once, and
  // a signal without a handler ends the process where it stands (one stop in four right after the
  // line did, before these were set).
  process.on('SIGTERM', () => void shutdown('SIGTERM'));
  process.on('SIGINT', () => void shutdown('SIGINT'));
  process.stdout.write(`svcd listening on ${address} (store: ${deps.store.dialect}${config.dev ? ', dev mode' : ''})\n`);
}

main().catch((err: unknown) => {
  process.stderr.write(`svcd: ${(err as Error).stack ?? String(err)}\n`);
  process.exit(1);
});
