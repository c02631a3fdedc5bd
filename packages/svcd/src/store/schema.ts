// Table types for Kysely. Timestamps are unix seconds (integers) unless the column says _ms.
// No boolean columns: better-sqlite3 cannot bind booleans, so state is a nullable timestamp
// (revoked_at) or a text status instead.
import type { Generated, Insertable, Selectable } from 'kysely';

export interface TenantsTable {
  id: string;
  name: string;
  /** lower-cased name: uniqueness is case-insensitive on both engines. */
  name_key: string;
  email: string;
  email_key: string;
  status: 'active' | 'suspended';
  created_at: number;
  updated_at: number;
  max_services: number;
  max_databases: number;
  max_builds_concurrent: number;
  max_env_vars_per_service: number;
  max_environments: number;
  max_memory_mb: number;
  max_cpu_cores: number;
  max_disk_gb: number;
  max_domains_per_service: Generated<number>;
  api_rate_limit: number;
}
export type TenantRow = Selectable<TenantsTable>;
export type NewTenantRow = Insertable<TenantsTable>;

export interface ApiKeysTable {
  /** The keyID part of `<keyID>.<secret>`. */
  id: string;
  tenant_id: string;
  name: string;
  prefix: string;
  /** hex SHA-256 of the secret; the secret itself is never stored. */
  secret_hash: string;
  created_at: number;
  last_used_at: number | null;
  expires_at: number | null;
  revoked_at: number | null;
}
export type ApiKeyRow = Selectable<ApiKeysTable>;
export type NewApiKeyRow = Insertable<ApiKeysTable>;

export interface ActivityTable {
  /** Insertion order; the feed is newest first by this. */
  seq: Generated<number>;
  id: string;
  tenant_id: string;
  action: string;
  resource_type: string;
  resource_id: string;
  service_id: string | null;
  /** JSON object. */
  details: string;
  created_at: number;
}
export type ActivityRow = Selectable<ActivityTable>;
export type NewActivityRow = Insertable<ActivityTable>;

export interface IdempotencyKeysTable {
  tenant_id: string;
  key: string;
  method: string;
  path: string;
  body_hash: string;
  /** pending while the first request runs; done once its response is stored. */
  state: 'pending' | 'done';
  status_code: number | null;
  content_type: string | null;
  /** The answer sealed under the master key, bound to (tenant_id, key): see api/idempotency.ts. */
  response_body: string | null;
  created_at: number;
  expires_at: number;
}
export type IdempotencyRow = Selectable<IdempotencyKeysTable>;

export interface JobLocksTable {
  name: string;
  holder: string;
  expires_at_ms: number;
}

export type SessionKind = 'logs' | 'exec' | 'sync';

export interface SessionSlotsTable {
  id: string;
  tenant_id: string;
  kind: SessionKind;
  holder: string;
  expires_at_ms: number;
}

export interface TenantDiskTable {
  tenant_id: string;
  used_bytes: number;
  measured_at: number;
}

export type ServiceStatus = 'deploying' | 'running' | 'stopped' | 'failed' | 'crashed';

export interface ServicesTable {
  id: string;
  tenant_id: string;
  name: string;
  /** lower-cased name: unique per tenant. */
  name_key: string;
  image: string;
  port: number;
  status: ServiceStatus;
  /** What the tenant asked for: reconcile and crash handling restore it. */
  desired_state: 'running' | 'stopped';
  dns_label: string;
  last_error: string | null;
  container_id: string | null;
  upstream: string | null;
  crash_count: number;
  crash_window_start: number | null;
  last_crash_at: number | null;
  circuit_open_at: number | null;
  /** On a swarm: the port it is published on, on its task's node, allocated once (null: none yet, or one engine). */
  published_port: number | null;
  /** Its health check as JSON (migration 0024); null: a TCP connect to its port. */
  health_check: string | null;
  /** How many copies run (migration 0026): each takes one service share of the tenant's quota. */
  replicas: Generated<number>;
  created_at: number;
  updated_at: number;
}
export type ServiceRow = Selectable<ServicesTable>;

/** Published ports of deleted services, resting before they are given again (migration 0022). */
export interface ReleasedPortsTable {
  port: number;
  released_at: number;
}
export type NewServiceRow = Insertable<ServicesTable>;

