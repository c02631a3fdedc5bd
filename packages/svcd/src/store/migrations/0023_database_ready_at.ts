import { sql, type Kysely } from 'kysely';

/**
 * When a database first answered (unix seconds): until then its volume holds no tenant data, and
 * a provisioning taken over from a dead svcd starts it again empty instead of on a half-made data
 * directory (which the image would take as made, and never serve). Existing databases count as
 * answered: their volumes are never started again empty.
 */
export const databaseReadyAt = {
  async up(db: Kysely<unknown>): Promise<void> {
    await db.schema.alterTable('databases').addColumn('ready_at', 'bigint').execute();
    await sql`UPDATE databases SET ready_at = created_at`.execute(db);
  },
};
