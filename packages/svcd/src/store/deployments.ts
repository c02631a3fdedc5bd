import type { Kysely } from 'kysely';
import type { Database, DeploymentRow, DeploymentStatus, DeploymentsTable, NewDeploymentRow } from './schema.js';
import { nextServiceAfter, positionAt, type ListPosition } from './service-lists.js';

export class DeploymentStore {
  constructor(private readonly db: Kysely<Database>) {}

  async insert(row: NewDeploymentRow): Promise<void> {
    await this.db.insertInto('deployments').values(row).execute();
  }

  async find(id: string): Promise<DeploymentRow | undefined> {
    return this.db.selectFrom('deployments').selectAll().where('id', '=', id).executeTakeFirst();
  }

  async listForService(serviceId: string, limit: number, offset: number): Promise<DeploymentRow[]> {
    return this.db
      .selectFrom('deployments')
      .selectAll()
      .where('service_id', '=', serviceId)
      .orderBy('created_at', 'desc')
      .orderBy('id', 'desc')
      .limit(limit)
      .offset(offset)
      .execute();
  }

  /** The deployment that carries out generation `generation` of the service's workload. */
  async atGeneration(serviceId: string, generation: number): Promise<DeploymentRow | undefined> {
    return this.db.selectFrom('deployments').selectAll().where('service_id', '=', serviceId).where('generation', '=', generation).orderBy('id', 'desc').limit(1).executeTakeFirst();
  }

  /** Deployments not finished yet (pending or running), oldest first. */
  async listUnfinished(serviceId?: string): Promise<DeploymentRow[]> {
    let q = this.db.selectFrom('deployments').selectAll().where('status', 'in', ['pending', 'running']);
    if (serviceId) q = q.where('service_id', '=', serviceId);
    return q.orderBy('created_at').execute();
  }

  /** Moves a deployment only from one of `from`; false when it had moved on already. */
  async transition(id: string, from: DeploymentStatus[], patch: Partial<DeploymentsTable> & { status: DeploymentStatus }): Promise<boolean> {
    const r = await this.db.updateTable('deployments').set(patch).where('id', '=', id).where('status', 'in', from).executeTakeFirst();
    return Number(r.numUpdatedRows) === 1;
  }

  // Retention (retention/retention.ts): each call is one bounded statement. Nothing references a
  // deployment row (builds name their deployment's id as text).

  /** The next service after `serviceId` (in id order) that has deployments. */
  nextServiceAfter(serviceId: string): Promise<string | undefined> {
    return nextServiceAfter(this.db, 'deployments', serviceId);
  }

  /** The service's deployment at `offset` in its list (newest first); undefined when it has fewer. */
  positionAt(serviceId: string, offset: number): Promise<ListPosition | undefined> {
    return positionAt(this.db, 'deployments', serviceId, offset);
  }

  /** The service's newest succeeded deployment: what it runs (or last ran). */
  async newestSucceeded(serviceId: string): Promise<string | undefined> {
    const r = await this.db
      .selectFrom('deployments')
      .select('id')
      .where('service_id', '=', serviceId)
      .where('status', '=', 'succeeded')
      .orderBy('created_at', 'desc')
      .orderBy('id', 'desc')
      .limit(1)
      .executeTakeFirst();
    return r?.id;
  }

  /**
   * Deletes up to `limit` finished deployments of the service, oldest first, among those at
   * `last` or listed after it (older), that finished before `finishedBefore` or lie at
   * `lastOfAnyAge` or after it; never `except`. Unfinished ones are never deleted.
   */
  async deleteFinished(
    serviceId: string,
    rule: { last: ListPosition; finishedBefore: number; lastOfAnyAge: ListPosition | null; except: string | null; limit: number },
  ): Promise<number> {
    let batch = this.db
      .selectFrom('deployments')
      .select('id')
      .where('service_id', '=', serviceId)
      .where('status', 'in', FINISHED)
      .where((eb) => eb(eb.refTuple('created_at', 'id'), '<=', eb.tuple(rule.last.created_at, rule.last.id)))
      .where((eb) => {
        const old = eb(eb.fn.coalesce('finished_at', 'created_at'), '<', rule.finishedBefore);
        const any = rule.lastOfAnyAge;
        return any ? eb.or([old, eb(eb.refTuple('created_at', 'id'), '<=', eb.tuple(any.created_at, any.id))]) : old;
      });
    if (rule.except !== null) batch = batch.where('id', '!=', rule.except);
    const r = await this.db.deleteFrom('deployments').where('id', 'in', batch.orderBy('created_at').orderBy('id').limit(rule.limit)).executeTakeFirst();
    return Number(r.numDeletedRows);
  }
}

const FINISHED: DeploymentStatus[] = ['succeeded', 'failed', 'cancelled'];
