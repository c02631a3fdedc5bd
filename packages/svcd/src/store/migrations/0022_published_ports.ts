import type { Kysely } from 'kysely';

/**
 * The port a service is published on, on the Swarm node that runs it (--swarm-ports): svcd
 * allocates it once, for the service's life, so that a route a moment stale can reach this
 * service or nothing, never another's task on a port the node handed on. Unique: two deploys
 * racing for one port settle here. Null on one engine (no port is published there). A deleted
 * service's port rests in `released_ports` for a while before it is given again: its task stops
 * and its route goes after the record.
 */
export const publishedPorts = {
  async up(db: Kysely<unknown>): Promise<void> {
    await db.schema.alterTable('services').addColumn('published_port', 'integer').execute();
    await db.schema.createIndex('services_published_port').on('services').column('published_port').unique().execute();
    await db.schema
      .createTable('released_ports')
      .addColumn('port', 'integer', (c) => c.primaryKey())
      .addColumn('released_at', 'bigint', (c) => c.notNull())
      .execute();
  },
};