/** Who holds each port of --swarm-ports given out (migration 0027): `service:<id>` or `environment:<id>`. */
export interface PortClaimsTable {
  port: number;
  owner: string;
}

export interface ServiceEnvTable {
  service_id: string;
  key: string;
  /** AES-256-GCM under the master key (secrets/sealer.ts). */
  sealed_value: string;
  updated_at: number;
}

export type DeploymentStatus = 'pending' | 'running' | 'succeeded' | 'failed' | 'cancelled';

export interface DeploymentsTable {
  id: string;
  service_id: string;
  tenant_id: string;
  status: DeploymentStatus;
  reason: string;
  image: string;
  /** 1: pull the image even when present (redeploy). */
  pull: number;
  /** The build whose image this deploys (reason build). */
  build_id: string | null;
  /** The generation of the service's workload this deployment carries out (migration 0015). */
  generation: number | null;
  last_error: string | null;
  created_at: number;
  started_at: number | null;
  finished_at: number | null;
}
export type DeploymentRow = Selectable<DeploymentsTable>;
export type NewDeploymentRow = Insertable<DeploymentsTable>;

export interface SnapshotsTable {
  id: string;
  tenant_id: string;
  service_id: string | null;
  name: string;
  description: string;
  image: string;
  port: number;
  /** The env as one sealed JSON object. */
  sealed_env: string;
  /** JSON array of the variable names. */
  env_keys: string;
  /** The service's health check as JSON (migration 0024); null: a TCP connect. */
  health_check: string | null;
  created_at: number;
}
export type SnapshotRow = Selectable<SnapshotsTable>;
export type NewSnapshotRow = Insertable<SnapshotsTable>;

export type BuildStatus = 'queued' | 'running' | 'succeeded' | 'failed' | 'cancelled';

export interface BuildsTable {
  id: string;
  tenant_id: string;
  service_id: string;
  status: BuildStatus;
  source_type: string;
  source_url: string;
  source_ref: string | null;
  image: string;
  commit_sha: string | null;
  last_error: string | null;
  deployment_id: string | null;
  holder: string | null;
  lease_until_ms: number | null;
  log_bytes: number;
  log_truncated: number;
  created_at: number;
  started_at: number | null;
  finished_at: number | null;
  duration_ms: number | null;
  /** When retention removed the build's log chunks (the row stays); null while the log is kept. */
  log_pruned_at: number | null;
  /** JSON: the images its Dockerfile named, once checked (migration 0016); the next build pulls them while git clones. */
  base_images: string | null;
  /** The uploaded archive an archive build is made from (migration 0019); null for git builds. */
  source_id: string | null;
}
export type BuildRow = Selectable<BuildsTable>;
export type NewBuildRow = Insertable<BuildsTable>;

/** An uploaded source archive (migration 0019), kept until the build that took it has run. */
export interface SourceArchivesTable {
  id: string;
  tenant_id: string;
  service_id: string;
  size_bytes: number;
  sha256: string;
  files: number;
  unpacked_bytes: number;
  build_id: string | null;
  created_at: number;
}
export type SourceArchiveRow = Selectable<SourceArchivesTable>;

export interface SourceArchiveChunksTable {
  source_id: string;
  seq: number;
  data: Buffer;
}

export interface BuildLogsTable {
  build_id: string;
  seq: number;
  chunk: string;
}

export type DatabaseType = 'postgres' | 'redis';
/** unavailable: on a cluster, the node its data is on is away (last_error names it). */
export type DatabaseStatus = 'provisioning' | 'running' | 'stopped' | 'failed' | 'unavailable';

export interface DatabasesTable {
  id: string;
  tenant_id: string;
  name: string;
  type: DatabaseType;
  status: DatabaseStatus;
  desired_state: 'running' | 'stopped';
  image: string;
  username: string;
  database_name: string;
  sealed_password: string;
  host_port: number;
  container_id: string | null;
  last_error: string | null;
  /** When it first answered (null: never yet; its volume holds no tenant data). */
  ready_at: number | null;
  /** The cluster node its volume is on and its workload pinned to (a swarm node's id); null on a single engine. */
  node: string | null;
  created_at: number;
  updated_at: number;
}
export type DatabaseRow = Selectable<DatabasesTable>;
export type NewDatabaseRow = Insertable<DatabasesTable>;

export type KanbanStatus = 'provisioning' | 'running' | 'stopped' | 'failed' | 'unavailable';

