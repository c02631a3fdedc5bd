import { sql, type Kysely } from 'kysely';

/**
 * Services run under the workload controller from this migration on (services/deployer.ts): each
 * service has a `workloads` row, and each deployment records the generation of that row it
 * carries out (`deployments.generation`), so that a deployment is the user-facing record of one
 * generation. The rows of existing services are written here as their records say: a deploying
 * one lags (the controller deploys it), the others are observed as they are; their unfinished
 * deployment is generation 1.
 */
export const serviceWorkloads = {
  async up(db: Kysely<unknown>): Promise<void> {
    await db.schema.alterTable('deployments').addColumn('generation', 'integer').execute();
    await db.schema.createIndex('deployments_generation').on('deployments').columns(['service_id', 'generation']).execute();
    // The newest unfinished deployment of a deploying service is what generation 1 carries out;
    // any other left unfinished (a svcd killed between superseding one and starting the next, or
    // a service no longer deploying) is ended as interrupted, so that none waits forever.
    await sql`
      UPDATE deployments SET status = 'failed', finished_at = COALESCE(started_at, created_at),
        last_error = 'interrupted: svcd stopped during this deployment; a new one was started'
      WHERE status IN ('pending', 'running')
        AND (service_id NOT IN (SELECT id FROM services WHERE status = 'deploying')
          OR id <> (SELECT MAX(d.id) FROM deployments d WHERE d.service_id = deployments.service_id AND d.status IN ('pending', 'running')))`.execute(db);
    await sql`UPDATE deployments SET generation = 1 WHERE status IN ('pending', 'running')`.execute(db);
    await sql`
      INSERT INTO workloads (id, tenant_id, kind, resource_id, spec, generation, desired_state, observed_generation,
        observed_state, driver_ref, created_at, updated_at)
      SELECT 'svc-' || id, tenant_id, 'service', id,
        '{"name":"svc-' || id || '","volumes":[],"stopTimeoutS":10}',
        1, desired_state, CASE WHEN status = 'deploying' THEN 0 ELSE 1 END,
        CASE status WHEN 'deploying' THEN 'pending' WHEN 'running' THEN 'running' WHEN 'stopped' THEN 'stopped' ELSE 'failed' END,
        container_id, created_at, updated_at
      FROM services`.execute(db);
  },
};
