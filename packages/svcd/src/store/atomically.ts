import type { Kysely } from 'kysely';
import type { Database } from './schema.js';

/**
 * Runs statements that must land together: inside the caller's transaction when `db` is one,
 * else in a transaction of their own (Kysely cannot nest them).
 */
export async function atomically<T>(db: Kysely<Database>, fn: (db: Kysely<Database>) => Promise<T>): Promise<T> {
  return db.isTransaction ? fn(db) : db.transaction().execute(fn);
}
