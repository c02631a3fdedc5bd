import { sql, type Kysely } from 'kysely';

/**
 * Environments on a swarm: svcd reaches an environment's agent at a port its node publishes for
 * it (`published_port`, from --swarm-ports, as a service's), and its workspace volume is on the
 * disk of that node (`node`, where it is pinned, as a database is). The ports of --swarm-ports are
 * now claimed in one table, whoever holds them (`service:<id>`, `environment:<id>`): its primary
 * key is what keeps a service and an environment racing for one port apart (each kind's own
 * column is unique only among its kind). The services' ports held now are claimed here first.
 */
export const environmentPorts = {
  async up(db: Kysely<unknown>): Promise<void> {
    await db.schema
      .createTable('port_claims')
      .addColumn('port', 'integer', (c) => c.primaryKey())
      .addColumn('owner', 'text', (c) => c.notNull())
      .execute();
    await sql`INSERT INTO port_claims (port, owner) SELECT published_port, 'service:' || id FROM services WHERE published_port IS NOT NULL`.execute(db);
    await db.schema.alterTable('environments').addColumn('published_port', 'integer').execute();
    await db.schema.createIndex('environments_published_port').on('environments').column('published_port').unique().execute();
    await db.schema.alterTable('environments').addColumn('node', 'text').execute();
  },
};
