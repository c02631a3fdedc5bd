import type { Kysely } from 'kysely';
import type { Database, EnvironmentRow, EnvironmentsTable, PreviewRow } from './schema.js';
import { atomically } from './atomically.js';
import { HostNameStore } from './host-names.js';
import { givePortUp } from './published-ports.js';

/** Not its published port: that is the port claims' to give and take (published-ports.ts). */
export type EnvironmentPatch = Partial<Omit<EnvironmentsTable, 'id' | 'tenant_id' | 'created_at' | 'template_id' | 'image' | 'published_port'>>;

/** Developer environments and their previews, scoped by tenant where a tenant asks. */
export class EnvironmentStore {
  constructor(private readonly db: Kysely<Database>) {}

  async insert(row: EnvironmentRow): Promise<void> {
    await this.db.insertInto('environments').values(row).execute();
  }

  async find(tenantId: string, id: string): Promise<EnvironmentRow | undefined> {
    return this.db.selectFrom('environments').selectAll().where('id', '=', id).where('tenant_id', '=', tenantId).executeTakeFirst();
  }

  /** The environment running on a container (a warm-pool container is labelled for no tenant). */
  async findByContainer(containerId: string): Promise<EnvironmentRow | undefined> {
    return this.db.selectFrom('environments').selectAll().where('container_id', '=', containerId).executeTakeFirst();
  }

  async findAny(id: string): Promise<EnvironmentRow | undefined> {
    return this.db.selectFrom('environments').selectAll().where('id', '=', id).executeTakeFirst();
  }

  /** Oldest first. */
  async list(tenantId: string, limit: number, offset: number): Promise<EnvironmentRow[]> {
    return this.db.selectFrom('environments').selectAll().where('tenant_id', '=', tenantId).orderBy('created_at').orderBy('id').limit(limit).offset(offset).execute();
  }

  async listForTenant(tenantId: string): Promise<EnvironmentRow[]> {
    return this.db.selectFrom('environments').selectAll().where('tenant_id', '=', tenantId).execute();
  }

  async count(tenantId: string): Promise<number> {
    const r = await this.db.selectFrom('environments').select((eb) => eb.fn.countAll<number | string>().as('n')).where('tenant_id', '=', tenantId).executeTakeFirstOrThrow();
    return Number(r.n);
  }

  /** Environments whose lease ran out and that are not marked expired yet. */
  async leaseEnded(now: number): Promise<EnvironmentRow[]> {
    return this.db.selectFrom('environments').selectAll().where('lease_expires_at', '<=', now).where('status', '!=', 'expired').where('status', '!=', 'creating').execute();
  }

  /** Expired environments whose workspace is due for removal. */
  async expiredBefore(cutoff: number): Promise<EnvironmentRow[]> {
    return this.db.selectFrom('environments').selectAll().where('status', '=', 'expired').where('expired_at', '<=', cutoff).execute();
  }

  async usesWorkload(workload: string): Promise<boolean> {
    return (await this.db.selectFrom('environments').select('id').where('workload', '=', workload).executeTakeFirst()) !== undefined;
  }

  async listAll(): Promise<EnvironmentRow[]> {
    return this.db.selectFrom('environments').selectAll().execute();
  }

  async update(id: string, patch: EnvironmentPatch): Promise<void> {
    await this.db.updateTable('environments').set(patch).where('id', '=', id).execute();
  }

  /**
   * The end of a creation: running with its container, only while the environment is still
   * `creating` (false when another svcd finished it, or it was deleted).
   */
  async finishCreating(id: string, patch: EnvironmentPatch): Promise<boolean> {
    const r = await this.db.updateTable('environments').set(patch).where('id', '=', id).where('status', '=', 'creating').executeTakeFirst();
    return Number(r.numUpdatedRows) === 1;
  }

  /**
   * Also removes its previews and frees their hosts, in one transaction (the caller's, or its own);
   * its published port (on a swarm) rests from `now` (unix seconds) before it is given again.
   * With `onlyWhile`, only an environment in that status (a creation that failed, and nobody finished).
   */
  async delete(id: string, now: number, onlyWhile?: EnvironmentRow['status']): Promise<boolean> {
    return atomically(this.db, async (db) => {
      // A write, not a read, decides: it holds the row to the commit, so the status cannot change
      // between this check and the delete (a finish on another svcd waits, then finds it gone).
      const held = await db
        .updateTable('environments')
        .set((eb) => ({ status: eb.ref('status') }))
        .where('id', '=', id)
        .$if(onlyWhile !== undefined, (q) => q.where('status', '=', onlyWhile ?? 'creating'))
        .executeTakeFirst();
      if (Number(held.numUpdatedRows) !== 1) return false;
      // The previews' hosts first: deleting the environment cascades to its previews.
      await new HostNameStore(db).releasePreviewsOf(id);
      await db.deleteFrom('previews').where('environment_id', '=', id).execute();
      const r = await db
        .deleteFrom('environments')
        .where('id', '=', id)
        .$if(onlyWhile !== undefined, (q) => q.where('status', '=', onlyWhile ?? 'creating'))
        .returning('published_port')
        .executeTakeFirst();
      if (!r) return false;
      if (r.published_port !== null) await givePortUp(db, r.published_port, now, 'environments', id);
      return true;
    });
  }

  async insertPreview(row: PreviewRow): Promise<void> {
    await this.db.insertInto('previews').values(row).execute();
  }

  async previews(environmentId: string): Promise<PreviewRow[]> {
    return this.db.selectFrom('previews').selectAll().where('environment_id', '=', environmentId).orderBy('created_at').orderBy('id').execute();
  }

  /** Also frees its host, in one transaction (the caller's, or its own). */
  async deletePreview(environmentId: string, id: string): Promise<boolean> {
    return atomically(this.db, async (db) => {
      const r = await db.deleteFrom('previews').where('id', '=', id).where('environment_id', '=', environmentId).executeTakeFirst();
      if (Number(r.numDeletedRows) !== 1) return false;
      await new HostNameStore(db).release('preview', id);
      return true;
    });
  }

  /** Every preview with its environment's state, for the proxy's routes. */
  async previewRoutes(): Promise<Array<PreviewRow & { env_name: string; env_status: EnvironmentRow['status']; address: string | null; agent_port: number | null; agent_token: string | null }>> {
    return this.db
      .selectFrom('previews')
      .innerJoin('environments', 'environments.id', 'previews.environment_id')
      .selectAll('previews')
      .select(['environments.name as env_name', 'environments.status as env_status', 'environments.address as address', 'environments.published_port as agent_port', 'environments.agent_token as agent_token'])
      .execute();
  }
}
