import type { Kysely } from 'kysely';
import type { Database, DeploymentRow, DeploymentStatus, DeploymentsTable, NewDeploymentRow } from './schema.js';

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
}
