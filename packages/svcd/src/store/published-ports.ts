// The ports of --swarm-ports svcd gave out (on a swarm: a service's, an environment's agent's),
// each claimed by one owner for its life, and those given up lately, which rest before they are
// given again (a task still stopping on its node may hold one; a route a moment stale may name it).
import { sql, type Kysely } from 'kysely';
import { atomically } from './atomically.js';
import type { Database } from './schema.js';

/** What holds a published port: a row whose `published_port` column names it. */
export type PortHolderTable = 'services' | 'environments';

function ownerOf(table: PortHolderTable, id: string): string {
  return `${table === 'services' ? 'service' : 'environment'}:${id}`;
}

export class PublishedPortStore {
  constructor(private readonly db: Kysely<Database>) {}

  /**
   * The ports held, and those given up after `releasedAfter` (unix seconds): what a new
   * allocation must avoid. The owners' own columns too: an svcd of before the claims (during an
   * upgrade) allocates a service's port without claiming it.
   */
  async taken(releasedAfter: number): Promise<number[]> {
    const claimed = await this.db.selectFrom('port_claims').select('port').execute();
    const services = await this.db.selectFrom('services').select('published_port as port').where('published_port', 'is not', null).execute();
    const environments = await this.db.selectFrom('environments').select('published_port as port').where('published_port', 'is not', null).execute();
    const resting = await this.db.selectFrom('released_ports').select('port').where('released_at', '>', releasedAfter).execute();
    return [...new Set([...claimed, ...services, ...environments, ...resting].flatMap((r) => (r.port === null ? [] : [r.port])))];
  }

  /**
   * The owners of every tenant not given a port yet: services not deployed yet, environments not
   * run yet (each takes one at its first run on a swarm).
   */
  async awaiting(): Promise<number> {
    let n = 0;
    for (const table of ['services', 'environments'] as const) {
      const r = await this.db.selectFrom(table).select((eb) => eb.fn.countAll<number | string>().as('n')).where('published_port', 'is', null).executeTakeFirstOrThrow();
      n += Number(r.n);
    }
    return n;
  }

  /**
   * Gives the row `port` unless it has one: false when another allocation gave it one first.
   * Throws the store's unique violation when anything else holds the port (the claim's key): not
   * for use inside a caller's transaction, which on PostgreSQL the violation would abort.
   */
  async allocate(table: PortHolderTable, id: string, port: number): Promise<boolean> {
    return atomically(this.db, async (db) => {
      const r = await db.updateTable(table).set({ published_port: port }).where('id', '=', id).where('published_port', 'is', null).executeTakeFirst();
      if (Number(r.numUpdatedRows) !== 1) return false;
      await db.insertInto('port_claims').values({ port, owner: ownerOf(table, id) }).execute();
      return true;
    });
  }

  /**
   * Gives up the claims whose owner no longer holds their port (its row gone, or its column naming
   * another port or none): an svcd of before the claims (during an upgrade) deletes a service, or
   * moves its port, without giving its claim up. A claim and its owner's column are written in one
   * transaction (allocate, release, the owners' deletes), so a claim seen without its owner in one
   * statement is left over, never one being made. Its port rests from `now` as a deleted owner's
   * does. Answers how many went.
   */
  async releaseOrphanedClaims(now: number): Promise<number> {
    return atomically(this.db, async (db) => {
      const gone = await db
        .deleteFrom('port_claims')
        .where((eb) => {
          // Whether the row named by the claim's owner holds the claim's port.
          const holds = (table: PortHolderTable) =>
            eb.exists(
              eb
                .selectFrom(table)
                .select(eb.lit(1).as('held'))
                .where(sql<string>`${sql.lit(ownerOf(table, ''))} || ${sql.ref(`${table}.id`)}`, '=', eb.ref('port_claims.owner'))
                .where(sql.ref(`${table}.published_port`), '=', eb.ref('port_claims.port')),
            );
          return eb.and([eb.not(holds('services')), eb.not(holds('environments'))]);
        })
        .returning('port')
        .execute();
      for (const { port } of gone) await restFrom(db, port, now);
      return gone.length;
    });
  }

  /**
   * Takes the row's port `from` back (it rests as a deleted owner's does) so that its next
   * allocation picks one anew: false when it holds another port by now.
   */
  async release(table: PortHolderTable, id: string, from: number, now: number): Promise<boolean> {
    return atomically(this.db, async (db) => {
      const r = await db.updateTable(table).set({ published_port: null }).where('id', '=', id).where('published_port', '=', from).executeTakeFirst();
      if (Number(r.numUpdatedRows) !== 1) return false;
      await givePortUp(db, from, now, table, id);
      return true;
    });
  }
}

/**
 * A port its owner (the row `id` of `table`) gave up (deleted, or moved into --swarm-ports):
 * its claim goes (only the owner's: a claim of another is never taken), and it rests from `now`
 * before it is given again.
 */
export async function givePortUp(db: Kysely<Database>, port: number, now: number, table: PortHolderTable, id: string): Promise<void> {
  await db.deleteFrom('port_claims').where('port', '=', port).where('owner', '=', ownerOf(table, id)).execute();
  await restFrom(db, port, now);
}

/** The port rests from `now` (unix seconds) before it is given again. */
async function restFrom(db: Kysely<Database>, port: number, now: number): Promise<void> {
  await db
    .insertInto('released_ports')
    .values({ port, released_at: now })
    .onConflict((oc) => oc.column('port').doUpdateSet({ released_at: now }))
    .execute();
}
