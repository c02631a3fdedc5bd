import { sql, type Kysely } from 'kysely';
import type { Dialect } from '../dialect.js';

/**
 * Stored idempotent answers are sealed from now on (api/idempotency.ts). The answers stored
 * before were plain text, and some hold an API key's secret: they are deleted here rather than
 * opened as plain on replay, because
 * - the secrets leave the store when svcd is upgraded, not up to 10 minutes later when the rows
 *   expire;
 * - replay then has one format only: a code path that accepts unsealed answers would also replay
 *   an answer anyone with write access to the store put there;
 * - what it costs is small: a client that retries across the upgrade, within the 10-minute
 *   window, has its request run again.
 * Claims still pending keep their row (no answer in it yet): their requests may still be running.
 */
export function sealedIdempotentResponses(dialect: Dialect) {
  return {
    async up(db: Kysely<unknown>): Promise<void> {
      if (dialect === 'sqlite') {
        // A plain DELETE leaves the rows' bytes in the file's free pages; secure_delete overwrites
        // them with zeros. Set for this statement only: zeroing every later delete costs writes.
        const before = await sql<{ secure_delete: unknown }>`PRAGMA secure_delete`.execute(db);
        await sql`PRAGMA secure_delete = ON`.execute(db);
        try {
          await deletePlainAnswers(db);
        } finally {
          await sql.raw(`PRAGMA secure_delete = ${Number(before.rows[0]?.secure_delete ?? 0)}`).execute(db);
        }
        // The WAL still holds the old page images until a checkpoint copies them back; TRUNCATE
        // also empties the WAL file.
        await sql`PRAGMA wal_checkpoint(TRUNCATE)`.execute(db);
      } else {
        // PostgreSQL keeps deleted row versions until (auto)vacuum reclaims them; VACUUM cannot
        // run inside the migration's transaction, so that is left to autovacuum.
        await deletePlainAnswers(db);
      }
    },
  };
}

async function deletePlainAnswers(db: Kysely<unknown>): Promise<void> {
  await sql`DELETE FROM idempotency_keys WHERE response_body IS NOT NULL`.execute(db);
}
