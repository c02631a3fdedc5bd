// The ports of --swarm-ports svcd gave out (on a swarm: a service's, an environment's agent's),
// each claimed by one owner for its life, and those given up lately, which rest before they are
// given again (a task still stopping on its node may hold one; a route a moment stale may name it).
import type { Kysely } from 'kysely';
import { atomically } from './atomically.js';
import type { Database } from './schema.js';

/** What holds a published port: a row whose `published_port` column names it. */
export type PortHolderTable = 'services' | 'environments';

function ownerOf(table: PortHolderTable, id: string): string {
  return `${table === 'services' ? 'service' : 'environment'}:${id}`;
}

export class PublishedPortStore {
  constructor(private readonly db: Kysely<Database>) {}

  /** The ports held, and those given up after `releasedAfter` (unix seconds): what a new allocation must avoid. */
  async taken(releasedAfter: number): Promise<number[]> {
    const held = await this.db.selectFrom('port_claims').select('port').execute();
    const resting = await this.db.selectFrom('released_ports').select('port').where('released_at', '>', releasedAfter).execute();
    return [...held, ...resting].map((r) => r.port);
  }

  /**
   * Gives the row `port` unless it has one: false when another allocation gave it one first.
   * Throws the store's unique violation when anything else holds the port (the claim's key).
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
   * Takes the row's port `from` back (it rests as a deleted owner's does) so that its next
   * allocation picks one anew: false when it holds another port by now.
   */
  async release(table: PortHolderTable, id: string, from: number, now: number): Promise<boolean> {
    return atomically(this.db, async (db) => {
      const r = await db.updateTable(table).set({ published_port: null }).where('id', '=', id).where('published_port', '=', from).executeTakeFirst();
      if (Number(r.numUpdatedRows) !== 1) return false;
      await givePortUp(db, from, now);
      return true;
    });
  }
}

/** A port its owner gave up (deleted, or moved into --swarm-ports): unclaimed, resting from `now` before it is given again. */
export async function givePortUp(db: Kysely<Database>, port: number, now: number): Promise<void> {
  await db.deleteFrom('port_claims').where('port', '=', port).execute();
  await db
    .insertInto('released_ports')
    .values({ port, released_at: now })
    .onConflict((oc) => oc.column('port').doUpdateSet({ released_at: now }))
    .execute();
}