export interface KanbanBoardsTable {
  id: string;
  tenant_id: string;
  status: KanbanStatus;
  desired_state: 'running' | 'stopped';
  sealed_admin_token: string;
  host_port: number;
  container_id: string | null;
  last_error: string | null;
  /** The cluster node its volume is on and its workload pinned to (a swarm node's id); null on a single engine. */
  node: string | null;
  /** When it first answered (null: never yet; its volume holds no data). */
  ready_at: number | null;
  created_at: number;
  updated_at: number;
}
export type KanbanBoardRow = Selectable<KanbanBoardsTable>;

export type EnvironmentStatus = 'creating' | 'running' | 'stopped' | 'expired';

export interface EnvironmentsTable {
  id: string;
  tenant_id: string;
  name: string;
  template_id: string;
  image: string;
  status: EnvironmentStatus;
  lease_expires_at: number;
  expired_at: number | null;
  container_id: string | null;
  address: string | null;
  /** The container and volume it runs on; null: svc-env-<id>. */
  workload: string | null;
  last_error: string | null;
  created_at: number;
  updated_at: number;
  /** Its agent's token, sealed (migration 0018); null: exec goes through the engine. */
  agent_token: string | null;
  /** On a swarm: the port its node publishes its agent on (claimed in port_claims, migration 0027); null on one engine. */
  published_port: number | null;
  /** On a swarm: the node its workspace volume is on, where it is pinned; null on one engine, and until first placed. */
  node: string | null;
}
export type EnvironmentRow = Selectable<EnvironmentsTable>;

export interface PreviewsTable {
  id: string;
  environment_id: string;
  tenant_id: string;
  name: string;
  port: number;
  created_at: number;
}
export type PreviewRow = Selectable<PreviewsTable>;

/**
 * Hosts under the base domain, one namespace for services and previews: `hostname` is the part
 * before the base domain (a service's DNS label, a preview's `<name>-<environmentID>`).
 */
export interface HostNamesTable {
  hostname: string;
  tenant_id: string;
  kind: HostNameKind;
  /** The service's or the preview's id. */
  resource_id: string;
  created_at: number;
}
/** 'domain': a custom domain's full name (the others are labels under the base domain). */
export type HostNameKind = 'service' | 'preview' | 'domain';
export type HostNameRow = Selectable<HostNamesTable>;

export interface ServiceDomainsTable {
  id: string;
  tenant_id: string;
  service_id: string;
  hostname: string;
  /** The TXT record's expected value. */
  token: string;
  status: 'pending_verification' | 'issuing' | 'active' | 'failed';
  last_error: string | null;
  /** Set while the name is proven (and held in host_names); null before, and once ownership lapsed. */
  verified_at: number | null;
  certificate_expires_at: number | null;
  checked_at: number | null;
  next_check_at: number;
  /** Misses of the record in a row, each counted at least 6 hours after the one before. */
  failures: Generated<number>;
  missed_at: number | null;
  /** Since when the record's lookups fail (no answer at all), while they do. */
  lookup_failing_since: number | null;
  created_at: number;
}
export type ServiceDomainRow = Selectable<ServiceDomainsTable>;
export type NewServiceDomainRow = Insertable<ServiceDomainsTable>;

export interface WarmEnvironmentsTable {
  workload: string;
  template_id: string;
  image: string;
  container_id: string;
  /**
   * starting -> ready -> claimed (then the row goes: the environment owns the container); one
   * kept for a tenant: reserved (wanted, not started yet) -> starting -> kept -> claimed.
   */
  status: 'reserved' | 'starting' | 'ready' | 'kept' | 'claimed';
  created_at: number;
  /** When a create claimed it (migration 0017): a hand-over unfinished long after was left by a dead svcd. */
  claimed_at: number | null;
  /** Its agent's token, sealed (migration 0018); the environment that takes it takes the token. */
  agent_token: string | null;
  /** Whom it is kept for, on their network already (migration 0028); null: the shared pool, on the pool's network. */
  tenant_id: string | null;
  /** Where it answers once ready (migration 0028). */
  address: string | null;
}
export type WarmEnvironmentRow = Selectable<WarmEnvironmentsTable>;

/**
 * One reading of one running container. The cumulative counters are kept so that the next
 * reading (also after a restart of svcd) can take its deltas; the deltas are what rollups sum.
 */
