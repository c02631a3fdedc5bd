import type { Kysely } from 'kysely';

/**
 * Retention (src/retention/): what the pruning sweep needs.
 * - builds.log_pruned_at: when a finished build's log chunks were removed, so that GET logs can
 *   say the log was pruned rather than answer an empty log as if the build printed nothing.
 * - Indexes on the timestamps the age rules select by: without them each sweep would scan the
 *   whole table to find (often) nothing to delete.
 */
export const retention = {
  async up(db: Kysely<unknown>): Promise<void> {
    await db.schema.alterTable('builds').addColumn('log_pruned_at', 'bigint').execute();
    // Logs still kept, by age and per service by list position: builds whose log is gone (most
    // old ones) are not read again by every sweep.
    await db.schema.createIndex('builds_log_kept').on('builds').columns(['log_pruned_at', 'finished_at']).execute();
    await db.schema.createIndex('builds_service_log_kept').on('builds').columns(['service_id', 'log_pruned_at', 'created_at']).execute();
    await db.schema.createIndex('activity_created').on('activity').columns(['created_at']).execute();
    // Both key rules: revoked before a cutoff, and never revoked (null) but expired before it.
    await db.schema.createIndex('api_keys_retention').on('api_keys').columns(['revoked_at', 'expires_at']).execute();
  },
};
