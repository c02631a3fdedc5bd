import type { Kysely } from 'kysely';

/**
 * A service's health check (beyond the spec): how its deploys tell that it is ready, as JSON
 * ({"type":"http","path":"/healthz"}); null is the default, a TCP connect to its port, which is
 * what every service had before. Snapshots keep it with the image, port and env.
 */
export const healthChecks = {
  async up(db: Kysely<unknown>): Promise<void> {
    await db.schema.alterTable('services').addColumn('health_check', 'text').execute();
    await db.schema.alterTable('snapshots').addColumn('health_check', 'text').execute();
  },
};
