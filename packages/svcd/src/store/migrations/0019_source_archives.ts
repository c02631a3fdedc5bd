import type { Kysely } from 'kysely';
import type { Dialect } from '../dialect.js';

/**
 * Uploaded source archives (builds from a directory, issue 25): the tar a tenant uploads is kept
 * in the store, in chunks, until a build of it has run, so that whichever svcd runs the build can
 * read it (a file on the receiving svcd's disk would tie the build to that process).
 * `builds.source_id` names the archive an archive build was made from.
 */
export function sourceArchives(dialect: Dialect) {
  const bytes = dialect === 'postgres' ? 'bytea' : 'blob';
  return {
    async up(db: Kysely<unknown>): Promise<void> {
      await db.schema
        .createTable('source_archives')
        .addColumn('id', 'text', (c) => c.primaryKey())
        .addColumn('tenant_id', 'text', (c) => c.notNull().references('tenants.id'))
        // A service's uploads go with it.
        .addColumn('service_id', 'text', (c) => c.notNull().references('services.id').onDelete('cascade'))
        .addColumn('size_bytes', 'bigint', (c) => c.notNull())
        .addColumn('sha256', 'text', (c) => c.notNull())
        .addColumn('files', 'integer', (c) => c.notNull())
        .addColumn('unpacked_bytes', 'bigint', (c) => c.notNull())
        // The build that took it; an archive builds once.
        .addColumn('build_id', 'text', (c) => c.unique())
        .addColumn('created_at', 'bigint', (c) => c.notNull())
        .execute();
      await db.schema.createIndex('source_archives_tenant').on('source_archives').columns(['tenant_id', 'created_at']).execute();
      await db.schema
        .createTable('source_archive_chunks')
        .addColumn('source_id', 'text', (c) => c.notNull().references('source_archives.id').onDelete('cascade'))
        .addColumn('seq', 'integer', (c) => c.notNull())
        .addColumn('data', bytes, (c) => c.notNull())
        .addPrimaryKeyConstraint('source_archive_chunks_pk', ['source_id', 'seq'])
        .execute();
      await db.schema.alterTable('builds').addColumn('source_id', 'text').execute();
    },
  };
}
