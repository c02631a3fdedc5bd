import { sql, type Kysely } from 'kysely';
import type { Database, WarmEnvironmentRow } from './schema.js';

/** Warm-pool containers: started ahead of time, owned by no tenant until claimed. */
export class WarmPoolStore {
  constructor(private readonly db: Kysely<Database>) {}

  async insert(row: WarmEnvironmentRow): Promise<void> {
    await this.db.insertInto('warm_environments').values(row).execute();
  }

  /**
   * A container kept for a tenant, to be started (by the refill); false when one is kept for it
   * of that template already (the unique index settles two claims at once).
   */
  async keep(row: WarmEnvironmentRow): Promise<boolean> {
    const r = await this.db.insertInto('warm_environments').values(row).onConflict((oc) => oc.doNothing()).executeTakeFirst();
    return Number(r.numInsertedOrUpdatedRows ?? 0) === 1;
  }

  /** Containers kept for tenants and not taken yet (wanted, starting or ready). */
  async keptCount(): Promise<number> {
    const r = await this.db.selectFrom('warm_environments').select((eb) => eb.fn.countAll<number | string>().as('n')).where('tenant_id', 'is not', null).where('status', '!=', 'claimed').executeTakeFirstOrThrow();
    return Number(r.n);
  }

  /** A kept container's start is asked for (its workload row is written in the same transaction). */
  async markStarting(workload: string, now: number): Promise<boolean> {
    const r = await this.db.updateTable('warm_environments').set({ status: 'starting', created_at: now }).where('workload', '=', workload).where('status', '=', 'reserved').executeTakeFirst();
    return Number(r.numUpdatedRows) === 1;
  }

  /** Ready (`kept`: for its tenant) on that container at that address (a ready one started again after it was lost runs on a new one); not once claimed. */
  async markReady(workload: string, containerId: string, address: string | null, status: 'ready' | 'kept'): Promise<void> {
    await this.db.updateTable('warm_environments').set({ status, container_id: containerId, address }).where('workload', '=', workload).where('status', '!=', 'claimed').execute();
  }

  async find(workload: string): Promise<WarmEnvironmentRow | undefined> {
    return this.db.selectFrom('warm_environments').selectAll().where('workload', '=', workload).executeTakeFirst();
  }

  /**
   * Ready containers of a template and image that `tenantId` may take: the one kept for it first
   * (on its network already), then the shared pool's, oldest first; never one kept for another.
   */
  async ready(templateId: string, image: string, tenantId: string): Promise<WarmEnvironmentRow[]> {
    return this.db
      .selectFrom('warm_environments')
      .selectAll()
      .where('template_id', '=', templateId)
      .where('image', '=', image)
      .where((eb) => eb.or([eb.and([eb('status', '=', 'kept'), eb('tenant_id', '=', tenantId)]), eb.and([eb('status', '=', 'ready'), eb('tenant_id', 'is', null)])]))
      // The tenant's own before the shared ones (false sorts first on both stores).
      .orderBy(sql`tenant_id IS NULL`)
      .orderBy('created_at')
      .execute();
  }

  /** Takes a ready (or kept) container; false when someone else took it first (the condition settles it). */
  async claim(workload: string, now: number): Promise<boolean> {
    const r = await this.db.updateTable('warm_environments').set({ status: 'claimed', claimed_at: now }).where('workload', '=', workload).where('status', 'in', ['ready', 'kept']).executeTakeFirst();
    return Number(r.numUpdatedRows) === 1;
  }

  async all(): Promise<WarmEnvironmentRow[]> {
    return this.db.selectFrom('warm_environments').selectAll().execute();
  }

  async delete(workload: string): Promise<void> {
    await this.db.deleteFrom('warm_environments').where('workload', '=', workload).execute();
  }
}
