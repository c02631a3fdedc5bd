import type { Kysely } from 'kysely';
import type { Database, WarmEnvironmentRow } from './schema.js';

/** Warm-pool containers: started ahead of time, owned by no tenant until claimed. */
export class WarmPoolStore {
  constructor(private readonly db: Kysely<Database>) {}

  async insert(row: WarmEnvironmentRow): Promise<void> {
    await this.db.insertInto('warm_environments').values(row).execute();
  }

  /** Ready on that container (a ready one started again after it was lost runs on a new one); not once claimed. */
  async markReady(workload: string, containerId: string): Promise<void> {
    await this.db.updateTable('warm_environments').set({ status: 'ready', container_id: containerId }).where('workload', '=', workload).where('status', '!=', 'claimed').execute();
  }

  async find(workload: string): Promise<WarmEnvironmentRow | undefined> {
    return this.db.selectFrom('warm_environments').selectAll().where('workload', '=', workload).executeTakeFirst();
  }

  /** Ready containers of a template and image, oldest first. */
  async ready(templateId: string, image: string): Promise<WarmEnvironmentRow[]> {
    return this.db.selectFrom('warm_environments').selectAll().where('template_id', '=', templateId).where('image', '=', image).where('status', '=', 'ready').orderBy('created_at').execute();
  }

  /** Takes a ready container; false when someone else took it first (the condition settles it). */
  async claim(workload: string, now: number): Promise<boolean> {
    const r = await this.db.updateTable('warm_environments').set({ status: 'claimed', claimed_at: now }).where('workload', '=', workload).where('status', '=', 'ready').executeTakeFirst();
    return Number(r.numUpdatedRows) === 1;
  }

  async all(): Promise<WarmEnvironmentRow[]> {
    return this.db.selectFrom('warm_environments').selectAll().execute();
  }

  async delete(workload: string): Promise<void> {
    await this.db.deleteFrom('warm_environments').where('workload', '=', workload).execute();
  }
}
