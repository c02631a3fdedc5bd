import { sql, type Kysely } from 'kysely';

/**
 * The cluster node a database's or a board's data lives on (a swarm node's id): its workload is
 * pinned there, so that it never starts on an empty volume elsewhere. Null on a single engine,
 * and until it was first placed. And when a board first answered, as databases have since 0023:
 * a board that did (every existing one) holds data, and is never placed afresh.
 */
export const pinnedNodes = {
  async up(db: Kysely<unknown>): Promise<void> {
    await db.schema.alterTable('databases').addColumn('node', 'text').execute();
    await db.schema.alterTable('kanban_boards').addColumn('node', 'text').execute();
    await db.schema.alterTable('kanban_boards').addColumn('ready_at', 'bigint').execute();
    await sql`UPDATE kanban_boards SET ready_at = created_at`.execute(db);
  },
};
