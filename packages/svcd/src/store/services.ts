import type { Kysely, Updateable } from 'kysely';
import type { Database, NewServiceRow, ServiceRow, ServicesTable } from './schema.js';
import { atomically } from './atomically.js';
import { HostNameStore } from './host-names.js';
import { givePortUp } from './published-ports.js';

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
        await givePortUp(db, r.published_port, now, 'services', id);
      }
      await new HostNameStore(db).release('service', id);
      return true;
    });
  }
}
