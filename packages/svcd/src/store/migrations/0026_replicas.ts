import type { Kysely } from 'kysely';

/**
 * How many copies of a service run (beyond the spec): 1 for every service made before, and by
 * default. Each replica takes one service share of its tenant's quota (services.ts).
 */
export const replicas = {
  async up(db: Kysely<unknown>): Promise<void> {
    await db.schema
      .alterTable('services')
      .addColumn('replicas', 'integer', (c) => c.notNull().defaultTo(1))
      .execute();
  },
};
