import { sql, type Kysely } from 'kysely';

/**
 * `workloads`: the desired state of what svc runs for a tenant, one row per resource, and what
 * the workload controller last observed of it (workloads/controller.ts). A request (create,
 * wake, suspend, delete) writes `desired_state` and `generation + 1` in the same transaction as
 * the resource's own record; the controller claims rows whose `observed_generation` lags under
 * a lease (holder and expiry on the row), and writes back what it saw, fenced by that lease.
 *
 * Databases and task boards are driven by it from this migration on; the rows for those that
 * exist already are written here, observed as their records say.
 */
export const workloads = {
  async up(db: Kysely<unknown>): Promise<void> {
    await db.schema
      .createTable('workloads')
      .addColumn('id', 'text', (c) => c.primaryKey())
      .addColumn('tenant_id', 'text', (c) => c.notNull())
      .addColumn('kind', 'text', (c) => c.notNull())
      .addColumn('resource_id', 'text', (c) => c.notNull())
      // JSON: the engine name, image, port and named volumes (secrets are resolved at apply time).
      .addColumn('spec', 'text', (c) => c.notNull())
      .addColumn('generation', 'integer', (c) => c.notNull())
      // running | stopped | absent
      .addColumn('desired_state', 'text', (c) => c.notNull())
      .addColumn('observed_generation', 'integer', (c) => c.notNull())
      // pending | running | stopped | failed | lost
      .addColumn('observed_state', 'text', (c) => c.notNull())
      .addColumn('endpoint', 'text')
      .addColumn('driver_ref', 'text')
      .addColumn('lease_holder', 'text')
      .addColumn('lease_expires_at_ms', 'bigint')
      // After an engine fault: not tried again before this.
      .addColumn('retry_at_ms', 'bigint')
      .addColumn('attempts', 'integer', (c) => c.notNull().defaultTo(0))
      .addColumn('last_error', 'text')
      .addColumn('created_at', 'bigint', (c) => c.notNull())
      .addColumn('updated_at', 'bigint', (c) => c.notNull())
      .execute();
    await db.schema.createIndex('workloads_resource').unique().on('workloads').columns(['kind', 'resource_id']).execute();
    await db.schema.createIndex('workloads_lagging').on('workloads').columns(['observed_generation', 'generation']).execute();
    for (const [table, kind, prefix, volume] of [
      ['databases', 'database', 'svc-db-', "'svc-db-' || id"],
      ['kanban_boards', 'kanban', 'svc-kanban-', "'svc-kanban-' || id"],
    ] as const) {
      // One row per existing resource: running, stopped and failed ones observed as they are
      // (a failed one is not tried again unasked), provisioning ones left for the controller.
      await sql`
        INSERT INTO workloads (id, tenant_id, kind, resource_id, spec, generation, desired_state, observed_generation,
          observed_state, driver_ref, created_at, updated_at)
        SELECT ${sql.lit(prefix)} || id, tenant_id, ${sql.lit(kind)}, id,
          '{"name":"' || ${sql.lit(prefix)} || id || '","volumes":["' || ${sql.raw(volume)} || '"]}',
          1, desired_state, CASE WHEN status IN ('running', 'stopped', 'failed') THEN 1 ELSE 0 END,
          CASE WHEN status IN ('running', 'stopped', 'failed') THEN status ELSE 'pending' END, container_id, created_at, updated_at
        FROM ${sql.table(table)}`.execute(db);
    }
  },
};