export interface UsageSamplesTable {
  container_id: string;
  sampled_at: number;
  tenant_id: string;
  /** service, database, kanban, environment. */
  kind: string;
  /** The store id of what the container is (service id, ...). */
  resource_id: string;
  /** Running seconds this reading stands for (0 for a container's first). */
  seconds: number;
  cpu_micros: number;
  net_rx_bytes: number;
  net_tx_bytes: number;
  disk_read_bytes: number;
  disk_write_bytes: number;
  cpu_micros_delta: number;
  net_rx_delta: number;
  net_tx_delta: number;
  disk_read_delta: number;
  disk_write_delta: number;
  memory_bytes: number;
}
export type UsageSampleRow = Selectable<UsageSamplesTable>;

export type RollupPeriod = 'hourly' | 'daily';

export interface UsageRollupsTable {
  tenant_id: string;
  /** '' for the whole tenant (every container it runs), else one service. */
  service_id: string;
  period: RollupPeriod;
  bucket_start: number;
  cpu_seconds: number;
  memory_avg_bytes: number;
  memory_peak_bytes: number;
  net_rx_bytes: number;
  net_tx_bytes: number;
  disk_read_bytes: number;
  disk_write_bytes: number;
  running_seconds: number;
  /** Sampling moments in the bucket: the weight of memory_avg_bytes when buckets are merged. */
  ticks: number;
}
export type UsageRollupRow = Selectable<UsageRollupsTable>;

export interface SettingsTable {
  key: string;
  value: string;
}

/** Desired and observed state of one resource's workload (migration 0014, workloads/controller.ts). */
export interface WorkloadsTable {
  id: string;
  tenant_id: string;
  /** warm: the shared warm pool's; warm-kept: a warm container kept for a tenant (environments/warm-pool.ts). */
  kind: 'service' | 'database' | 'kanban' | 'environment' | 'warm' | 'warm-kept';
  resource_id: string;
  /** JSON WorkloadSpecRecord. */
  spec: string;
  generation: number;
  desired_state: 'running' | 'stopped' | 'absent';
  observed_generation: number;
  observed_state: 'pending' | 'running' | 'stopped' | 'failed' | 'lost';
  endpoint: string | null;
  driver_ref: string | null;
  lease_holder: string | null;
  lease_expires_at_ms: number | null;
  retry_at_ms: number | null;
  attempts: Generated<number>;
  last_error: string | null;
  created_at: number;
  updated_at: number;
}
export type WorkloadRow = Selectable<WorkloadsTable>;
export type NewWorkloadRow = Insertable<WorkloadsTable>;

/** A dashboard sign-in session (auth/web-sessions.ts). */
export interface WebSessionsTable {
  /** The public part of the cookie `<id>.<secret>`. */
  id: string;
  /** SHA-256 of the secret part. */
  secret_hash: string;
  tenant_id: string;
  /** The API key exchanged for it. */
  key_id: string;
  created_at: number;
  expires_at: number;
  revoked_at: number | null;
}
export type WebSessionRow = Selectable<WebSessionsTable>;

export interface Database {
  released_ports: ReleasedPortsTable;
  port_claims: PortClaimsTable;
  web_sessions: WebSessionsTable;
  tenants: TenantsTable;
  api_keys: ApiKeysTable;
  activity: ActivityTable;
  idempotency_keys: IdempotencyKeysTable;
  job_locks: JobLocksTable;
  session_slots: SessionSlotsTable;
  tenant_disk: TenantDiskTable;
  services: ServicesTable;
  service_env: ServiceEnvTable;
  deployments: DeploymentsTable;
  settings: SettingsTable;
  snapshots: SnapshotsTable;
  builds: BuildsTable;
  build_logs: BuildLogsTable;
  source_archives: SourceArchivesTable;
  source_archive_chunks: SourceArchiveChunksTable;
  databases: DatabasesTable;
  kanban_boards: KanbanBoardsTable;
  environments: EnvironmentsTable;
  previews: PreviewsTable;
  host_names: HostNamesTable;
  service_domains: ServiceDomainsTable;
  warm_environments: WarmEnvironmentsTable;
  usage_samples: UsageSamplesTable;
  usage_rollups: UsageRollupsTable;
  workloads: WorkloadsTable;
}
