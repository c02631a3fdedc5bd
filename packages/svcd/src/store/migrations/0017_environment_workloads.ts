import { sql, type Kysely } from 'kysely';

/**
 * Environments run under the workload controller from this migration on (environments/
 * workloads.ts): each has a `workloads` row, named like its own container, whose spec names the
 * container it runs on (its own, or the warm one it was handed) and keeps it when stopped. Rows of
 * existing environments are observed as their records say; a creation under way lags, held back
 * for a creation lease's time (30 s) from its start, so that a svcd of before this migration
 * still creating it (a rolling upgrade) is not raced. The warm pool's containers get rows of
 * their own kind, `warm`.
 */
export const environmentWorkloads = {
  async up(db: Kysely<unknown>): Promise<void> {
    const container = sql`COALESCE(workload, 'svc-env-' || id)`;
    await sql`
      INSERT INTO workloads (id, tenant_id, kind, resource_id, spec, generation, desired_state, observed_generation,
        observed_state, driver_ref, retry_at_ms, created_at, updated_at)
      SELECT 'svc-env-' || id, tenant_id, 'environment', id,
        '{"name":"' || ${container} || '","volumes":["' || ${container} || '"],"stopTimeoutS":5,"keepStopped":true}',
        1, CASE WHEN status IN ('creating', 'running') THEN 'running' ELSE 'stopped' END,
        CASE WHEN status = 'creating' THEN 0 ELSE 1 END,
        CASE status WHEN 'creating' THEN 'pending' WHEN 'running' THEN 'running' ELSE 'stopped' END,
        container_id, CASE WHEN status = 'creating' THEN created_at * 1000 + 30000 ELSE NULL END, created_at, updated_at
      FROM environments`.execute(db);
    // The warm pool's containers are workloads of their own (environments/warm-pool.ts): ready
    // ones observed running, starting ones left to the controller; a claimed one is the
    // environment's already. A claim's time tells a hand-over left by a dead svcd.
    await sql`
      INSERT INTO workloads (id, tenant_id, kind, resource_id, spec, generation, desired_state, observed_generation,
        observed_state, driver_ref, created_at, updated_at)
      SELECT workload, 'warm-pool', 'warm', workload, '{"name":"' || workload || '","volumes":["' || workload || '"]}',
        1, 'running', CASE WHEN status = 'ready' THEN 1 ELSE 0 END, CASE WHEN status = 'ready' THEN 'running' ELSE 'pending' END,
        CASE WHEN status = 'ready' THEN container_id ELSE NULL END, created_at, created_at
      FROM warm_environments WHERE status IN ('starting', 'ready')`.execute(db);
    await db.schema.alterTable('warm_environments').addColumn('claimed_at', 'bigint').execute();
    await sql`UPDATE warm_environments SET claimed_at = created_at WHERE status = 'claimed'`.execute(db);
  },
};
