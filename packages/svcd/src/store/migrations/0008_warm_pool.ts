import type { Kysely } from 'kysely';

export const warmPool = {
  async up(db: Kysely<unknown>): Promise<void> {
    // The container and volume an environment runs on: its own svc-env-<id> when null, or the
    // warm-pool container it was handed.
    await db.schema.alterTable('environments').addColumn('workload', 'text').execute();
    await db.schema
      .createTable('warm_environments')
      .addColumn('workload', 'text', (c) => c.primaryKey())
      .addColumn('template_id', 'text', (c) => c.notNull())
      .addColumn('image', 'text', (c) => c.notNull())
      .addColumn('container_id', 'text', (c) => c.notNull())
      // starting -> ready -> claimed (then the row goes: the environment owns the container).
      .addColumn('status', 'text', (c) => c.notNull())
      .addColumn('created_at', 'bigint', (c) => c.notNull())
      .execute();
  },
};
