import type { Kysely, Updateable } from 'kysely';
import type { Database, NewServiceRow, ServiceRow, ServicesTable } from './schema.js';
import { atomically } from './atomically.js';
import { HostNameStore } from './host-names.js';

export type ServicePatch = Omit<Updateable<ServicesTable>, 'id' | 'tenant_id' | 'created_at'>;

/** Services, always scoped by tenant where a tenant asks. */
export class ServiceStore {
  constructor(private readonly db: Kysely<Database>) {}

  async insert(row: NewServiceRow): Promise<void> {
    await this.db.insertInto('services').values(row).execute();
  }

  /** A tenant's service; undefined for a missing or foreign one alike. */
  async find(tenantId: string, id: string): Promise<ServiceRow | undefined> {
    return this.db.selectFrom('services').selectAll().where('id', '=', id).where('tenant_id', '=', tenantId).executeTakeFirst();
  }

  /** Any tenant's service: for workers, which act on behalf of the platform. */
  async findAny(id: string): Promise<ServiceRow | undefined> {
    return this.db.selectFrom('services').selectAll().where('id', '=', id).executeTakeFirst();
  }

  async list(tenantId: string, limit: number, offset: number): Promise<ServiceRow[]> {
    return this.db
      .selectFrom('services')
      .selectAll()
      .where('tenant_id', '=', tenantId)
      .orderBy('created_at')
      .orderBy('id')
      .limit(limit)
      .offset(offset)
      .execute();
  }

  /**
   * The ports services are published on (on a swarm), and those of services deleted after
   * `releasedAfter` (unix seconds): what a new allocation must avoid.
   */
  async publishedPorts(releasedAfter: number): Promise<number[]> {
    const held = await this.db.selectFrom('services').select('published_port').where('published_port', 'is not', null).execute();
    const resting = await this.db.selectFrom('released_ports').select('port').where('released_at', '>', releasedAfter).execute();
    return [...held.flatMap((r) => (r.published_port === null ? [] : [r.published_port])), ...resting.map((r) => r.port)];
  }

  /** Services of every tenant not given a published port yet (each takes one at its first deploy on a swarm). */
  async countAwaitingPort(): Promise<number> {
    const r = await this.db.selectFrom('services').select((eb) => eb.fn.countAll<number | string>().as('n')).where('published_port', 'is', null).executeTakeFirstOrThrow();
    return Number(r.n);
  }

  /**
   * Gives the service `port` unless it has one: false when another deploy gave it one first.
   * Throws the store's unique violation when another service holds the port.
   */
  async allocatePublishedPort(id: string, port: number): Promise<boolean> {
    const r = await this.db.updateTable('services').set({ published_port: port }).where('id', '=', id).where('published_port', 'is', null).executeTakeFirst();
    return Number(r.numUpdatedRows) === 1;
  }

  /**
   * Takes the service's port `from` back (it rests in released_ports as a deleted service's does)
   * so that its next allocation picks one anew: false when it holds another port by now.
   */
  async releasePublishedPort(id: string, from: number, now: number): Promise<boolean> {
    return atomically(this.db, async (db) => {
      const r = await db.updateTable('services').set({ published_port: null }).where('id', '=', id).where('published_port', '=', from).executeTakeFirst();
      if (Number(r.numUpdatedRows) !== 1) return false;
      await restPort(db, from, now);
      return true;
    });
  }

  async listAll(): Promise<ServiceRow[]> {
    return this.db.selectFrom('services').selectAll().execute();
  }

  async count(tenantId: string): Promise<number> {
    const r = await this.db
      .selectFrom('services')
      .select((eb) => eb.fn.countAll<number | string>().as('n'))
      .where('tenant_id', '=', tenantId)
      .executeTakeFirstOrThrow();
    return Number(r.n);
  }

  /** The tenant's service shares taken: one per replica of each of its services. */
  async shares(tenantId: string): Promise<number> {
    const r = await this.db
      .selectFrom('services')
      .select((eb) => eb.fn.sum<number | string | null>('replicas').as('n'))
      .where('tenant_id', '=', tenantId)
      .executeTakeFirstOrThrow();
    return Number(r.n ?? 0);
  }

  async update(id: string, patch: ServicePatch): Promise<void> {
    await this.db.updateTable('services').set(patch).where('id', '=', id).execute();
  }

  /**
   * Updates the service only while it still runs the given container as desired; false when it
   * moved meanwhile (stopped, deleted, redeployed by another request).
   */
  async updateIfRunning(id: string, containerId: string, patch: ServicePatch): Promise<boolean> {
    const r = await this.db
      .updateTable('services')
      .set(patch)
      .where('id', '=', id)
      .where('status', '=', 'running')
      .where('desired_state', '=', 'running')
      .where('container_id', '=', containerId)
      .executeTakeFirst();
    return Number(r.numUpdatedRows) === 1;
  }

  /**
   * Also frees its DNS label, in one transaction (the caller's, or its own); its published port
   * (on a swarm) rests from `now` (unix seconds) before it is given again.
   */
  async delete(tenantId: string, id: string, now: number): Promise<boolean> {
    return atomically(this.db, async (db) => {
      // Its custom domains go with it, and the names they held. Deleted first, which locks their
      // rows: a proof under way (domains.ts updates the row before it claims the name) either
      // committed before, and its name is released here, or finds no row and claims nothing.
      const domains = await db.deleteFrom('service_domains').where('service_id', '=', id).where('tenant_id', '=', tenantId).returning('id').execute();
      await new HostNameStore(db).releaseDomains(domains.map((d) => d.id));
      const r = await db.deleteFrom('services').where('id', '=', id).where('tenant_id', '=', tenantId).returning('published_port').executeTakeFirst();
      if (!r) return false;
      if (r.published_port !== null) {
        await restPort(db, r.published_port, now);
      }
      await new HostNameStore(db).release('service', id);
      return true;
    });
  }
}

/** A port given up by a service (deleted, or moved into --swarm-ports) rests from `now` before it is given again. */
async function restPort(db: Kysely<Database>, port: number, now: number): Promise<void> {
  await db
    .insertInto('released_ports')
    .values({ port, released_at: now })
    .onConflict((oc) => oc.column('port').doUpdateSet({ released_at: now }))
    .execute();
}
