import type { Migration, MigrationProvider } from 'kysely/migration';
import type { Dialect } from '../dialect.js';
import { foundation } from './0001_foundation.js';
import { services } from './0002_services.js';
import { snapshots } from './0003_snapshots.js';
import { builds } from './0004_builds.js';
import { databases } from './0005_databases.js';
import { kanban } from './0006_kanban.js';
import { environments } from './0007_environments.js';
import { warmPool } from './0008_warm_pool.js';
import { metering } from './0009_metering.js';
import { hostNames } from './0010_host_names.js';
import { sealedIdempotentResponses } from './0011_sealed_idempotent_responses.js';
import { retention } from './0012_retention.js';
import { resourceSafety } from './0013_resource_safety.js';
import { workloads } from './0014_workloads.js';
import { serviceWorkloads } from './0015_service_workloads.js';
import { buildBaseImages } from './0016_build_base_images.js';
import { environmentWorkloads } from './0017_environment_workloads.js';
import { environmentAgents } from './0018_environment_agents.js';
import { sourceArchives } from './0019_source_archives.js';
import { serviceDomains } from './0020_service_domains.js';
import { webSessions } from './0021_web_sessions.js';
import { publishedPorts } from './0022_published_ports.js';
import { databaseReadyAt } from './0023_database_ready_at.js';
import { healthChecks } from './0024_health_checks.js';
import { pinnedNodes } from './0025_pinned_nodes.js';
import { replicas } from './0026_replicas.js';
import { environmentPorts } from './0027_environment_ports.js';
import { warmReserve } from './0028_warm_reserve.js';

/**
 * Numbered migrations, applied in order on start. Listed statically (not read from a folder) so
 * they survive bundling and the compiled layout; a new migration is one more line here.
 */
export function migrationProvider(dialect: Dialect): MigrationProvider {
  const migrations: Record<string, Migration> = {
    '0001_foundation': foundation(dialect),
    '0002_services': services,
    '0003_snapshots': snapshots,
    '0004_builds': builds,
    '0005_databases': databases,
    '0006_kanban': kanban,
    '0007_environments': environments,
    '0008_warm_pool': warmPool,
    '0009_metering': metering,
    '0010_host_names': hostNames,
    '0011_sealed_idempotent_responses': sealedIdempotentResponses(dialect),
    '0012_retention': retention,
    '0013_resource_safety': resourceSafety,
    '0014_workloads': workloads,
    '0015_service_workloads': serviceWorkloads,
    '0016_build_base_images': buildBaseImages,
    '0017_environment_workloads': environmentWorkloads,
    '0018_environment_agents': environmentAgents,
    '0019_source_archives': sourceArchives(dialect),
    '0020_service_domains': serviceDomains,
    '0021_web_sessions': webSessions,
    '0022_published_ports': publishedPorts,
    '0023_database_ready_at': databaseReadyAt,
    '0024_health_checks': healthChecks,
    '0025_pinned_nodes': pinnedNodes,
    '0026_replicas': replicas,
    '0027_environment_ports': environmentPorts,
    '0028_warm_reserve': warmReserve,
  };
  return { getMigrations: () => Promise.resolve(migrations) };
}

/** The error of a failed migration as an Error: Kysely's migrator passes on whatever was thrown. */
export function migrationError(error: unknown): Error {
  return error instanceof Error ? error : new Error(String(error));
}
