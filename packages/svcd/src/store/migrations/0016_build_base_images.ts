import type { Kysely } from 'kysely';

/**
 * `builds.base_images`: the images a build's Dockerfile named (FROM and COPY --from), as JSON,
 * once it was checked. The next build of the service pulls them while git clones (a guess that
 * the Dockerfile did not change); what the new Dockerfile names is pulled as before.
 */
export const buildBaseImages = {
  async up(db: Kysely<unknown>): Promise<void> {
    await db.schema.alterTable('builds').addColumn('base_images', 'text').execute();
  },
};
